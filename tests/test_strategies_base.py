"""The base model's training stream: task.fresh draws new examples, never a held-out input."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from internalize.config import ConfigError, load
from internalize.registry import build
from internalize.systems.strategies.benchmark import TASKS, prompt, unframe, validate


def system(*overrides):
    return build(load("strategies_base", scale="smoke", overrides=["task.fresh=true", *overrides]))


def test_fresh_examples_are_valid_traces_of_unseen_inputs():
    s = system("task.per_task=400")  # 40 validation and 40 test inputs a task to refuse
    frame = s.bench.fresh_frame(3000, torch.Generator().manual_seed(0))
    assert len(frame) == 3000
    train_inputs = set(s.bench.frames["train"]["input"])
    fresh_seen = 0
    for text in frame["text"]:
        x, trace = unframe(text)
        task = next(name for name in s.bench.names if validate(name, x, trace).valid)
        assert (task, x) not in s.bench.held_out
        fresh_seen += x not in train_inputs
    assert fresh_seen > 1000  # mostly inputs the train split does not hold
    assert max(len(s.bench.tokenizer.encode(t)) for t in frame["text"]) <= s.bench.longest


def test_the_held_out_set_is_the_validation_and_test_inputs():
    s = system()
    for split in ("validation", "test"):
        for task, x in zip(s.bench.frames[split]["task"], s.bench.frames[split]["input"]):
            assert (task, x) in s.bench.held_out
    assert not any((t, x) in s.bench.held_out for t, x in zip(s.bench.frames["train"]["task"], s.bench.frames["train"]["input"]))


def test_fresh_batches_follow_the_generator_and_cover_every_task():
    s = system("task.per_task=400")
    a = s.bench.sample(64, torch.Generator().manual_seed(5))
    b = s.bench.sample(64, torch.Generator().manual_seed(5))
    c = s.bench.sample(64, torch.Generator().manual_seed(6))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0][:, :10], c[0][:, :10])
    frame = s.bench.fresh_frame(600, torch.Generator().manual_seed(1))
    tasks = {next(n for n in TASKS if validate(n, *unframe(t)).valid) for t in frame["text"]}
    assert tasks == set(TASKS)


def test_without_fresh_batches_come_from_the_train_split():
    s = build(load("strategies_base", scale="smoke", overrides=["task.fresh=false"]))
    tokens, _ = s.bench.sample(32, torch.Generator().manual_seed(0))
    train = {tuple(row[row != s.bench.tokenizer.pad_id].tolist()) for row in s.bench.data["train"][0]}
    assert all(tuple(row[row != s.bench.tokenizer.pad_id].tolist()) in train for row in tokens)


def task_of(text: str) -> str:
    return next(n for n in TASKS if validate(n, *unframe(text)).valid)


def test_task_weights_set_how_often_each_task_is_drawn():
    s = system("task.per_task=400", "task.tasks=[list_sum,sorting,addition]", "task.weights={list_sum: 4}")
    drawn = [task_of(t) for t in s.bench.fresh_frame(3000, torch.Generator().manual_seed(2))["text"]]
    assert abs(drawn.count("list_sum") / 3000 - 4 / 6) < 0.03
    assert abs(drawn.count("sorting") / 3000 - 1 / 6) < 0.03
    # from the train split too: a task's rows share its weight, whatever their number
    s = build(load("strategies_base", scale="smoke", overrides=[
        "task.fresh=false", "task.per_task=400", "task.tasks=[list_sum,sorting]", "task.weights={sorting: 3}"]))
    rows = torch.multinomial(s.bench.row_weights, 4000, replacement=True, generator=torch.Generator().manual_seed(0))
    share = (s.bench.frames["train"]["task"].iloc[rows.tolist()] == "sorting").mean()
    assert abs(share - 0.75) < 0.03
    tokens, _ = s.bench.sample(64, torch.Generator().manual_seed(0))
    assert tokens.shape[0] == 64


@pytest.mark.slow
def test_model_init_starts_from_a_runs_weights(cli, tmp_path):
    from internalize.runs import load_checkpoint, start_from

    assert cli("run", "strategies_base", "--smoke", "--out", tmp_path / "a").exit_code == 0
    saved = load_checkpoint(tmp_path / "a")[1]
    model = system().model
    weights = {k[6:]: v for k, v in saved.items() if k.startswith("model.")}
    assert not torch.equal(model.state_dict()["tok.weight"], weights["tok.weight"])
    start_from(model, tmp_path / "a")
    assert all(torch.equal(model.state_dict()[k], v) for k, v in weights.items())
    out = cli("run", "strategies_base", "--smoke", "--set", f"model.init={tmp_path / 'a'}", "--out", tmp_path / "b")
    assert out.exit_code == 0, out.output
    wider = cli("run", "strategies_base", "--smoke", "--set", "model.width=48", "--set",
                f"model.init={tmp_path / 'a'}", "--out", tmp_path / "c")
    assert wider.exit_code == 2 and "model.init" in wider.output and len(wider.output.strip().splitlines()) == 1
    assert not (tmp_path / "c").exists()


@pytest.mark.slow
def test_a_continuation_in_a_longer_format_keeps_the_runs_positions_and_draws_the_new_ones(cli, tmp_path):
    from internalize.runs import load_checkpoint, start_from

    assert cli("run", "strategies_base", "--smoke", "--out", tmp_path / "a").exit_code == 0
    saved = load_checkpoint(tmp_path / "a")[1]
    longer = system("task.formats={grid_path: choices}").model
    rows = saved["model.pos.weight"].shape[0]
    assert longer.cfg.max_len > rows  # grid paths' choices traces are the longer ones
    fresh = longer.pos.weight.detach().clone()
    start_from(longer, tmp_path / "a", longer=True)
    assert torch.equal(longer.pos.weight[:rows], saved["model.pos.weight"])
    assert torch.equal(longer.pos.weight[rows:], fresh[rows:])  # the positions the run never saw: as drawn
    assert torch.equal(longer.tok.weight, saved["model.tok.weight"])
    with pytest.raises(ConfigError, match="model.init"):  # the evaluation and model.base read only what fits
        start_from(system("task.formats={grid_path: choices}").model, tmp_path / "a")
    out = cli("run", "strategies_base", "--smoke", "--set", "task.formats={grid_path: choices}",
              "--set", f"model.init={tmp_path / 'a'}", "--out", tmp_path / "b")
    assert out.exit_code == 0, out.output
    # the other way the checkpoint holds positions the model has no room for: refused, in one line
    shorter = cli("run", "strategies_base", "--smoke", "--set", f"model.init={tmp_path / 'b'}", "--out", tmp_path / "c")
    assert shorter.exit_code == 2 and "model.init" in shorter.output and len(shorter.output.strip().splitlines()) == 1


def test_length_chunks_give_each_row_the_loss_it_gets_alone():
    s = system("task.per_task=400", "train.length_chunks=1")
    tokens, response = s.bench.sample(48, torch.Generator().manual_seed(3))
    whole = s.response_losses(tokens, response)
    alone = torch.stack([s.response_losses(tokens[i:i + 1], response[i:i + 1]) for i in range(len(tokens))])
    s.config.train.length_chunks = 5  # 48 rows in groups of 10, 10, 10, 10, 8
    chunked = s.response_losses(tokens, response)
    torch.testing.assert_close(chunked, whole)
    torch.testing.assert_close(chunked, alone.squeeze(1))
    # the gradient is the same too: chunking changes only how much padding is computed
    grads = []
    for chunks in (1, 5):
        s.config.train.length_chunks = chunks
        s.model.zero_grad()
        s.loss_of((tokens, response)).backward()
        grads.append(torch.cat([p.grad.flatten() for p in s.model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1])


def test_generation_budgets_each_prompt_by_its_own_length():
    # a batch decodes only as far as its widest prompt leaves positions: a short prompt with a long trace
    # must not share a batch with a long prompt (it did, and lost its trace's end: "never closes")
    s = system("task.per_task=400")
    test = s.bench.test.reset_index(drop=True)
    width = [len(s.bench.tokenizer.encode(prompt(x))) for x in test["input"]]
    wide, short = max(range(len(test)), key=width.__getitem__), min(range(len(test)), key=width.__getitem__)
    assert width[wide] - width[short] > 9  # batched together, the short prompt's budget is cut below its need
    frame = test.iloc[[wide, short] * 3].reset_index(drop=True)
    # the longest trace the short prompt can have: the framed sequence as long as the longest there is
    frame.loc[frame.index % 2 == 1, "trace"] = "1" * (s.bench.longest - width[short] - 2)

    def teacher(ids, mask, steps, temperature, generator, rows):  # writes each row's trace, as far as allowed
        out = torch.full((ids.shape[0], steps), s.bench.tokenizer.id("<eos>"))
        for k, i in enumerate(torch.arange(len(frame))[rows].tolist()):
            written = s.bench.tokenizer.encode(frame["trace"][i] + "</y>")[:steps]
            out[k, :len(written)] = torch.tensor(written)
        return out

    assert s.bench.generate(teacher, frame, 1.0, torch.Generator(), batch=2) == frame["trace"].tolist()


class Uniform(torch.nn.Module):
    """Every next token equally likely: a trace of n characters and </y> has probability V^-(n+1)."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab

    def forward(self, ids):
        return torch.zeros(*ids.shape, self.vocab), None


def test_exact_shares_score_each_canonical_trace_once_up_to_its_closing():
    s = system("task.per_task=400")
    s.model = Uniform(len(s.bench.tokenizer))
    found = s.exact_shares()
    vocab = len(s.bench.tokenizer)
    coinciding = 0
    for name in s.bench.names:
        rows = s.bench.test[s.bench.test["task"] == name]
        mass = dict.fromkeys(TASKS[name].strategies, 0.0)
        for problem in rows["problem"]:
            traces = {st: t for st, t in s.bench.tasks[name].traces(json.loads(problem)).items() if t is not None}
            for trace in set(traces.values()):
                writers = [st for st, t in traces.items() if t == trace]
                coinciding += len(writers) > 1
                for st in writers:  # len(trace) characters and </y>, one token each; <eos> not scored
                    mass[st] += vocab ** -(len(s.bench.tokenizer.encode(trace)) + 1) / len(writers)
        total = sum(mass.values())
        assert abs(found[name]["fidelity"] - total / len(rows)) <= 1e-3 * total / len(rows)
        for st, share in found[name]["shares"].items():
            assert abs(share - mass[st] / total) < 1e-3
    assert coinciding > 0  # the even split of a trace two strategies write was exercised
    head = s.bench.test.head(8)
    for found_row, task, problem in zip(s.strategy_mass(head), head["task"], head["problem"]):
        traces = {st: t for st, t in s.bench.tasks[task].traces(json.loads(problem)).items() if t is not None}
        for st, trace in traces.items():
            writers = sum(t == trace for t in traces.values())
            expected = vocab ** -(len(s.bench.tokenizer.encode(trace)) + 1) / writers
            assert found_row[st] == pytest.approx(expected, rel=1e-3)


def test_the_base_samples_script_reads_a_lean_only_where_the_strategy_follows_the_input():
    import importlib.util

    spec = importlib.util.spec_from_file_location("base_samples", Path(__file__).parents[1] / "scripts" / "base_samples.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    same = script.strategy_lean([{"a": 0.2, "b": 0.6}, {"a": 0.1, "b": 0.3}])  # p(s | x) = (1/4, 3/4) on both
    assert same["inputs"] == 2 and same["tv"] == pytest.approx(0) and same["mutual_information"] == pytest.approx(0)
    split = script.strategy_lean([{"a": 0.9, "b": 0.0}, {"a": 0.0, "b": 0.5}, {"a": 0.0, "b": 0.0}])
    assert split["inputs"] == 2 and split["tv"] == pytest.approx(0.5)
    assert split["mutual_information"] == pytest.approx(np.log(2)) == pytest.approx(split["entropy"])


def test_phases_train_in_stages_each_with_its_own_weights_and_budget(tmp_path):
    from internalize.train import Discard, train

    s = system("task.per_task=400", "task.tasks=[list_sum,sorting]",
               "train.phases=[{steps: 3, weights: {list_sum: 9}}, {steps: 2, lr: 3.0e-4, weights: {sorting: 9}}, {steps: 1}]",
               "task.weights={sorting: 1.5}")
    assert s.num_stages == 3
    shares = []
    for index in range(3):
        stage = s.stage(index)
        drawn = [task_of(t) for t in s.bench.fresh_frame(1000, torch.Generator().manual_seed(index))["text"]]
        shares.append(drawn.count("list_sum") / 1000)
        assert stage.info == {"phase": index + 1}
    assert shares[0] > 0.85 and shares[1] < 0.15 and abs(shares[2] - 0.4) < 0.05  # the last: task.weights
    assert s.stage(1).train == {"steps_per_stage": 2, "warmup_steps": 0, "lr": 3.0e-4}
    result = train(s, s.config.train, torch.Generator().manual_seed(0), Discard(), show_progress=False)
    assert [r["steps"] for r in result["per_stage"]] == [3, 2, 1]
    assert all("fidelity" in r for r in result["per_stage"])  # each phase is evaluated at its end


def test_a_phase_weighting_a_task_the_run_leaves_out_is_refused():
    with pytest.raises(ValueError, match="addition"):
        system("task.tasks=[list_sum,sorting]", "train.phases=[{steps: 3, weights: {addition: 2}}]")


def test_the_lora_scale_without_a_hugging_face_model_is_refused(cli, tmp_path):
    # the toolkit GPT trains every weight: the lora recipe on it would train the GPT at lr 2e-4 for
    # 375 steps and call that an adaptation
    result = cli("run", "strategies_base", "--scale", "lora", "--out", tmp_path / "x")
    assert result.exit_code == 2 and "model.hf_path" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()
