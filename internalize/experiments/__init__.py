"""The experiment registry: the one place (with the command line) that knows every part."""
from __future__ import annotations

from internalize.config import Config


def build(config: Config):
    """The system a config describes, ready for the trainer."""
    from internalize.experiments.logicot import LogICoTSystem

    systems = {"logicot": LogICoTSystem}
    return systems[config.model.name](config)
