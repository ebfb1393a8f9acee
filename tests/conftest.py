import contextlib
import json
import os

import pytest
from typer.testing import CliRunner

from internalize.cli import app
from internalize.runs import TIMINGS

if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n: the workers share the cores, one torch thread each
    import torch

    os.environ["OMP_NUM_THREADS"] = "1"  # and each process a test starts
    torch.set_num_threads(1)


class Memory:
    """A recorder for the trainer that keeps everything in memory: logged records, (state, tensors) checkpoints."""

    def __init__(self):
        self.records, self.checkpoints = [], []

    def log(self, record):
        self.records.append(record)

    def checkpoint(self, state, tensors):
        self.checkpoints.append((state, {k: v.clone() for k, v in tensors.items()}))


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


@contextlib.contextmanager
def unpickling_refused():
    """While open, every unpickling entry point in this process raises AssertionError("unpickled"):
    pickle.load/loads (and their pure-Python twins), pickle.Unpickler, torch.load, torch.serialization.load."""
    import pickle

    import torch
    import torch.serialization

    def refuse(*args, **kwargs):
        raise AssertionError("unpickled")

    class Refused:
        def __init__(self, *args, **kwargs):
            raise AssertionError("unpickled")

    with pytest.MonkeyPatch.context() as patch:
        for name in ("load", "loads", "_load", "_loads"):
            if hasattr(pickle, name):
                patch.setattr(pickle, name, refuse)
        for name in ("Unpickler", "_Unpickler"):
            if hasattr(pickle, name):
                patch.setattr(pickle, name, Refused)
        patch.setattr(torch, "load", refuse)
        patch.setattr(torch.serialization, "load", refuse)  # today the same object as torch.load; patched anyway
        yield


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory):
    """Folders of two tiny Hugging Face models with their own tokenizers (internalize.systems.strategies.hf_models)."""
    from internalize.systems.strategies import hf_models as build

    root = tmp_path_factory.mktemp("hf")
    return {"gpt2_bpe": build.gpt2(root / "gpt2_bpe"), "gpt2_char": build.gpt2(root / "gpt2_char", "char"),
            "qwen2_bpe": build.qwen2_bpe(root / "qwen2_bpe")}
