"""The base model of the latent-strategies system: the toolkit's GPT on the six-task benchmark.

Each example is framed as <bos><x>input</x><z><z_empty></z><y>trace</y><eos>; the strategy that
wrote the trace is never shown. The loss is cross-entropy on the response (the trace, </y> and
<eos>), teacher forced. One stage (`full_cot`) of train.steps_per_stage steps.

Evaluation, on the test split: prompts up to <y>, left-padded into batches of 256, generated with the
key/value cache until <eos>. A sample is *faithful* when the task's validator says it parses, its
answer is right and it is some strategy's trace (sampled at temperature 1, greedy beside it). The
strategy shares of the samples are set against the data's (each trace's credit split evenly over
the strategies that write it), and the response loss (nats per response) against the data's
strategy entropy, the floor of that loss for a model that knows every strategy but not which one
an example used. One sample an input leaves the shares noisy (about 500 inputs a task at the default
3,000); `exact_shares` reads what the samples estimate off the model itself, every canonical trace
of every test input scored, and sets those shares against the ones training draws from. Linear
probes (internalize.systems.strategies.probes) on the test examples, teacher forced, decode the strategy from the embeddings and every block's residual stream, per task, layer and
eighth of the trace, against chance; examples whose trace two strategies write alike are left out
(their label is undecidable from the trace). The probes are fitted once, for the summary.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from internalize import plots
from internalize.config import Config
from internalize.models.gpt import GPT, GPTConfig
from internalize.system import TEST_SEED, VAL_SEED, Stage, System, device_for
from internalize.systems.strategies import probes
from internalize.systems.strategies.benchmark import (
    COLUMNS,
    TASKS,
    Task,
    Tokenizer,
    Verdict,
    build_splits,
    departure,
    frame,
    prompt,
    task_of,
    validate,
)

SPLITS = ("train", "validation", "test")
UNCLOSED = Verdict(False, False, frozenset(), "the sample never wrote </y>")
FAILURES_SHOWN = 5  # unfaithful greedy samples kept per task in summary.json


def load_splits(task) -> dict[str, pd.DataFrame]:
    """The benchmark's splits: read from task.data (written by `internalize data strategies`), or drawn
    in memory from task.data_seed; restricted to task.tasks. Bad data is a ValueError (one line)."""
    if task.data is None:
        frames = build_splits(task.data_seed, task.per_task, task.formats)
    else:
        folder = Path(task.data)
        if not folder.is_dir():
            raise ValueError(f"task.data: no data directory {folder} (write one with `internalize data strategies "
                             f"--out {folder}`)")
        frames = {}
        for split in SPLITS:
            file = folder / f"{split}.parquet"
            try:
                frames[split] = pd.read_parquet(file)
            except FileNotFoundError:
                raise ValueError(f"task.data: {file} is missing") from None
            except Exception as err:  # noqa: BLE001 - pyarrow raises many kinds for a damaged file
                raise ValueError(f"task.data: cannot read {file} ({type(err).__name__})") from None
            missing = [c for c in COLUMNS if c not in frames[split].columns]
            if missing:
                raise ValueError(f"task.data: {file} lacks the columns {', '.join(missing)}")
    if task.tasks:
        frames = {split: f[f["task"].isin(task.tasks)].reset_index(drop=True) for split, f in frames.items()}
    for split, f in frames.items():
        if f.empty:
            raise ValueError(f"task.data: the {split} split has no examples")
    if task.data is not None:  # written in the trace formats this run scores by?
        for name, rows in frames["validation"].groupby("task"):
            format = task.format_of(name)
            if not all(validate(name, x, y, format).valid for x, y in zip(rows["input"][:20], rows["trace"][:20])):
                raise ValueError(f"task.data: the {name} traces in {task.data} are not valid in trace format "
                                 f"{format!r}; set task.formats as the data was written (internalize data --format)")
    return frames


def credit(verdicts, strategies: tuple[str, ...]) -> dict[str, float] | None:
    """Each valid trace's credit split over the strategies that write it; shares over the valid ones
    (None when none is valid)."""
    totals = dict.fromkeys(strategies, 0.0)
    valid = [v for v in verdicts if v.valid]
    if not valid:
        return None
    for verdict in valid:
        for s in verdict.strategies:
            totals[s] += 1 / len(verdict.strategies)
    return {s: t / max(1, len(valid)) for s, t in totals.items()}


def by_length(tokens: torch.Tensor, pad_id: int, chunks: int, per_row) -> torch.Tensor:
    """per_row(rows, width) -> (len(rows),) values, evaluated on `chunks` groups of the right-padded
    rows of `tokens`, sorted by length, each cut to its longest row (a causal model's outputs at the
    real tokens do not depend on the padding after them); the values come back in row order."""
    lengths = (tokens != pad_id).sum(1)
    order = lengths.argsort(stable=True)
    groups = [rows for rows in order.chunk(max(1, chunks)) if len(rows)]
    values = torch.cat([per_row(rows, int(lengths[rows].max())) for rows in groups])
    return values[order.argsort()]


def strategy_entropy(task: Task, problem: dict) -> float:
    """Entropy (nats) of the response given the input, strategies uniform: coinciding traces merge."""
    traces = list(task.traces(problem).values())
    counts = np.unique(traces, return_counts=True)[1] / len(traces)
    return float(-(counts * np.log(counts)).sum())


class StrategiesBaseSystem(System):
    headline = "fidelity"

    def __init__(self, config: Config):
        self.config = config
        self.device = device_for(config)
        self.tokenizer = tok = Tokenizer()
        self.frames = load_splits(config.task)
        self.names = [t for t in TASKS if t in set(self.frames["train"]["task"])]
        self.tasks = {n: task_of(n, config.task.format_of(n)) for n in self.names}  # in this run's trace formats
        self.stage_metrics = {"fidelity": None, "fidelity_greedy": None}
        self.data = {split: self.encode(f) for split, f in self.frames.items()}
        self.longest = longest = max(d[0].shape[1] for d in self.data.values())
        m = config.model
        self.model = GPT(GPTConfig(len(tok), longest + 8, m.width, m.depth, m.heads)).to(self.device)
        self.num_stages = 1
        gen = torch.Generator().manual_seed(config.seed + VAL_SEED)
        self.val = self.subset("validation", config.train.val_size, gen)
        self.test_rows = self.pick("test", config.eval.test_size, torch.Generator().manual_seed(config.seed + TEST_SEED))
        self.test = self.frames["test"].iloc[self.test_rows.tolist()]  # the evaluated test examples
        self.test_data = tuple(t[self.test_rows] for t in self.data["test"])  # their tokens, response mask
        # the data's own verdicts: which strategies write each test trace (shares, probe labels)
        self.test_verdicts = [self.validate(t, x, y) for t, x, y in zip(self.test["task"], self.test["input"],
                                                                         self.test["trace"])]
        self.last: dict = {}  # what the latest evaluation found; summary and probes are cached here
        # (task, input) of every held-out example: task.fresh never trains on them
        self.held_out = {(t, x) for split in ("validation", "test")
                         for t, x in zip(self.frames[split]["task"], self.frames[split]["input"])}
        # task.weights: each task's share of the fresh draws, and over the train split's rows (a task's
        # rows share its weight); None without weights (uniform draws)
        weights = config.task.weights
        self.task_shares = np.array([weights.get(n, 1.0) for n in self.names]) if weights else None
        if weights:
            self.task_shares /= self.task_shares.sum()
        train_tasks = self.frames["train"]["task"]
        counts = train_tasks.value_counts()
        self.row_weights = torch.tensor([weights.get(t, 1.0) / counts[t] for t in train_tasks],
                                        dtype=torch.double) if weights else None

    def validate(self, task: str, input: str, trace: str) -> Verdict:
        """validate() in this run's trace format of `task`."""
        return validate(task, input, trace, self.config.task.format_of(task))

    # -- data ----------------------------------------------------------------------------------
    def encode(self, frame: pd.DataFrame) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded tokens (N, L) and the response mask (N, L): trace, </y> and <eos>."""
        ids = [self.tokenizer.encode(text) for text in frame["text"]]
        start = [len(self.tokenizer.encode(prompt(x))) for x in frame["input"]]
        tokens = torch.full((len(ids), max(map(len, ids))), self.tokenizer.pad_id, dtype=torch.long)
        response = torch.zeros_like(tokens, dtype=torch.bool)
        for i, (row, s) in enumerate(zip(ids, start)):
            tokens[i, :len(row)] = torch.tensor(row)
            response[i, s:len(row)] = True
        return tokens, response

    def pick(self, split: str, size: int, generator: torch.Generator) -> torch.Tensor:
        n = len(self.frames[split])
        return torch.randperm(n, generator=generator)[:min(size, n)]

    def subset(self, split: str, size: int, generator: torch.Generator):
        rows = self.pick(split, size, generator)
        return tuple(t[rows] for t in self.data[split])

    def fresh_frame(self, batch_size: int, generator: torch.Generator) -> pd.DataFrame:
        """batch_size new examples (task and strategy uniform), drawn by a numpy stream seeded from
        `generator`, so a resumed run draws the same ones. Held-out inputs are refused, and so are
        the rare examples longer than the longest of the splits (the model's positions end there)."""
        rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator)))
        shares = self.task_shares
        rows = []
        while len(rows) < batch_size:
            pick = (int(rng.choice(len(self.names), p=shares)) if shares is not None
                    else int(rng.integers(len(self.names))))
            task = self.tasks[self.names[pick]]
            problem = task.sample(rng)
            x = task.format_input(problem)
            strategy = task.strategies[int(rng.integers(len(task.strategies)))]
            text = frame(x, task.trace(problem, strategy))
            if (task.name, x) not in self.held_out and len(self.tokenizer.encode(text)) <= self.longest:
                rows.append({"input": x, "text": text})
        return pd.DataFrame(rows)

    def sample(self, batch_size: int, generator: torch.Generator):
        if self.config.task.fresh:
            tokens, response = self.encode(self.fresh_frame(batch_size, generator))
        else:
            rows = (torch.multinomial(self.row_weights, batch_size, replacement=True, generator=generator)
                    if self.row_weights is not None
                    else torch.randint(len(self.frames["train"]), (batch_size,), generator=generator))
            tokens, response = (t[rows] for t in self.data["train"])
        width = int((tokens != self.tokenizer.pad_id).sum(1).max())  # drop the all-pad columns
        return tokens[:, :width].to(self.device), response[:, :width].to(self.device)

    # -- training ------------------------------------------------------------------------------
    def response_losses(self, tokens: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
        """(B,) summed cross-entropy over each row's response tokens (nats per response), computed on
        train.length_chunks groups of rows of similar length, each cut to its longest row."""
        def losses(rows: torch.Tensor, width: int) -> torch.Tensor:
            t, r = tokens[rows, :width], response[rows, :width]
            logits, _ = self.model(t[:, :-1])  # (b, width-1, V)
            return (F.cross_entropy(logits.transpose(1, 2), t[:, 1:], reduction="none") * r[:, 1:]).sum(1)

        return by_length(tokens, self.tokenizer.pad_id, self.config.train.length_chunks, losses)

    def loss_of(self, batch) -> torch.Tensor:
        tokens, response = batch
        return self.response_losses(tokens, response).sum() / response[:, 1:].sum()  # nats per response token

    def stage(self, index: int) -> Stage:
        val = tuple(t.to(self.device) for t in self.val)

        @torch.no_grad()
        def validate_loss() -> float:
            return float(self.loss_of(val))

        return Stage(info={}, params=list(self.model.parameters()), sample=self.sample, loss=self.loss_of,
                     validate=validate_loss)

    # -- evaluation ----------------------------------------------------------------------------
    def prompts(self, inputs) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded prompt tokens (B, P) of these inputs and their mask (True at real tokens): every
        prompt ends at the last column, `<z>` at column P - 4 and `<z_empty>` at P - 3."""
        tok = self.tokenizer
        prompts = [tok.encode(prompt(x)) for x in inputs]
        width = max(map(len, prompts))
        ids = torch.full((len(prompts), width), tok.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids, dtype=torch.bool)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), True
        return ids.to(self.device), mask.to(self.device)

    def decode(self, ids: torch.Tensor, mask: torch.Tensor, steps: int, temperature: float,
               generator: torch.Generator, rows: torch.Tensor) -> torch.Tensor:
        """New tokens for one batch of prompts (rows: where the batch sits in the frame)."""
        return self.model.generate(ids, steps, temperature=temperature, generator=generator,
                                   stop_token=self.tokenizer.id("<eos>"), attention_mask=mask)

    @torch.no_grad()
    def generate(self, frame: pd.DataFrame, temperature: float, generator: torch.Generator,
                 batch: int = 256, steps: int | None = None) -> list[str]:
        """The trace each prompt's sample writes (the text before </y>; None when it never closes),
        in at most `steps` tokens (default: the frame's longest trace and 8).

        Each batch holds prompts of one length: a batch may decode only as far as its widest prompt
        leaves positions, so a short prompt batched with a long one would lose a long trace's end."""
        out: list[str | None] = [None] * len(frame)
        longest = steps if steps is not None else max(len(t) for t in frame["trace"]) + 8
        inputs = frame["input"].tolist()
        widths = np.array([len(self.tokenizer.encode(prompt(x))) for x in inputs])
        batches = []
        for width in np.unique(widths):
            rows = np.flatnonzero(widths == width)
            batches += [rows[lo:lo + batch] for lo in range(0, len(rows), batch)]
        for rows in batches:
            ids, mask = self.prompts([inputs[i] for i in rows])
            steps = min(longest, self.longest + 8 - ids.shape[1])
            decoded = self.decode(ids, mask, steps, temperature, generator, torch.as_tensor(rows, device=self.device))
            for i, row in zip(rows, decoded.cpu().tolist()):
                text = self.tokenizer.decode(row)
                out[i] = text.split("</y>")[0] if "</y>" in text else None
        return out

    def fidelity(self, temperature: float, seed: int) -> tuple[dict, dict, dict, dict]:
        """Per task: the share of faithful samples, the verdicts, the first few unfaithful samples
        ({input, trace, reference, reason}: what a reader looks at to see how the model fails), and
        where the unfaithful ones go wrong: {strategy followed: {segment: count}} (see `departure`;
        "unclosed" under "none" for samples that never close)."""
        frame = self.test
        traces = self.generate(frame, temperature, torch.Generator(device=self.device).manual_seed(seed))
        verdicts = {name: [] for name in self.names}
        failures = {name: [] for name in self.names}
        departures = {name: {} for name in self.names}
        for task, x, trace, reference in zip(frame["task"], frame["input"], traces, frame["trace"]):
            verdict = UNCLOSED if trace is None else self.validate(task, x, trace)
            verdicts[task].append(verdict)
            if verdict.valid:
                continue
            if len(failures[task]) < FAILURES_SHOWN:
                failures[task].append(dict(input=x, trace=trace, reference=reference, reason=verdict.reason))
            strategy, segment = ("none", "unclosed") if trace is None else departure(task, x, trace, self.config.task.format_of(task)) or ("none", "?")
            counts = departures[task].setdefault(strategy, {})
            counts[segment] = counts.get(segment, 0) + 1
        shares = {name: float(np.mean([v.valid for v in vs])) for name, vs in verdicts.items() if vs}
        return shares, verdicts, failures, departures

    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        seed = self.config.seed + TEST_SEED
        sampled, verdicts, _, departures = self.fidelity(1.0, seed)
        greedy, greedy_verdicts, failures, _ = self.fidelity(0.0, seed)
        self.model.train()
        self.last = dict(sampled=sampled, greedy=greedy, verdicts=verdicts, greedy_verdicts=greedy_verdicts,
                         failures=failures, departures=departures)
        return dict(fidelity=float(np.mean(list(sampled.values()))), fidelity_greedy=float(np.mean(list(greedy.values()))))

    @torch.no_grad()
    def scored(self, tokens: torch.Tensor, response: torch.Tensor) -> np.ndarray:
        """(N,) each row's summed response loss in eval mode, 256 rows at a time (float64, on the CPU)."""
        self.model.eval()
        losses = torch.cat([self.response_losses(tokens[i:i + 256].to(self.device), response[i:i + 256].to(self.device))
                            for i in range(0, len(tokens), 256)])
        self.model.train()
        return losses.cpu().double().numpy()

    def response_loss_and_entropy(self) -> tuple[dict, dict]:
        frame = self.test
        losses = self.scored(*self.test_data)
        entropy = np.array([strategy_entropy(self.tasks[t], json.loads(p)) for t, p in zip(frame["task"], frame["problem"])])
        tasks = frame["task"].to_numpy()
        return ({n: float(losses[tasks == n].mean()) for n in self.names},
                {n: float(entropy[tasks == n].mean()) for n in self.names})

    @torch.no_grad()
    def exact_shares(self) -> dict[str, dict]:
        """Per task, what sampling at temperature 1 estimates, without the sampling noise: every test
        input's canonical traces (coinciding ones once) scored by the model, p(trace, </y> | input).
        {task: {fidelity: the mean over inputs of their summed probability (a sample is faithful exactly
        when it is one of them), shares: {strategy: its traces' probability mass, a coinciding trace's
        split evenly as `credit` splits it, over the total}}}; shares None where the mass is zero."""
        rows = []  # (task, input, framed text, the strategies that write this trace)
        for task, x, problem in zip(self.test["task"], self.test["input"], self.test["problem"]):
            by_trace: dict[str, list[str]] = {}
            for strategy, trace in self.tasks[task].traces(json.loads(problem)).items():
                if trace is not None:
                    by_trace.setdefault(trace, []).append(strategy)
            rows += [(task, x, frame(x, trace), strategies) for trace, strategies in by_trace.items()]
        tasks, inputs, texts, writers = zip(*rows)
        tokens, response = self.encode(pd.DataFrame({"input": inputs, "text": texts}))
        response &= tokens != self.tokenizer.id("<eos>")  # the sample ends at </y>; what follows is not scored
        mass = {n: dict.fromkeys(TASKS[n].strategies, 0.0) for n in self.names}
        for p, strategies, task in zip(np.exp(-self.scored(tokens, response)), writers, tasks):
            for s in strategies:
                mass[task][s] += p / len(strategies)
        counts, total = self.test["task"].value_counts(), {n: sum(m.values()) for n, m in mass.items()}
        return {n: dict(fidelity=float(total[n] / counts[n]),
                        shares={s: float(v / total[n]) for s, v in m.items()} if total[n] > 0 else None)
                for n, m in mass.items()}

    def strategy_probes(self) -> dict:
        """summary["probes"] (see probes.strategy_probes), plus "excluded": {task: coinciding examples}."""
        if "probes" in self.last:
            return self.last["probes"]
        frame = self.test
        tokens, response = self.test_data
        closing = (tokens == self.tokenizer.id("</y>")) | (tokens == self.tokenizer.id("<eos>"))
        trace = response & ~closing  # (N, L) the trace tokens: the response before </y>
        keep = np.array([len(v.strategies) == 1 for v in self.test_verdicts], dtype=bool)
        rows = torch.from_numpy(keep)

        def fit(model) -> dict:
            model.eval()
            return probes.strategy_probes(model, tokens[rows].to(self.device), trace[rows].to(self.device),
                                          frame["strategy"].to_numpy()[keep].tolist(),
                                          frame["task"].to_numpy()[keep].tolist(), order=self.names,
                                          seed=self.config.seed + TEST_SEED)

        result = fit(self.model)
        self.model.train()
        # the same probes on the untrained model (the run's own initial weights): the trace formats alone
        # give the strategy away to a probe, so what training adds is the margin over this control
        with torch.random.fork_rng():
            torch.manual_seed(self.config.seed)
            untrained = GPT(self.model.cfg).to(self.device)
        control = fit(untrained)
        result["untrained"] = {k: control[k] for k in ("best_layer_mean", "layer_mean", "mean_accuracy")}
        tasks = frame["task"].to_numpy()
        result["excluded"] = {n: int((~keep & (tasks == n)).sum()) for n in self.names}
        self.last["probes"] = result
        return result

    def summary(self) -> dict:
        if "summary" in self.last:
            return self.last["summary"]
        if "sampled" not in self.last:
            self.evaluate()
        sampled, greedy, verdicts = self.last["sampled"], self.last["greedy"], self.last["verdicts"]
        data_verdicts = {n: [v for v, t in zip(self.test_verdicts, self.test["task"]) if t == n] for n in self.names}
        model_shares = {n: credit(verdicts[n], TASKS[n].strategies) for n in self.names}
        data_shares = {n: credit(data_verdicts[n], TASKS[n].strategies) for n in self.names}
        train_shares = {n: self.training_shares(n) for n in self.names}
        tv, tv_train = ({n: total_variation(model_shares[n], reference[n]) for n in self.names}
                        for reference in (data_shares, train_shares))
        loss, entropy = self.response_loss_and_entropy()
        exact = self.exact_shares()
        tv_exact = {n: total_variation(exact[n]["shares"], train_shares[n]) for n in self.names}
        self.last["summary"] = dict(fidelity=mean(sampled), fidelity_greedy=mean(greedy), share_tv=mean(tv),
                    share_tv_train=mean(tv_train), fidelity_exact=mean({n: e["fidelity"] for n, e in exact.items()}),
                    share_tv_exact=mean(tv_exact),
                    response_loss=mean(loss), strategy_entropy=mean(entropy),
                    per_task={n: dict(fidelity=sampled[n], fidelity_greedy=greedy[n], share_tv=tv[n],
                                      response_loss=loss[n], strategy_entropy=entropy[n],
                                      share_tv_train=tv_train[n], strategy_shares=model_shares[n],
                                      fidelity_exact=exact[n]["fidelity"], share_tv_exact=tv_exact[n],
                                      strategy_shares_exact=exact[n]["shares"],
                                      data_strategy_shares=data_shares[n], train_strategy_shares=train_shares[n],
                                      by_input_length=self.by_length(n),
                                      greedy_failures=self.last["failures"][n],
                                      departures=self.last["departures"][n])
                              for n in self.names},
                    tasks=self.names, parameters=sum(p.numel() for p in self.model.parameters()),
                    test_examples=len(self.test_rows), probes=self.strategy_probes())
        return self.last["summary"]

    def split_shares(self, task: str, split: str = "train") -> dict[str, float]:
        """The strategy labels' shares among a split's examples of `task`."""
        frame = self.frames[split]
        counts = frame.loc[frame["task"] == task, "strategy"].value_counts(normalize=True)
        return {s: float(counts.get(s, 0.0)) for s in TASKS[task].strategies}

    def training_shares(self, task: str) -> dict[str, float]:
        """The strategy shares that training draws from: uniform under task.fresh, else the train split's.
        Free of the test set's sampling noise (about 100 test inputs a task at eval.test_size 600), so
        share_tv_train is the comparison to read where share_tv is noise (docs/strategies.md)."""
        strategies = TASKS[task].strategies
        if self.config.task.fresh:
            return dict.fromkeys(strategies, 1 / len(strategies))
        return self.split_shares(task)

    def by_length(self, task: str) -> dict[str, dict]:
        """Fidelity of one task's test samples by the input's length in characters: {length: {examples,
        fidelity, fidelity_greedy}} (where the errors gather: long lists, long numbers)."""
        lengths = self.test.loc[self.test["task"] == task, "input"].str.len().to_numpy()
        sampled, greedy = self.last["verdicts"][task], self.last["greedy_verdicts"][task]
        return {str(k): dict(examples=int((lengths == k).sum()),
                             fidelity=float(np.mean([v.valid for v, n in zip(sampled, lengths) if n == k])),
                             fidelity_greedy=float(np.mean([v.valid for v, n in zip(greedy, lengths) if n == k])))
                for k in sorted(set(lengths.tolist()))}

    def figures(self, folder: Path, per_stage: list[dict]) -> None:
        summary = self.summary()
        per_task = summary["per_task"]
        plots.grouped_bars({n: {"sampled (T = 1)": per_task[n]["fidelity"], "greedy": per_task[n]["fidelity_greedy"]}
                            for n in self.names}, folder / "fidelity.png", "fidelity", "base model: fidelity per task",
                           ylim=(0, 1.05))
        bars = {f"{n}\n{s}": {"samples": (per_task[n]["strategy_shares"] or {}).get(s, np.nan),
                               "model, exact": (per_task[n].get("strategy_shares_exact") or {}).get(s, np.nan),
                               "data (test inputs)": per_task[n]["data_strategy_shares"][s],
                               "training draws": per_task[n]["train_strategy_shares"][s]}
                for n in self.names for s in TASKS[n].strategies}
        plots.grouped_bars(bars, folder / "strategy_shares.png", "share of valid traces",
                           "base model: strategy shares of its samples against the data's", ylim=(0, 1.05))
        found = summary["probes"]
        plots.probe_heatmaps(found["accuracy"], found["chance"], folder / "probes.png",
                             "base model: held-out accuracy of linear probes decoding the strategy")

    @staticmethod
    def describe(summary: dict) -> str:
        worst = min(summary["per_task"].items(), key=lambda kv: kv[1]["fidelity"])
        return (f"fidelity {summary['fidelity']:.3f} sampled, {summary['fidelity_greedy']:.3f} greedy "
                f"(lowest: {worst[0]} {worst[1]['fidelity']:.3f}); strategy shares off the data's by "
                + ("n/a" if summary["share_tv"] is None else f"{summary['share_tv']:.3f}")
                + ("" if summary.get("share_tv_train") is None else
                   f" on the test inputs, off the training draws' by {summary['share_tv_train']:.3f}")
                + " (total variation)"
                + ("" if summary.get("share_tv_exact") is None else
                   f"; scored exactly, fidelity {summary['fidelity_exact']:.3f} and shares off the training "
                   f"draws' by {summary['share_tv_exact']:.3f}")
                + f"; response loss {summary['response_loss']:.3f} "
                f"nats against the strategy entropy {summary['strategy_entropy']:.3f}"
                + probe_line(summary.get("probes")))


def total_variation(shares: dict[str, float] | None, reference: dict[str, float]) -> float | None:
    """Half the L1 distance between two strategy-share dicts over the same strategies (None: no shares)."""
    return None if shares is None else 0.5 * sum(abs(shares[s] - reference[s]) for s in reference)


def mean(values: dict) -> float | None:
    """The mean of a dict's values, those that are None left out (None when all are)."""
    known = [v for v in values.values() if v is not None]
    return float(np.mean(known)) if known else None


def probe_line(found: dict | None) -> str:
    """'; strategy probes ...' for describe: the best layer's accuracy against chance, over tasks."""
    if not found or found.get("mean_accuracy") is None:
        return ""
    untrained = (found.get("untrained") or {}).get("mean_accuracy")
    return (f"; strategy probes {found['mean_accuracy']:.3f} at each task's best layer against chance "
            f"{found['mean_chance']:.3f}" + ("" if untrained is None else f" (untrained model: {untrained:.3f})"))
