"""The six-task strategies benchmark: traces, validators, tokenizer and the Parquet splits."""
import json
import os
import re

import numpy as np
import pandas as pd
import pytest

from internalize.systems.strategies.benchmark import (
    CHARS,
    COLUMNS,
    FORMATS,
    SPECIALS,
    TASKS,
    Tokenizer,
    Verdict,
    build_splits,
    dataset_stats,
    departure,
    format_stats,
    frame,
    task_of,
    unframe,
    validate,
    write_dataset,
)

SEEDS = range(200)
SEPARATORS = re.compile(r"([,|;:])")


# every (task, trace format) pair: each format is held to the same properties
VARIANTS = [pytest.param(n, f, id=n if f == "default" else f"{n}-{f}") for n in FORMATS for f in FORMATS[n]]


def generated(task_name, seeds=SEEDS, format="default"):
    """(seed, problem, input, {strategy: trace}) for one seeded problem per seed."""
    task = task_of(task_name, format)
    for seed in seeds:
        problem = task.sample(np.random.default_rng(seed))
        yield seed, problem, task.format_input(problem), task.traces(problem)


# The examples written in each module's docstring, exactly.
DOCUMENTED = {
    "list_sum": ("3+5+1+7", {"left_to_right": "1:3,2:8,3:9,4:16=16", "right_to_left": "4:7,3:8,2:13,1:16=16",
                             "tree": "8,8|16=16"}),
    "sorting": ("5213", {"bubble": "2135,1235=1235", "insertion": "2513,1253,1235=1235",
                         "selection": "1253,1253,1235=1235"}),
    "grid_path": ("S.#./..../...G", {"right_first": "01,11,12,13,23=RDRRD", "down_first": "10,20,21,22,23=DDRRR",
                                     "alternating": "01,11,12,22,23=RDRDR"}),
    "linear_equation": ("3x-6=-21", {"subtract_first": "3x=-21+6,3x=-15,x=-5",
                                     "divide_first": "x-6/3=-21/3,x-2=-7,x=-5"}),
    "base_conversion": ("200>16", {"direct": "12r8,0rc=c8", "via_binary": "11001000:1100|1000=c8"}),
    "addition": ("457+68", {"right_to_left": "5c1,2c1,5c0=525", "place_value": "400,110,15;510,525=525"}),
    ("grid_path", "choices"): ("S.#./..../...G", {"right_first": "R.R01,R#D11,R.R12,R.R13,R#D23=RDRRD",
                                                 "down_first": "D.D10,D.D20,D#R21,D#R22,D#R23=DDRRR",
                                                 "alternating": "R.R01,D.D11,R.R12,D.D22,R.R23=RDRDR"}),
    ("linear_equation", "columns"): ("6x-12=-54", {"subtract_first": "6x=-54+12,-6x=54-12,2b0,4b0,-6x=42,x=-7",
                                                  "divide_first": "x-12/6=-54/6,x-2=-9,x=-7"}),
    ("base_conversion", "halving"): ("200>16", {"direct": "12r8,0rc=c8",
                                                "via_binary": "100,50,25,12,6,3,1:11001000:1100|1000=c8"}),
    ("addition", "operands"): ("457+68", {"right_to_left": "7+8:5c1,5+6:2c1,4+0:5c0=525",
                                          "place_value": "4+0:400,5+6:110,7+8:15;510,525=525"}),
}


@pytest.mark.parametrize("task_name,format", VARIANTS)
def test_documented_examples(task_name, format):
    input, expected = DOCUMENTED[task_name if format == "default" else (task_name, format)]
    task = task_of(task_name, format)
    assert task.traces(task.parse_input(input)) == expected
    for strategy, trace in expected.items():
        assert validate(task_name, input, trace, format) == Verdict(True, True, frozenset({strategy}))


def test_linear_equation_columns_write_each_case_of_c_minus_b():
    """The columns format on a difference with a borrow, a sum across a carry into a new digit, a
    negative right side, c = b (x = 0) and c = 0; every trace valid, none valid in the default format."""
    cases = {"3x+6=21": "3x=21-6,3x=21-6,5b1,1b0,3x=15,x=5",
             "9x-171=171": "9x=171+171,9x=171+171,2c0,4c1,3c0,9x=342,x=38",
             "2x+28=-2": "2x=-2-28,-2x=2+28,0c1,3c0,-2x=30,x=-15",
             "5x+95=-5": "5x=-5-95,-5x=5+95,0c1,0c1,-5x=100,x=-20",
             "3x+6=6": "3x=6-6,3x=6-6,0b0,3x=0,x=0",
             "3x+6=0": "3x=0-6,-3x=6-0,6b0,-3x=6,x=-2"}
    task = task_of("linear_equation", "columns")
    for input, expected in cases.items():
        assert task.trace(task.parse_input(input), "subtract_first") == expected
        assert validate("linear_equation", input, expected, "columns").strategies == {"subtract_first"}
        assert not validate("linear_equation", input, expected).valid
    assert validate("linear_equation", "3x+6=21", "x", "no_such").reason.startswith("unknown trace format")
    with pytest.raises(ValueError, match="no trace format 'rows'"):
        task_of("linear_equation", "rows")


@pytest.mark.parametrize("task_name,format", VARIANTS)
def test_every_generated_trace_is_valid_and_labelled(task_name, format):
    task = task_of(task_name, format)
    for seed, problem, input, traces in generated(task_name, format=format):
        assert task.parse_input(input) == problem, seed
        for strategy, trace in traces.items():
            verdict = validate(task_name, input, trace, format)
            assert verdict.parses and verdict.correct and verdict.valid, (seed, strategy, trace, verdict)
            assert verdict.strategies == {s for s, t in traces.items() if t == trace}, (seed, strategy)
            assert strategy in verdict.strategies


def _steps(trace):
    """The pieces before the final answer that corruptions may drop or swap: the trace up to its
    last '=' split at separators, without the last piece (which carries the answer's '=')."""
    head = trace[:trace.rindex("=")]
    pieces = SEPARATORS.split(head)
    return pieces, list(range(0, len(pieces) - 1, 2))


def change_digit(trace, rng):
    spots = [i for i, ch in enumerate(trace) if ch.isdigit()]
    if not spots:
        return None
    i = int(rng.choice(spots))
    new = str((int(trace[i]) + int(rng.integers(1, 10))) % 10)
    return trace[:i] + new + trace[i + 1:], i > trace.rindex("=")


def drop_step(trace, rng):
    pieces, eligible = _steps(trace)
    if not eligible:
        return None
    i = int(rng.choice(eligible))
    return "".join(pieces[:i] + pieces[i + 2:]) + trace[trace.rindex("="):], False


def swap_steps(trace, rng):
    pieces, eligible = _steps(trace)
    pairs = [(i, j) for i in eligible for j in eligible if i < j and pieces[i] != pieces[j]]
    if not pairs:
        return None
    i, j = pairs[int(rng.integers(len(pairs)))]
    pieces[i], pieces[j] = pieces[j], pieces[i]
    return "".join(pieces) + trace[trace.rindex("="):], False


def truncate(trace, rng):
    return trace[: int(rng.integers(0, len(trace)))], True


def wrong_answer(task_name, answer):
    if task_name == "sorting":
        return answer[::-1]  # distinct digits: never sorted reversed
    if task_name == "grid_path":
        return answer + "R"  # one move past the goal
    if task_name == "base_conversion":
        return answer[:-1] + ("1" if answer[-1] != "1" else "2")
    return str(int(answer) + 1)


@pytest.mark.parametrize("task_name,format", VARIANTS)
def test_corrupted_traces_lose_their_label(task_name, format):
    """A changed digit, a dropped step, two swapped steps: the strategy's label goes; the trace
    stays correct exactly when it still parses and its final answer was not touched. A truncated
    trace or a wrong final answer is never correct."""
    rng = np.random.default_rng(1)
    counts = {"change_digit": 0, "drop_step": 0, "swap_steps": 0, "truncate": 0}
    for seed, problem, input, traces in generated(task_name, format=format):
        for strategy, trace in traces.items():
            for corrupt in (change_digit, drop_step, swap_steps, truncate):
                result = corrupt(trace, rng)
                if result is None:
                    continue
                bad, answer_touched = result
                assert bad != trace
                verdict = validate(task_name, input, bad, format)
                counts[corrupt.__name__] += 1
                assert strategy not in verdict.strategies, (corrupt.__name__, trace, bad)
                if answer_touched:
                    assert not verdict.correct, (corrupt.__name__, trace, bad)
                else:
                    assert verdict.correct == verdict.parses, (corrupt.__name__, trace, bad, verdict)
            head, answer = trace.rsplit("=", 1)
            verdict = validate(task_name, input, f"{head}={wrong_answer(task_name, answer)}", format)
            assert verdict.parses and not verdict.correct and not verdict.strategies, (trace, verdict)
            assert verdict.reason == "wrong final answer"
    # every corruption ran on most traces, so none of the assertions above is vacuous
    assert min(counts.values()) > len(SEEDS)


def segment_at(trace, i):
    """The segment of `trace` holding character i: 1, 2, ... between the separators, or "answer"."""
    if i > trace.rindex("="):
        return "answer"
    ends = np.cumsum([len(piece) for piece in SEPARATORS.split(trace)])  # pieces alternate with separators
    return str(1 + int(np.searchsorted(ends, i, side="right")) // 2)


@pytest.mark.parametrize("task_name,format", VARIANTS)
def test_departure_names_the_strategy_followed_and_the_segment_that_differs(task_name, format):
    rng = np.random.default_rng(2)
    own = 0
    for seed, problem, input, traces in generated(task_name, format=format):
        for strategy, trace in traces.items():
            if trace is None:
                continue
            assert departure(task_name, input, trace, format) is None
            bad, _ = change_digit(trace, rng)
            i = next(k for k, (a, b) in enumerate(zip(trace, bad)) if a != b)
            followed, segment = departure(task_name, input, bad, format)
            longest = max(len(os.path.commonprefix([t, bad])) for t in traces.values() if t is not None)
            if longest == 0:
                assert (followed, segment) == ("none", "1")
                continue
            assert len(os.path.commonprefix([traces[followed], bad])) == longest >= i
            if longest == i and followed == strategy:
                own += 1
                assert segment == segment_at(trace, i), (trace, bad, segment)
    assert own > len(SEEDS)  # the segment check ran on most traces


def test_departure_examples_and_bad_input():
    assert departure("linear_equation", "3x-6=-21", "3x=-21+6,3x=-14,x=-5") == ("subtract_first", "2")
    assert departure("linear_equation", "3x-6=-21", "3x=-21+6,3x=-15,x=-4") == ("subtract_first", "answer")
    assert departure("linear_equation", "3x-6=-21", "x-6/3=-21/3,x-3") == ("divide_first", "2")  # cut short
    assert departure("base_conversion", "200>16", "11001001:1100|1001=c9") == ("via_binary", "1")
    assert departure("list_sum", "3+5+1+7", "1:3,2:8,3:9,4:17=17") == ("left_to_right", "8")
    assert departure("linear_equation", "3x-6=-21", "x-6/3=-21/3,x-2=-7,x=-5") is None  # a strategy's own
    assert departure("addition", "457+68", "925=925") == ("none", "1")  # no strategy starts with a 9
    for args in (("no_task", "1", "1"), ("list_sum", "garbage", "1=1"), ("list_sum", "3+5", None), (None, 5, b"")):
        assert departure(*args) is None


def test_correct_trace_that_skips_steps_matches_no_strategy():
    verdict = validate("list_sum", "3+5+1+7", "16=16")
    assert verdict == Verdict(True, True, frozenset(), "matches no strategy")
    assert not verdict.valid
    # grid_path accepts any monotone path to the goal, whichever strategy would walk it
    verdict = validate("grid_path", "S.#./..../...G", "10,11,12,13,23=DRRRD")
    assert verdict.parses and verdict.correct and not verdict.strategies


def _fuzz_strings(rng, n):
    alphabet = [chr(c) for c in range(32, 127)] + list("\t\n\x00٣３²é漢😀\ud800")
    for _ in range(n):
        length = int(rng.integers(0, 80))
        yield "".join(alphabet[i] for i in rng.integers(len(alphabet), size=length))


def _assert_verdict(verdict):
    assert isinstance(verdict, Verdict)
    assert isinstance(verdict.parses, bool) and isinstance(verdict.correct, bool)
    assert isinstance(verdict.strategies, frozenset) and isinstance(verdict.reason, str)
    assert verdict.parses or not (verdict.correct or verdict.strategies)


def test_validator_never_raises_on_arbitrary_text():
    rng = np.random.default_rng(0)
    valid = {name: next(generated(name, [0])) for name in TASKS}
    columns = next(generated("linear_equation", [0], "columns"))[3]["subtract_first"]
    for text in [*_fuzz_strings(rng, 300), columns[:9] + "9b2", columns.replace("b", "c")]:
        _assert_verdict(validate("linear_equation", text, text, "columns"))
        _assert_verdict(validate("linear_equation", "3x+6=21", text, "columns"))
        _assert_verdict(validate("linear_equation", "3x+6=21", "3x=21-6", text))
    names = list(TASKS) + ["", "no_such_task", "LIST_SUM"]
    oddities = ["", " ", "=", "==", "9" * 5000, "1," * 100_000 + "=1", "x" * 1_000_000, "٣,٣=٣", "３+５+１",
                "\x00", "😀" * 1000, "<bos>", "0" * 1999,
                "9" * 1990 + ">16", "1" * 1900 + "+" + "1" * 99, "9" * 1999]
    for name in names:
        strings = list(_fuzz_strings(rng, 300)) + oddities
        for text in strings:
            for input, trace in ((text, text), (text, "1=1")):
                _assert_verdict(validate(name, input, trace))
            if name in valid:
                _, _, input, traces = valid[name]
                for trace in traces.values():
                    _assert_verdict(validate(name, input, text))
                    cut = int(rng.integers(0, len(trace) + 1))
                    _assert_verdict(validate(name, input, trace[:cut] + text))  # a valid prefix, then garbage
                    _assert_verdict(validate(name, input + text, trace))
    for args in ((None, None, None), ("list_sum", 5, "1=1"), ("list_sum", "1+2+3", b"3,3=6"), (["a"], {}, 1.5)):
        verdict = validate(*args)
        _assert_verdict(verdict)
        assert not verdict.parses and verdict.reason


def test_unicode_digits_are_not_digits():
    assert not validate("list_sum", "3+5+1", "3,8,9=٩").parses
    assert not validate("list_sum", "٣+5+1", "3,8,9=9").parses
    assert not validate("addition", "457+68", "5c1,2c1,5c0=５２５").parses


@pytest.fixture(scope="module")
def stats_500():
    return dataset_stats(build_splits(seed=0, per_task=500))


def test_strategies_mostly_write_different_traces(stats_500):
    print("\n" + format_stats(stats_500))
    for name, task in stats_500["tasks"].items():
        assert task["coinciding_share"] < 0.5, name


def test_tokenizer_round_trips_every_framed_text():
    tokenizer = Tokenizer()
    assert len(tokenizer) == len(set(tokenizer.vocab)) == len(SPECIALS) + len(CHARS)
    for split in build_splits(seed=0, per_task=200).values():
        for input, trace, text in zip(split["input"], split["trace"], split["text"]):
            assert set(input + trace) <= set(CHARS)
            assert text == frame(input, trace) and unframe(text) == (input, trace)
            ids = tokenizer.encode(text)
            assert len(ids) == 9 + len(input) + len(trace)  # nine frame tokens, one per character
            assert tokenizer.decode(ids) == text
    assert tokenizer.encode("<z_empty>") == [tokenizer.id("<z_empty>")]


@pytest.mark.parametrize("text, bad", [("<x>3+4 </x>", "' '"), ("é", "'é'"), ("<x>A</x>", "'A'"), ("<q>", "'<'")])
def test_tokenizer_rejects_unknown_characters(text, bad):
    with pytest.raises(ValueError, match=re.escape(bad)):
        Tokenizer().encode(text)


def _closed_form_answer(task, problem, moves):
    """Each task's answer computed here, independently of the task modules."""
    if task == "list_sum":
        return str(sum(problem["digits"]))
    if task == "sorting":
        return "".join(str(d) for d in sorted(problem["digits"]))
    if task == "linear_equation":
        x = (problem["c"] - problem["b"]) // problem["a"]
        assert problem["a"] * x + problem["b"] == problem["c"]
        return str(x)
    if task == "base_conversion":
        return np.base_repr(problem["number"], problem["base"]).lower()
    if task == "addition":
        return str(problem["a"] + problem["b"])
    (r, c), grid = problem["start"], problem["grid"]  # grid_path: the moves must walk to the goal
    for move in moves:
        r, c = (r, c + 1) if move == "R" else (r + 1, c)
        assert grid[r][c] == "."
    assert [r, c] == problem["goal"]
    return moves


def test_write_dataset(tmp_path):
    stats = write_dataset(tmp_path / "a", seed=0, per_task=600)
    write_dataset(tmp_path / "b", seed=0, per_task=600)
    write_dataset(tmp_path / "c", seed=1, per_task=600)
    splits = {}
    for split, size in (("train", 480), ("validation", 60), ("test", 60)):
        path = tmp_path / "a" / f"{split}.parquet"
        assert path.read_bytes() == (tmp_path / "b" / f"{split}.parquet").read_bytes()
        assert path.read_bytes() != (tmp_path / "c" / f"{split}.parquet").read_bytes()
        frame_ = pd.read_parquet(path)
        assert list(frame_.columns) == COLUMNS
        assert (frame_.groupby("task").size() == size).all() and set(frame_["task"]) == set(TASKS)
        splits[split] = frame_
    assert stats["splits"] == {"train": 2880, "validation": 360, "test": 360}
    keys = {split: set(zip(f["task"], f["input"])) for split, f in splits.items()}
    assert sum(len(k) for k in keys.values()) == 3600  # no input twice, within or across splits
    every = pd.concat(splits.values(), ignore_index=True)
    for row in every.itertuples():
        problem = json.loads(row.problem)
        assert TASKS[row.task].format_input(problem) == row.input
        assert row.answer == row.trace.rsplit("=", 1)[1] == _closed_form_answer(row.task, problem, row.answer)
        assert row.text == frame(row.input, row.trace)
        verdict = validate(row.task, row.input, row.trace)
        assert verdict.valid and row.strategy in verdict.strategies
    for name, task in TASKS.items():
        shares = every[every["task"] == name]["strategy"].value_counts(normalize=True)
        assert set(shares.index) == set(task.strategies)
        assert (abs(shares - 1 / len(task.strategies)) < 0.1).all(), (name, shares)
        assert stats["tasks"][name]["strategy_share"] == pytest.approx(shares.to_dict())


def test_problem_json_keys():
    splits = build_splits(seed=0, per_task=10)
    keys = {task: set(json.loads(p)) for task, p in zip(splits["test"]["task"], splits["test"]["problem"])}
    assert keys == {"list_sum": {"digits"}, "sorting": {"digits"}, "grid_path": {"grid", "start", "goal"},
                    "linear_equation": {"a", "b", "c"}, "base_conversion": {"number", "base"},
                    "addition": {"a", "b"}}


def test_too_few_examples_per_task_is_refused():
    with pytest.raises(ValueError, match="per_task"):
        build_splits(seed=0, per_task=3)


def test_the_data_command_writes_the_splits_and_refuses_bad_input(cli, tmp_path):
    out = tmp_path / "data"
    result = cli("data", "strategies", "--out", out, "--per-task", 30, "--seed", 3)
    assert result.exit_code == 0, result.output
    assert "list_sum" in result.output and "coinciding" in result.output
    assert len(pd.read_parquet(out / "train.parquet")) == 6 * 24
    for args, message in ((("strategies", "--out", out), "already holds"),
                          (("strategy", "--out", tmp_path / "x"), "unknown dataset 'strategy'"),
                          (("strategies", "--out", tmp_path / "y", "--per-task", 2), "per_task must be at least")):
        result = cli("data", *args)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and message in lines[0], result.output


def test_grid_choices_name_the_strategy_and_never_coincide():
    """In the choices format the preferred moves alone name the strategy (R always, D always, R then D
    in turn), the moves taken are the default format's, and no two strategies' traces are the same,
    on inputs where the default traces coincide too."""
    from internalize.systems.strategies.benchmark import task_of

    default, choices = task_of("grid_path"), task_of("grid_path", "choices")
    preferred = {"right_first": lambda i: "R", "down_first": lambda i: "D", "alternating": lambda i: "RD"[i % 2]}
    coinciding = 0
    for seed in range(300):
        problem = choices.sample(np.random.default_rng(seed))
        plain, named = default.traces(problem), choices.traces(problem)
        coinciding += len(set(plain.values())) < len(plain)
        assert len(set(named.values())) == len(named)
        for strategy, trace in named.items():
            steps, moves = trace.split("=")
            assert moves == plain[strategy].split("=")[1]
            for i, step in enumerate(steps.split(",")):
                assert step[0] == preferred[strategy](i) and (step[1] == "#") == (step[0] != step[2])
            verdict = validate("grid_path", choices.format_input(problem), trace, "choices")
            assert verdict == Verdict(True, True, frozenset({strategy}))
            assert not validate("grid_path", choices.format_input(problem), trace).valid  # not the default format
    assert coinciding > 30  # the property is tested where it matters
