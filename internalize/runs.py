"""The run directory: resolved config, metrics.jsonl, checkpoints, figures, summary.

    runs/<experiment>/<run-id>/
      config.yaml          resolved config, with seed and versions
      metrics.jsonl        one JSON object per logged step (and one per stage end)
      summary.json         final figures
      figures/*.png
      checkpoints/         model.safetensors + state.json; nothing is ever unpickled
"""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Callable

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from internalize.config import Config, ConfigError, to_yaml


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file in the same folder, then rename: never a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def default_path(root: Path, config: Config) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = root / config.experiment / f"{stamp}-s{config.seed}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}-{i}")
    return path


def versions() -> dict:
    from internalize import __version__

    return dict(internalize=__version__, torch=torch.__version__, python=platform.python_version())


class Run:
    def __init__(self, path: Path, tensors: Callable[[], dict[str, torch.Tensor]]):
        self.path = path
        self.tensors = tensors
        self.figures = path / "figures"
        self.checkpoints = path / "checkpoints"

    @classmethod
    def create(cls, path: Path, config: Config, tensors: Callable[[], dict[str, torch.Tensor]]) -> "Run":
        """Make a fresh run directory; refuse one that already holds anything."""
        path = Path(path)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise ConfigError(f"run directory {path} already exists and is not empty; choose another --out")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ConfigError(f"cannot create run directory {path}: {err.strerror}") from None
        run = cls(path, tensors)
        run.figures.mkdir()
        run.checkpoints.mkdir()
        resolved = to_yaml(config) + "\n" + json.dumps(dict(versions=versions())).join(("# ", "\n"))
        (path / "config.yaml").write_text(resolved)
        return run

    def log(self, record: dict) -> None:
        with open(self.path / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    def checkpoint(self, state: dict) -> None:
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.tensors().items()}
        atomic_write(self.checkpoints / "model.safetensors", lambda p: save_file(tensors, str(p)))
        atomic_write(self.checkpoints / "state.json", lambda p: p.write_text(json.dumps(state)))

    def write_summary(self, summary: dict) -> None:
        atomic_write(self.path / "summary.json", lambda p: p.write_text(json.dumps(summary, indent=2)))


def read_metrics(path: Path) -> list[dict]:
    with open(Path(path) / "metrics.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """Read a safetensors checkpoint; a missing, truncated or altered file is a ConfigError."""
    try:
        return load_file(str(path))
    except FileNotFoundError:
        raise ConfigError(f"no checkpoint at {path}") from None
    except (SafetensorError, OSError, ValueError) as err:
        raise ConfigError(f"corrupt checkpoint {path}: {err}") from None
