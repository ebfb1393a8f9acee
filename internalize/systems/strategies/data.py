"""The benchmark as both latent-strategies systems read it: the splits, their encodings, training
batches, prompts and batched generation. The base model and the factorisation each hold one
`Benchmark` (composition, not inheritance): everything here is about the data, nothing about a model."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import torch

from internalize.system import TEST_SEED, VAL_SEED
from internalize.systems.strategies.benchmark import (
    COLUMNS,
    TASKS,
    Task,
    Tokenizer,
    Verdict,
    build_splits,
    frame,
    prompt,
    task_of,
    validate,
)

SPLITS = ("train", "validation", "test")
UNCLOSED = Verdict(False, False, frozenset(), "the sample never wrote </y>")
# (ids, mask, steps, temperature, generator, rows) -> the new tokens of one batch of prompts
Decode = Callable[[torch.Tensor, torch.Tensor, int, float, "torch.Generator | None", torch.Tensor], torch.Tensor]


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


def check_round_trip(tokenizer, frame: pd.DataFrame, per_task: int = 20) -> None:
    """Refuse a tokenizer that does not write the benchmark's text back as it read it (the validators
    read decoded text): ValueError naming the first text it changes, checked on each task's first rows."""
    for _, rows in frame.groupby("task", sort=False):
        for text in rows["text"][:per_task]:
            back = tokenizer.decode(tokenizer.encode(text))
            if back != text:
                raise ValueError(f"the tokenizer does not decode the benchmark's text to itself: {text!r} came back "
                                 f"as {back!r}")


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


def by_tokens(batch, rows: int) -> list:
    """Micro-batches (train.micro_batch) of (tokens, response) of at most `rows` rows, each weighted by its
    share of the response tokens (a loss per response token)."""
    tokens, response = batch
    total = response[:, 1:].sum()
    return [((t, r), float(r[:, 1:].sum() / total)) for t, r in zip(tokens.split(rows), response.split(rows))]


def by_rows(batch, rows: int) -> list:
    """Micro-batches of (tokens, response, seed) of at most `rows` rows, each weighted by its share of the
    rows (a loss that is a mean over rows), each with a seed of its own."""
    tokens, response, seed = batch
    return [((t, r, seed + i), len(t) / len(tokens)) for i, (t, r) in enumerate(zip(tokens.split(rows), response.split(rows)))]


def in_parts(loss, batch, split, rows: int | None) -> torch.Tensor:
    """loss(batch), computed over split(batch, rows)'s weighted micro-batches (rows None: the whole batch)."""
    if rows is None:
        return loss(batch)
    return sum(loss(piece) * weight for piece, weight in split(batch, rows))


def strategy_entropy(task: Task, problem: dict) -> float:
    """Entropy (nats) of the response given the input, strategies uniform: coinciding traces merge."""
    traces = list(task.traces(problem).values())
    counts = np.unique(traces, return_counts=True)[1] / len(traces)
    return float(-(counts * np.log(counts)).sum())


class Benchmark:
    """The splits of one run (task.* keys), encoded; the fixed validation and test examples. `tokenizer`:
    the character tokenizer (None), or a model's own (internalize.systems.strategies.hf.HFTokenizer)."""

    def __init__(self, config, device: torch.device, tokenizer=None):
        self.config = config
        self.device = device
        self.tokenizer = tokenizer or Tokenizer()
        self.frames = load_splits(config.task)
        check_round_trip(self.tokenizer, self.frames["validation"])
        self.names = [t for t in TASKS if t in set(self.frames["train"]["task"])]
        self.tasks = {n: task_of(n, config.task.format_of(n)) for n in self.names}  # in this run's trace formats
        self.data = {split: self.encode(f) for split, f in self.frames.items()}
        self.longest = max(d[0].shape[1] for d in self.data.values())
        # the model's positions, where it has more than longest + 8 (a Hugging Face model): generate then
        # batches prompts of different lengths that all keep their full step budget
        self.positions: int | None = None
        gen = torch.Generator().manual_seed(config.seed + VAL_SEED)
        val_rows = self.pick("validation", config.train.val_size, gen)
        self.val = tuple(t[val_rows] for t in self.data["validation"])
        self.val_frame = self.frames["validation"].iloc[val_rows.tolist()].reset_index(drop=True)
        self.test_rows = self.pick("test", config.eval.test_size, torch.Generator().manual_seed(config.seed + TEST_SEED))
        self.test = self.frames["test"].iloc[self.test_rows.tolist()]  # the evaluated test examples
        self.test_data = tuple(t[self.test_rows] for t in self.data["test"])  # their tokens, response mask
        # the data's own verdicts: which strategies write each test trace (shares, probe labels)
        self.test_verdicts = [self.validate(t, x, y) for t, x, y in zip(self.test["task"], self.test["input"],
                                                                         self.test["trace"])]
        # (task, input) of every held-out example: task.fresh never trains on them
        self.held_out = {(t, x) for split in ("validation", "test")
                         for t, x in zip(self.frames[split]["task"], self.frames[split]["input"])}
        self.weigh(config.task.weights)

    def check_weights(self, weights: dict[str, float]) -> None:
        """Refuse weights of a task this run leaves out."""
        unused = sorted(set(weights) - set(self.names))
        if unused:
            raise ValueError(f"task weights name {unused[0]!r}, which this run's tasks leave out")

    def weigh(self, weights: dict[str, float]) -> None:
        """Draw training examples with these task weights (a task not named: 1; empty: uniform): each
        task's share of the fresh draws, and over the train split's rows (a task's rows share its weight)."""
        self.check_weights(weights)
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

    # -- data ---------------------------------------------------------------------------------
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
                rows.append({"task": task.name, "input": x, "text": text})
        return pd.DataFrame(rows)

    def train_rows(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """batch_size rows of the train split, drawn by the task weights where there are any."""
        return (torch.multinomial(self.row_weights, batch_size, replacement=True, generator=generator)
                if self.row_weights is not None
                else torch.randint(len(self.frames["train"]), (batch_size,), generator=generator))

    def sample_frame(self, batch_size: int, generator: torch.Generator) -> pd.DataFrame:
        """The examples `sample` would draw from the same generator state, as a frame (task, input, text)."""
        if self.config.task.fresh:
            return self.fresh_frame(batch_size, generator)
        return self.frames["train"].iloc[self.train_rows(batch_size, generator).tolist()].reset_index(drop=True)

    def sample(self, batch_size: int, generator: torch.Generator):
        if self.config.task.fresh:
            tokens, response = self.encode(self.fresh_frame(batch_size, generator))
        else:
            tokens, response = (t[self.train_rows(batch_size, generator)] for t in self.data["train"])
        width = int((tokens != self.tokenizer.pad_id).sum(1).max())  # drop the all-pad columns
        return tokens[:, :width].to(self.device), response[:, :width].to(self.device)

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

    @torch.no_grad()
    def generate(self, decode: Decode, frame: pd.DataFrame, temperature: float, generator: torch.Generator | None,
                 batch: int = 256, steps: int | None = None) -> list[str | None]:
        """The trace each prompt's sample writes (the text before </y>; None when it never closes),
        in at most `steps` tokens (default: the frame's longest trace and 8). `decode` writes the new
        tokens of one batch of prompts: decode(ids, mask, steps, temperature, generator, rows), rows
        being where the batch sits in the frame (a model, or one with a latent injected per row).

        A batch may decode only as far as its widest prompt leaves positions, so a short prompt batched
        with a long one could lose a long trace's end: each batch holds prompts of one length, but for
        those that leave their whole step budget free whatever they are batched with (a model with more
        positions than the benchmark needs: `positions`), which go in batches by length."""
        out: list[str | None] = [None] * len(frame)
        # at most as many tokens as the characters of the frame's longest trace, </y> and <eos> need
        longest = steps if steps is not None else max(len(t) for t in frame["trace"]) + 8
        inputs = frame["input"].tolist()
        widths = np.array([len(self.tokenizer.encode(prompt(x))) for x in inputs])
        positions = self.positions or self.longest + 8
        free = widths + longest <= positions if self.positions else np.zeros(len(widths), dtype=bool)
        by_width = np.flatnonzero(free)[np.argsort(widths[free], kind="stable")]
        batches = [by_width[lo:lo + batch] for lo in range(0, len(by_width), batch)]
        for width in np.unique(widths[~free]):
            rows = np.flatnonzero((widths == width) & ~free)
            batches += [rows[lo:lo + batch] for lo in range(0, len(rows), batch)]
        for rows in batches:
            ids, mask = self.prompts([inputs[i] for i in rows])
            steps = min(longest, positions - ids.shape[1])
            decoded = decode(ids, mask, steps, temperature, generator, torch.as_tensor(rows, device=self.device))
            for i, row in zip(rows, decoded.cpu().tolist()):
                text = self.tokenizer.decode(row)
                out[i] = text.split("</y>")[0] if "</y>" in text else None
        return out


    def verdicts(self, frame: pd.DataFrame, traces: list[str | None]) -> list[Verdict]:
        """Each generated trace's verdict in this run's formats (UNCLOSED for one that never closed)."""
        return [UNCLOSED if t is None else self.validate(task, x, t)
                for task, x, t in zip(frame["task"], frame["input"], traces)]

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


def total_variation(shares: dict[str, float] | None, reference: dict[str, float]) -> float | None:
    """Half the L1 distance between two strategy-share dicts over the same strategies (None: no shares)."""
    return None if shares is None else 0.5 * sum(abs(shares[s] - reference[s]) for s in reference)


def mean(values: dict) -> float | None:
    """The mean of a dict's values, those that are None left out (None when all are)."""
    known = [v for v in values.values() if v is not None]
    return float(np.mean(known)) if known else None




def generation_rows(frame: pd.DataFrame, traces: list[str | None], verdicts: list[Verdict], purpose,
                    **columns) -> pd.DataFrame:
    """One row per generation: task, input, purpose (one, or one per row), the trace (None: never
    closed), whether it is faithful, the strategies that write it (sorted, comma-joined), and `columns`
    (the test row, the pair, the steering strategy ...)."""
    return pd.DataFrame(dict(task=frame["task"].to_numpy(), input=frame["input"].to_numpy(),
                             purpose=np.broadcast_to(np.asarray(purpose, dtype=object), (len(frame),)),
                             trace=traces, valid=[v.valid for v in verdicts],
                             strategies=[",".join(sorted(v.strategies)) for v in verdicts], **columns))
