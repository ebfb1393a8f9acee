"""`internalize bench`: the table's logic, the GPT-2 twin it compares against, and a --quick run."""
import json

import pytest
import torch

from internalize.bench import Line
from internalize.bench.gpt import train_flops
from internalize.models.gpt import GPT, GPTConfig


def test_a_line_says_whether_its_goal_is_met_and_by_how_much():
    assert Line("a", "", ratio=3.0, goal=2.0).verdict == "met"
    missed = Line("b", "", ratio=1.0, goal=1.6)
    assert missed.met is False and missed.verdict == "missed by 1.60x"
    assert Line("c", "", ratio=1.0).verdict == "no goal" and Line("c", "", ratio=1.0).met is None
    assert Line("d", "", goal=2.0, skipped="needs transformers").verdict == "skipped: needs transformers"


def test_the_flop_count_grows_as_it_should():
    cfg = GPTConfig(64, 64, 128, 4, 4)
    base = train_flops(cfg, 8, 32)
    assert train_flops(cfg, 16, 32) == 2 * base  # linear in the batch
    wider = train_flops(GPTConfig(64, 64, 256, 4, 4), 8, 32)
    assert 2 < wider / base < 4  # the blocks' d^2 weights dominate; the head and attention grow as d
    # 6 per weight per token: a model without attention terms at length 1
    assert train_flops(cfg, 1, 1) == 6 * (4 * 12 * 128 * 128 + 128 * 64) + 12 * 4 * 128


def test_the_gpt2_twin_gives_the_gpts_logits_and_tokens():
    pytest.importorskip("transformers")
    from internalize.models.gpt2 import to_gpt2

    torch.manual_seed(0)
    gpt = GPT(GPTConfig(40, 48, 64, 2, 4)).eval()
    for p in gpt.parameters():  # away from the near-zero init, so a swapped or transposed weight shows
        torch.nn.init.normal_(p, std=0.2)
    twin = to_gpt2(gpt)
    x = torch.randint(0, 40, (3, 20))
    with torch.no_grad():
        torch.testing.assert_close(twin(x).logits, gpt(x)[0], rtol=1e-5, atol=1e-5)
        theirs = twin.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=10,
                               min_new_tokens=10, pad_token_id=0)[:, 20:]
    assert torch.equal(theirs, gpt.generate(x, 10))


def test_lines_that_need_an_optional_package_say_so_without_it(monkeypatch):
    from internalize.bench import decode, factorize, gpt, timing

    real = timing.installed
    for module in (decode, factorize, gpt):  # as if neither peft nor transformers were installed
        monkeypatch.setattr(module, "installed", lambda name: False)
    lines = [*factorize.utilisation(True), *factorize.stacked(True), *decode.sampling(True)]
    assert [line.verdict for line in lines] == ["skipped: needs peft", "skipped: needs peft",
                                                "skipped: needs transformers"]
    assert real("torch") and not real("no_such_package_here")


def test_an_unknown_line_is_one_clear_line_and_exit_2(cli):
    out = cli("bench", "--only", "training,warp")
    assert out.exit_code == 2 and "warp" in out.output and len(out.output.strip().splitlines()) == 1


@pytest.mark.slow
def test_bench_quick_measures_every_line(cli, tmp_path):
    pytest.importorskip("transformers")
    out = cli("bench", "--quick", "--out", tmp_path / "bench.json")
    assert out.exit_code == 0, out.output
    lines = {line["name"]: line for line in json.loads((tmp_path / "bench.json").read_text())["lines"]}
    assert set(lines) == {"training_w128", "training_w256", "utilisation_w256", "sampling", "answering_b1",
                          "answering_b64", "precision_bf16", "seeds_stacked", "length_chunks", "startup", "sweep_workers",
                          "factorize_utilisation", "factorize_stacked"}
    for line in lines.values():
        assert line["skipped"] is None and line["ratio"] > 0 and line["ours"] > 0 and line["theirs"] > 0
        assert line["met"] is (None if line["goal"] is None else line["ratio"] >= line["goal"])
        assert line["name"] in out.output
    assert 0 < lines["utilisation_w256"]["ratio"] < 1.5  # a share of the measured peak
    assert lines["factorize_stacked"]["extra"]["benchmark_ratio"] > 0


@pytest.mark.slow
def test_the_curricula_benchmark_script_runs():
    """benchmarks/ scripts are not imported by the package: run one end to end, as a user would."""
    import subprocess
    import sys

    small = ["--set", "task.n=12", "--set", "task.k=8", "--set", "train.val_size=256", "--set", "eval.test_size=512"]
    out = subprocess.run([sys.executable, "benchmarks/logicot_curricula.py", "--seeds", "1", *small],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    ratios = out.stdout.strip().splitlines()[-1].split()
    assert ratios[0] == "stepwise/log_icot" and float(ratios[1]) == round(7 / 3, 2)  # 7 stages against 3 at k = 8


def test_the_factorisation_steps_flops_are_counted_as_executed():
    from torch.utils.flop_counter import FlopCounterMode

    from internalize.bench.factorize import factorize_step

    step, config = factorize_step(quick=True)
    with FlopCounterMode(display=False) as counter:
        step()
    flops = counter.get_total_flops()
    m, batch = config.model, config.train.batch_size
    # at least the generator's forward: 2 per weight of its blocks' matrices and the tied head, per token
    tokens = batch * 8  # every framed example is longer than 8 tokens
    assert flops > 2 * (m.depth * 12 * m.width ** 2 + m.width * 30) * tokens
    with FlopCounterMode(display=False) as again:
        step()
    assert again.get_total_flops() == flops  # the same batch, the same work
