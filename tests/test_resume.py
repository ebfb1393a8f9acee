"""Runs that survive being killed, refuse broken checkpoints, and stop on non-finite losses."""
import io
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch

from internalize.runs import TIMINGS
from internalize.sweep.report import write_report
from tests.conftest import read_summary, unpickling_refused, without_timings

LONG_SMOKE = {  # seconds-long runs that log every step and checkpoint every 7
    "logicot": ["logicot", "--smoke", "--quiet", "--set", "train.advance=steps", "--set", "train.steps_per_stage=200",
                "--set", "train.eval_every=1", "--set", "train.checkpoint_every=7"],
    "automata": ["automata_regimes", "--smoke", "--quiet", "--set", "train.eval_every=1", "--set",
                 "train.checkpoint_every=7", "--set", "curriculum.smoothing=4"],
    # in two phases, the second with its own lr, warm-up and task weights: a resume inside either
    "strategies": ["strategies_base", "--smoke", "--quiet", "--set", "train.eval_every=1", "--set",
                   "train.checkpoint_every=7", "--set",
                   "train.phases=[{steps: 50}, {steps: 30, lr: 3.0e-4, warmup_steps: 5, weights: {sorting: 3}}]"],
    # a Hugging Face model with its own tokenizer, adapted with LoRA and the frame tokens' rows
    "strategies_hf": ["strategies_base", "--smoke", "--quiet", "--set", "model.hf_path={qwen2_bpe}", "--set",
                      "train.eval_every=1", "--set", "train.checkpoint_every=7", "--set", "train.steps_per_stage=60",
                      "--set", "eval.test_size=12"],
    # responses sampled from the base: the trainer's generator draws them, so resume must replay it
    "factorize": ["strategies_factorize", "--smoke", "--quiet", "--set", "train.steps_per_stage=60", "--set",
                  "train.eval_every=1", "--set", "train.checkpoint_every=7", "--set", "data.response_source=base"],
}


def cli_process(*args):
    return subprocess.Popen([sys.executable, "-m", "internalize.cli", *map(str, args)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def metric_lines(path):
    try:
        return (path / "metrics.jsonl").read_text().count("\n")
    except FileNotFoundError:
        return 0


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(LONG_SMOKE))
def test_sigkill_at_a_random_step_then_resume_equals_an_uninterrupted_run(cli, tmp_path, model, request):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    args = LONG_SMOKE[model]
    if model == "strategies_hf":
        args = [a.format(**request.getfixturevalue("tiny_hf")) for a in args]
    assert cli("run", *args, "--out", whole).exit_code == 0
    total = metric_lines(whole)
    target = random.Random(f"kill {model}").randint(10, total - 20)  # seeded: the same kill line every run
    proc = cli_process("run", *args, "--out", killed)
    deadline = time.time() + 120
    while metric_lines(killed) < target and proc.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "summary.json").exists(), f"the run finished before the kill at line {target}"
    result = cli("run", "--resume", killed, "--quiet")
    assert result.exit_code == 0, result.output
    assert without_timings(read_summary(killed)) == without_timings(read_summary(whole)), f"killed near line {target}"
    records = lambda p: [{k: v for k, v in json.loads(line).items() if k not in TIMINGS}  # noqa: E731
                         for line in (p / "metrics.jsonl").read_text().splitlines()]
    assert records(killed) == records(whole)
    if model == "strategies_hf":  # the adapter and tokenizer it writes for the factorisation
        for name in ("adapter_model.safetensors", "tokenizer.json"):
            assert (killed / "hf" / name).read_bytes() == (whole / "hf" / name).read_bytes(), name
    if model == "factorize":  # and every generation of the final evaluation
        assert pd.read_parquet(killed / "generations.parquet").equals(pd.read_parquet(whole / "generations.parquet"))


@pytest.mark.slow
def test_resuming_a_finished_run_changes_nothing(cli, tmp_path):
    out = tmp_path / "run"
    assert cli("run", "logicot", "--smoke", "--quiet", "--out", out).exit_code == 0
    before = (out / "summary.json").read_text()
    assert cli("run", "--resume", out, "--quiet").exit_code == 0
    assert (out / "summary.json").read_text() == before


def corrupt_by_truncation(file):
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def corrupt_by_flipping_a_byte(file):
    data = bytearray(file.read_bytes())
    data[-5] ^= 0xFF  # inside the last tensor's bytes: the header still parses
    file.write_bytes(bytes(data))


def corrupt_the_header(file):
    data = bytearray(file.read_bytes())
    data[10:20] = b"#" * 10
    file.write_bytes(bytes(data))


@pytest.mark.slow
@pytest.mark.parametrize("corrupt", [corrupt_by_truncation, corrupt_by_flipping_a_byte, corrupt_the_header])
def test_a_corrupt_checkpoint_is_refused_with_one_line(cli, tmp_path, corrupt):
    out = tmp_path / "run"
    assert cli("run", "logicot", "--smoke", "--quiet", "--out", out).exit_code == 0
    (out / "summary.json").unlink()  # pretend it was interrupted
    corrupt(out / "checkpoints" / "last.safetensors")
    result = cli("run", "--resume", out)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "corrupt checkpoint" in lines[0], result.output


def test_the_unpickling_guard_refuses_every_entry_point(tmp_path):
    saved = tmp_path / "tensor.pt"
    torch.save(torch.arange(3), saved)
    data = pickle.dumps([1, 2])
    attempts = [lambda: torch.load(saved, weights_only=False), lambda: torch.load(saved),
                lambda: torch.serialization.load(saved), lambda: pickle.loads(data),
                lambda: pickle.load(io.BytesIO(data)), lambda: pickle.Unpickler(io.BytesIO(data)).load()]
    with unpickling_refused():
        for attempt in attempts:
            with pytest.raises(AssertionError, match="unpickled"):
                attempt()
    assert torch.equal(torch.load(saved), torch.arange(3)) and pickle.loads(data) == [1, 2]  # restored afterwards


class Crash(Exception):
    pass


@pytest.mark.slow
def test_a_checkpoint_holds_no_pickle_and_a_resume_reads_none(tmp_path, cli, monkeypatch):
    from internalize.runs import Run

    args = ["logicot", "--smoke", "--quiet", "--set", "train.checkpoint_every=3"]
    whole, crashed = tmp_path / "whole", tmp_path / "crashed"
    assert cli("run", *args, "--out", whole).exit_code == 0
    raw = (whole / "checkpoints" / "last.safetensors").read_bytes()
    header = json.loads(raw[8: 8 + int.from_bytes(raw[:8], "little")])
    assert {"state", "sha256"} <= set(header["__metadata__"])
    assert not [p for p in whole.rglob("*") if p.suffix in (".pt", ".pth", ".pkl", ".pickle", ".bin")]

    written, save = [], Run.checkpoint

    def crash_after_four(self, state, tensors):  # the run dies mid-stage, after its fourth checkpoint
        if len(written) == 4:
            raise Crash
        save(self, state, tensors)
        written.append(state)

    with monkeypatch.context() as patch:
        patch.setattr(Run, "checkpoint", crash_after_four)
        assert isinstance(cli("run", *args, "--out", crashed).exception, Crash)
    assert written[-1]["stage_step"] > 0 and not (crashed / "summary.json").exists()
    with unpickling_refused():  # the resume runs in this process: any unpickling raises here
        result = cli("run", "--resume", crashed, "--quiet")
    assert result.exit_code == 0, (result.output, result.exception)
    assert without_timings(read_summary(crashed)) == without_timings(read_summary(whole))


@pytest.mark.slow
def test_a_sweep_report_reads_no_pickle(tmp_path, cli):
    file = tmp_path / "sweep.yaml"
    file.write_text("experiment: logicot\nscale: smoke\ngrid:\n  task.k: [4, 8]\nseeds: [0]\nreport:\n"
                    "  figures:\n    - {x: task.k, y: samples_to_full_accuracy, logx: true, logy: true, fit: power}\n")
    out = tmp_path / "out"
    assert cli("sweep", file, "--out", out, "--workers", 1, "--quiet").exit_code == 0
    (out / "report.md").unlink()
    with unpickling_refused():
        result = cli("report", out)
        assert result.exit_code == 0, (result.output, result.exception)
        assert "2 of 2 runs finished" in (out / "report.md").read_text()
        (out / "runs").rename(out / "moved")  # no run directories: the report reads the stored table
        assert "2 of 2 runs finished" in write_report(out).read_text()
        assert len(pd.read_parquet(out / "results.parquet")) == 2


@pytest.mark.slow
def test_non_finite_loss_stops_with_a_clear_line(cli, tmp_path):
    out = tmp_path / "run"
    result = cli("run", "logicot", "--smoke", "--set", "train.lr=.inf", "--out", out)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and "non-finite loss at stage 1, step 2" in lines[0]
    assert not (out / "summary.json").exists()


def test_the_trainer_never_checkpoints_non_finite_weights():
    from internalize.config import TrainConfig
    from internalize.system import System
    from internalize.system import Stage
    from internalize.train import NonFiniteLoss, train

    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.5)  # not the global generator's draw
    saved = []

    class Diverges(System):
        """Trains fine for two steps; the third update overflows the weight."""

        num_stages, steps = 1, 0

        def __init__(self):
            self.model = model

        def stage(self, index):
            return Stage(info={}, params=list(model.parameters()), sample=lambda size, generator: None,
                         loss=lambda batch: (model.weight ** 2).sum(), validate=lambda: 0.0)

        def sample(self, batch_size, generator):
            return None

        def after_step(self):
            self.steps += 1
            if self.steps == 3:
                with torch.no_grad():
                    model.weight.fill_(float("inf"))

        def evaluate(self, stage):
            return {}

    class Keep:
        def log(self, record):
            pass

        def checkpoint(self, state, tensors):
            saved.append(tensors["model.weight"].clone())

    cfg = TrainConfig(advance="steps", steps_per_stage=100, checkpoint_every=1)
    with pytest.raises(NonFiniteLoss, match="non-finite parameters at stage 1, step 3"):
        train(Diverges(), cfg, torch.Generator().manual_seed(0), Keep(), show_progress=False)
    assert len(saved) == 2 and all(torch.isfinite(w).all() for w in saved)


@pytest.mark.slow
def test_bad_resume_requests(cli, tmp_path):
    assert cli("run", "--resume", tmp_path / "nothing").exit_code == 2
    assert "no run to resume" in cli("run", "--resume", tmp_path / "nothing").output
    out = tmp_path / "run"
    assert cli("run", "logicot", "--smoke", "--quiet", "--out", out).exit_code == 0
    result = cli("run", "logicot", "--resume", out)
    assert result.exit_code == 2 and "--resume continues a run" in result.output
    # continued under another config (as a sweep would after its file was edited): refused, naming the key
    from internalize import config as configs
    from internalize.config import ConfigError
    from internalize.runner import execute

    (out / "summary.json").unlink()
    changed = configs.load("logicot", ["train.lr=0.5"], "smoke")
    with pytest.raises(ConfigError, match=r"configured otherwise: train.lr \(.* there, 0.5 here\)"):
        execute(changed, out, show=False, resume=True)
    execute(configs.load("logicot", [], "smoke"), out, show=False, resume=True)  # as configured: continues
    assert (out / "summary.json").exists()
