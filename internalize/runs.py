"""The run directory: resolved config, metrics.jsonl, checkpoints, figures, summary.

    runs/<experiment>/<run-id>/
      config.yaml          resolved config, with seed and versions
      metrics.jsonl        one JSON object per logged step (and one per stage end)
      summary.json         final figures; its presence means the run finished
      figures/*.png
      checkpoints/last.safetensors
                           model, optimizer moments, generator state; the trainer's counters
                           and a SHA-256 of every tensor in its metadata. Nothing is unpickled.
                           A system's fixed weights (a frozen base it reads from a folder at
                           every start) are left out; the counters keep their SHA-256, checked
                           when the checkpoint is loaded.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from pathlib import Path
from typing import Optional

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from internalize.config import Config, ConfigError, to_yaml

CHECKPOINT = "last.safetensors"
PREVIOUS = "previous.safetensors"  # a stacked run's checkpoint before its last, kept until the stack's next
# a summary's wall-clock fields: everything else in it repeats exactly for the same config and seed
TIMINGS = ("train_seconds", "wall_seconds", "setup_seconds", "seconds_to_full_accuracy", "evaluation_seconds")


def atomic_write(path: Path, write) -> None:
    """Write through a temporary file in the same folder, then rename: never a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    with open(tmp, "rb+") as f:  # on disk before it takes the old file's place
        os.fsync(f.fileno())
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


def digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for key in sorted(tensors):
        t = tensors[key].detach().cpu().contiguous()
        h.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class Run:
    def __init__(self, path: Path, config: Config):
        self.path = Path(path)
        self.config = config
        self.figures = self.path / "figures"
        self.checkpoints = self.path / "checkpoints"
        self.metrics = self.path / "metrics.jsonl"
        self.lines = 0
        self.board = None
        if config.log.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ConfigError("log.tensorboard needs the tensorboard package: "
                                  "pip install 'internalize[tensorboard]'") from None
            self.board = SummaryWriter(str(self.path / "tensorboard"))

    @classmethod
    def create(cls, path: Path, config: Config) -> "Run":
        """Make a fresh run directory; refuse one that already holds anything."""
        path = Path(path)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise ConfigError(f"run directory {path} already exists and is not empty; choose another --out "
                              "(or continue it with --resume)")
        try:
            path.mkdir(parents=True, exist_ok=True)
            (path / "figures").mkdir()
            (path / "checkpoints").mkdir()
            resolved = to_yaml(config) + "\n" + json.dumps(dict(versions=versions())).join(("# ", "\n"))
            (path / "config.yaml").write_text(resolved)
        except OSError as err:
            raise ConfigError(f"cannot write run directory {path}: {err.strerror or err}") from None
        return cls(path, config)

    @classmethod
    def open(cls, path: Path, config: Config, keep_lines: int) -> "Run":
        """An existing run, to continue: metrics.jsonl is cut back to the checkpoint's lines."""
        run = cls(path, config)
        lines = run.metrics.read_text().splitlines(keepends=True) if run.metrics.exists() else []
        if len(lines) < keep_lines:
            raise ConfigError(f"{run.metrics} is shorter than its checkpoint says; cannot resume")
        atomic_write(run.metrics, lambda p: p.write_text("".join(lines[:keep_lines])))
        run.lines = keep_lines
        return run

    def log(self, record: dict) -> None:
        with open(self.metrics, "a") as f:
            f.write(json.dumps(record) + "\n")
        self.lines += 1
        if self.board is not None and "step" in record:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in ("step", "stage"):
                    self.board.add_scalar(key, value, record["step"])

    def checkpoint(self, state: dict, tensors: dict[str, torch.Tensor], keep_previous: bool = False) -> None:
        """Write the run's checkpoint; keep_previous moves the last one aside first (to PREVIOUS), for
        a stack whose runs write theirs one after another: a kill between two leaves a step they all hold."""
        tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
        meta = dict(state=json.dumps(dict(train=state, metrics_lines=self.lines)), sha256=digest(tensors))
        if keep_previous and (self.checkpoints / CHECKPOINT).exists():
            os.replace(self.checkpoints / CHECKPOINT, self.checkpoints / PREVIOUS)
        atomic_write(self.checkpoints / CHECKPOINT, lambda p: save_file(tensors, str(p), metadata=meta))

    def write_summary(self, summary: dict) -> None:
        if self.board is not None:
            self.board.close()
        atomic_write(self.path / "summary.json", lambda p: p.write_text(json.dumps(summary, indent=2)))


def read_metrics(path: Path) -> list[dict]:
    with open(Path(path) / "metrics.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_checkpoint(path: Path, name: str = CHECKPOINT) -> Optional[tuple[dict, dict[str, torch.Tensor]]]:
    """(state, tensors) of a run's checkpoint (or of the one before it: name=PREVIOUS), None if it has none.

    A truncated or altered file is a ConfigError: safetensors refuses a broken header or sizes,
    and the SHA-256 in the metadata catches changed bytes.
    """
    file = Path(path) / "checkpoints" / name
    if not file.exists():
        return None
    try:
        with safe_open(str(file), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {key: f.get_tensor(key) for key in f.keys()}
        state = json.loads(meta["state"])
        expected = meta["sha256"]
    except (SafetensorError, OSError, ValueError, KeyError, RuntimeError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"corrupt checkpoint {file}: {reason}") from None
    if digest(tensors) != expected:
        raise ConfigError(f"corrupt checkpoint {file}: its tensors do not match their checksum")
    return state, tensors


def model_tensors(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], set[str]]:
    """The model's state, each storage once (tied weights are saved under their first name), and the aliases."""
    unique, aliases, seen = {}, set(), set()
    for key, value in model.state_dict().items():
        if value.data_ptr() in seen:
            aliases.add(key)
        else:
            seen.add(value.data_ptr())
            unique[key] = value
    return unique, aliases


def fixed_digest(model: torch.nn.Module, fixed: set[str]) -> str:
    """SHA-256 of the model's tensors named in `fixed` ("" when there are none)."""
    if not fixed:
        return ""
    state = model.state_dict()
    return digest({k: state[k] for k in fixed if k in state})


def frozen_names(model: torch.nn.Module) -> set[str]:
    """The state-dict names (tied aliases included) of the model's parameters that do not learn."""
    return {n for n, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}


def load_weights(model: torch.nn.Module, tensors: dict[str, torch.Tensor], fixed: set[str] = frozenset(),
                 fixed_sha256: str = "") -> None:
    """Load a snapshot's `model.*` tensors into `model` (tied weights come with their first name);
    ValueError when they do not fit it. A snapshot may leave out the `fixed` tensors, which the model
    already holds: then they must be the ones it was trained over (`fixed_sha256`)."""
    try:
        missing, unexpected = model.load_state_dict(
            {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, strict=False)
    except RuntimeError as err:  # a shape differs
        raise ValueError(f"the checkpoint does not fit the model: {str(err).splitlines()[-1].strip()}") from None
    if unexpected or set(missing) - model_tensors(model)[1] - set(fixed):
        raise ValueError(f"the checkpoint does not fit the model: missing {missing}, unexpected {unexpected}")
    if set(missing) & set(fixed) and fixed_digest(model, set(fixed)) != fixed_sha256:
        raise ValueError("the frozen weights this model reads (model.hf_path, model.base) are not the ones the "
                         "checkpoint was trained over: they changed since, or were drawn from another seed")


def differences(saved: Config, wanted: Config) -> list[str]:
    """The dotted keys whose values differ between two configs (the scale's name aside: a run's
    settings are what it ran with, whichever scale or overrides gave them)."""
    def flat(tree: dict, prefix: str = "") -> dict:
        out = {}
        for key, value in tree.items():
            if isinstance(value, dict) and value:
                out.update(flat(value, f"{prefix}{key}."))
            else:
                out[f"{prefix}{key}"] = value
        return out

    a, b = (flat(c.model_dump(mode="json")) for c in (saved, wanted))
    return sorted(k for k in a.keys() | b.keys() if k != "scale" and a.get(k) != b.get(k))


def check_same(path: Path, config: Config) -> None:
    """Refuse to continue, or to reuse, the run at `path` when it was configured otherwise than
    `config` (a sweep file edited since its runs started, say): one ConfigError naming the keys."""
    from internalize.config import load

    if not (path / "config.yaml").exists():  # nothing to check against (a row kept without its run)
        return
    try:
        saved = load(str(path / "config.yaml"))
    except ConfigError as err:
        raise ConfigError(f"{path} was written by other code and cannot be checked ({err}); "
                          "remove it or choose another directory") from None
    changed = differences(saved, config)
    if changed:
        shown = ", ".join(f"{k} ({_short(saved, k)} there, {_short(config, k)} here)" for k in changed[:3])
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        raise ConfigError(f"{path} was configured otherwise: {shown}{more}; remove it or choose another directory")


def _short(config: Config, key: str) -> str:
    value = config.model_dump(mode="json")
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def start_from(model: torch.nn.Module, folder: Path, key: str = "model.init", fixed: set[str] = frozenset(),
               longer: bool = False) -> dict:
    """Load the weights of the finished run at `folder` into `model` and return its checkpoint's state;
    a ConfigError naming the config `key` that gave the folder when it holds none that fit (`fixed`: as
    in load_weights). `longer`: the model may read longer sequences than the run did (a model with
    `fill_positions` keeps its own rows for the positions the run never saw)."""
    if not (folder / "config.yaml").is_file():
        raise ConfigError(f"{key}: {folder} is not a run directory (no config.yaml)")
    found = load_checkpoint(folder)
    if found is None:
        raise ConfigError(f"{key}: {folder} has no checkpoint")
    tensors = model.fill_positions(found[1]) if longer and hasattr(model, "fill_positions") else found[1]
    try:
        load_weights(model, tensors, fixed, found[0]["train"].get("fixed", ""))
    except ValueError as err:
        raise ConfigError(f"{key}: {folder}: {err}") from None
    return found[0]
