import json

import pytest
from typer.testing import CliRunner

from internalize.cli import app
from internalize.runner import TIMINGS


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [str(a) for a in args])

    return invoke


def read_summary(path):
    return json.loads((path / "summary.json").read_text())


def without_timings(summary):
    """A summary with its wall-clock figures dropped: what must repeat exactly."""
    drop = lambda d: {k: v for k, v in d.items() if k not in TIMINGS}  # noqa: E731
    return {**drop(summary), "per_stage": [drop(s) for s in summary["per_stage"]]}
