"""The base model of the latent-strategies system: the toolkit's GPT on the six-task benchmark.

Each example is framed as <bos><x>input</x><z><z_empty></z><y>trace</y><eos>; the strategy that
wrote the trace is never shown. The loss is cross-entropy on the response (the trace, </y> and
<eos>), teacher forced. One stage of train.steps_per_stage steps, or one stage per train.phases entry
(each with its own steps, learning rate, warm-up and task weights, its optimizer fresh, evaluated
at its end): a recipe that continues a run with other settings, in one command.

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
from internalize.runs import frozen_names
from internalize.system import TEST_SEED, Stage, System, device_for
from internalize.systems.strategies import figures, probes
from internalize.systems.strategies.benchmark import TASKS, departure, frame
from internalize.systems.strategies.data import (
    UNCLOSED,
    Benchmark,
    by_length,
    by_tokens,
    credit,
    in_parts,
    mean,
    strategy_entropy,
    total_variation,
)

FAILURES_SHOWN = 5  # unfaithful greedy samples kept per task in summary.json


class StrategiesBaseSystem(System):
    headline = "fidelity"

    def __init__(self, config: Config):
        self.config = config
        self.device = device_for(config)
        self.stage_metrics = {"fidelity": None, "fidelity_greedy": None}
        m = config.model
        if m.hf_path is None:
            self.bench = bench = Benchmark(config, self.device)
            self.model = GPT(GPTConfig(len(bench.tokenizer), bench.longest + 8, m.width, m.depth, m.heads))
        else:  # a Hugging Face model, read through its own tokenizer and adapted (internalize.systems.strategies.adapt)
            from internalize.systems.strategies import adapt
            from internalize.systems.strategies.hf import load_tokenizer, model_folder

            self.bench = bench = Benchmark(config, self.device, load_tokenizer(model_folder(m.hf_path)))
            self.model = adapt.adapted(self.pretrained(), bench.tokenizer, m.adapt or "lora", m.lora_rank, m.lora_alpha).train()
            bench.positions = self.model.cfg.max_len
        self.model = self.model.to(self.device)
        self.phases = config.train.phases
        self.num_stages = max(1, len(self.phases))
        for phase in self.phases:
            bench.check_weights(phase.weights_or(config.task.weights))
        self.found: dict = {}  # what the latest evaluation found; summary and probes are cached here

    def pretrained(self) -> torch.nn.Module:
        """The Hugging Face model of model.hf_path as it was saved, before any adaptation (the frame tokens'
        new embedding rows drawn from the torch seed)."""
        from internalize.systems.strategies.hf import HFCausalLM

        m = self.config.model
        return HFCausalLM.load(m.hf_path, self.bench.tokenizer, m.dtype, longest=self.bench.longest)

    def learnable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def fixed(self) -> set[str]:
        """A Hugging Face model adapted with LoRA: its pretrained weights, read from model.hf_path."""
        return frozen_names(self.model)

    # -- training ------------------------------------------------------------------------------
    def response_losses(self, tokens: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
        """(B,) summed cross-entropy over each row's response tokens (nats per response), computed on
        train.length_chunks groups of rows of similar length, each cut to its longest row."""
        def losses(rows: torch.Tensor, width: int) -> torch.Tensor:
            t, r = tokens[rows, :width], response[rows, :width]
            logits, _ = self.model(t[:, :-1])  # (b, width-1, V)
            return (F.cross_entropy(logits.transpose(1, 2), t[:, 1:], reduction="none") * r[:, 1:]).sum(1)

        return by_length(tokens, self.bench.tokenizer.pad_id, self.config.train.length_chunks, losses)

    def loss_of(self, batch) -> torch.Tensor:
        tokens, response = batch
        return self.response_losses(tokens, response).sum() / response[:, 1:].sum()  # nats per response token

    def stage(self, index: int) -> Stage:
        val = tuple(t.to(self.device) for t in self.bench.val)

        @torch.no_grad()
        def validate_loss() -> float:
            return float(in_parts(self.loss_of, val, by_tokens, self.config.train.micro_batch))

        info, train = {}, {}
        if self.phases:
            phase = self.phases[index]
            self.bench.weigh(phase.weights_or(self.config.task.weights))
            info, train = {"phase": index + 1}, phase.train_keys()
        return Stage(info=info, params=self.learnable(), sample=self.bench.sample, loss=self.loss_of,
                     validate=validate_loss, train=train, split=by_tokens)

    # -- evaluation ----------------------------------------------------------------------------
    def decode(self, ids: torch.Tensor, mask: torch.Tensor, steps: int, temperature: float,
               generator: torch.Generator, rows: torch.Tensor) -> torch.Tensor:
        """New tokens for one batch of prompts (Benchmark.generate's `decode`)."""
        return self.model.generate(ids, steps, temperature=temperature, generator=generator,
                                   stop_token=self.bench.tokenizer.id("<eos>"), attention_mask=mask)

    def fidelity(self, temperature: float, seed: int) -> tuple[dict, dict, dict, dict]:
        """Per task: the share of faithful samples, the verdicts, the first few unfaithful samples
        ({input, trace, reference, reason}: what a reader looks at to see how the model fails), and
        where the unfaithful ones go wrong: {strategy followed: {segment: count}} (see `departure`;
        "unclosed" under "none" for samples that never close)."""
        frame = self.bench.test
        traces = self.bench.generate(self.decode, frame, temperature, torch.Generator(device=self.device).manual_seed(seed))
        verdicts = {name: [] for name in self.bench.names}
        failures = {name: [] for name in self.bench.names}
        departures = {name: {} for name in self.bench.names}
        for task, x, trace, reference in zip(frame["task"], frame["input"], traces, frame["trace"]):
            verdict = UNCLOSED if trace is None else self.bench.validate(task, x, trace)
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

    def evaluate(self, stage: int = 0) -> dict[str, float]:
        self.model.eval()
        seed = self.config.seed + TEST_SEED
        sampled, verdicts, _, departures = self.fidelity(1.0, seed)
        greedy, greedy_verdicts, failures, _ = self.fidelity(0.0, seed)
        self.model.train()
        self.found = dict(sampled=sampled, greedy=greedy, verdicts=verdicts, greedy_verdicts=greedy_verdicts,
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
        frame = self.bench.test
        losses = self.scored(*self.bench.test_data)
        entropy = np.array([strategy_entropy(self.bench.tasks[t], json.loads(p)) for t, p in zip(frame["task"], frame["problem"])])
        tasks = frame["task"].to_numpy()
        return ({n: float(losses[tasks == n].mean()) for n in self.bench.names},
                {n: float(entropy[tasks == n].mean()) for n in self.bench.names})

    @torch.no_grad()
    def strategy_mass(self, table: pd.DataFrame) -> list[dict[str, float]]:
        """For each row of `table` (task, input, problem), the probability the model gives each
        strategy's canonical trace, p(trace, </y> | input), a trace two strategies write split evenly
        between them (as `credit` splits it); their sum is the chance a sample is faithful."""
        rows = []  # (row, input, framed text, the strategies that write this trace)
        for i, (task, x, problem) in enumerate(zip(table["task"], table["input"], table["problem"])):
            by_trace: dict[str, list[str]] = {}
            for strategy, trace in self.bench.tasks[task].traces(json.loads(problem)).items():
                if trace is not None:
                    by_trace.setdefault(trace, []).append(strategy)
            rows += [(i, x, frame(x, trace), strategies) for trace, strategies in by_trace.items()]
        where, inputs, texts, writers = zip(*rows)
        tokens, response = self.bench.encode(pd.DataFrame({"input": inputs, "text": texts}))
        response &= tokens != self.bench.tokenizer.id("<eos>")  # the sample ends at </y>; what follows is not scored
        mass = [dict.fromkeys(TASKS[task].strategies, 0.0) for task in table["task"]]
        for p, strategies, i in zip(np.exp(-self.scored(tokens, response)), writers, where):
            for s in strategies:
                mass[i][s] += p / len(strategies)
        return mass

    def exact_shares(self) -> dict[str, dict]:
        """Per task, what sampling at temperature 1 estimates, without the sampling noise: every test
        input's canonical traces (coinciding ones once) scored by the model (`strategy_mass`).
        {task: {fidelity: the mean over inputs of their summed probability (a sample is faithful exactly
        when it is one of them), shares: {strategy: its traces' probability mass over the total}}};
        shares None where the mass is zero."""
        frame = self.bench.test
        mass = {n: dict.fromkeys(TASKS[n].strategies, 0.0) for n in self.bench.names}
        for task, found in zip(frame["task"], self.strategy_mass(frame)):
            for s, p in found.items():
                mass[task][s] += p
        counts, total = frame["task"].value_counts(), {n: sum(m.values()) for n, m in mass.items()}
        return {n: dict(fidelity=float(total[n] / counts[n]),
                        shares={s: float(v / total[n]) for s, v in m.items()} if total[n] > 0 else None)
                for n, m in mass.items()}

    def strategy_probes(self) -> dict:
        """summary["probes"] (see probes.strategy_probes), plus "excluded": {task: coinciding examples}."""
        if "probes" in self.found:
            return self.found["probes"]
        frame = self.bench.test
        tokens, response = self.bench.test_data
        closing = (tokens == self.bench.tokenizer.id("</y>")) | (tokens == self.bench.tokenizer.id("<eos>"))
        trace = response & ~closing  # (N, L) the trace tokens: the response before </y>
        keep = np.array([len(v.strategies) == 1 for v in self.bench.test_verdicts], dtype=bool)
        rows = torch.from_numpy(keep)

        def fit(model) -> dict:
            model.eval()
            return probes.strategy_probes(model, tokens[rows].to(self.device), trace[rows].to(self.device),
                                          frame["strategy"].to_numpy()[keep].tolist(),
                                          frame["task"].to_numpy()[keep].tolist(), order=self.bench.names,
                                          seed=self.config.seed + TEST_SEED)

        result = fit(self.model)
        self.model.train()
        # the same probes on the untrained model (the run's own initial weights): the trace formats alone
        # give the strategy away to a probe, so what training adds is the margin over this control
        with torch.random.fork_rng():  # a Hugging Face model's control: the model before its adaptation
            torch.manual_seed(self.config.seed)
            untrained = (GPT(self.model.cfg) if self.config.model.hf_path is None else self.pretrained()).to(self.device)
        control = fit(untrained)
        result["untrained"] = {k: control[k] for k in ("best_layer_mean", "layer_mean", "mean_accuracy")}
        tasks = frame["task"].to_numpy()
        result["excluded"] = {n: int((~keep & (tasks == n)).sum()) for n in self.bench.names}
        self.found["probes"] = result
        return result

    def summary(self) -> dict:
        if "summary" in self.found:
            return self.found["summary"]
        if "sampled" not in self.found:
            self.evaluate(0)
        sampled, greedy, verdicts = self.found["sampled"], self.found["greedy"], self.found["verdicts"]
        data_verdicts = {n: [v for v, t in zip(self.bench.test_verdicts, self.bench.test["task"]) if t == n] for n in self.bench.names}
        model_shares = {n: credit(verdicts[n], TASKS[n].strategies) for n in self.bench.names}
        data_shares = {n: credit(data_verdicts[n], TASKS[n].strategies) for n in self.bench.names}
        train_shares = {n: self.bench.training_shares(n) for n in self.bench.names}
        tv, tv_train = ({n: total_variation(model_shares[n], reference[n]) for n in self.bench.names}
                        for reference in (data_shares, train_shares))
        loss, entropy = self.response_loss_and_entropy()
        exact = self.exact_shares()
        tv_exact = {n: total_variation(exact[n]["shares"], train_shares[n]) for n in self.bench.names}
        self.found["summary"] = dict(fidelity=mean(sampled), fidelity_greedy=mean(greedy), share_tv=mean(tv),
                    share_tv_train=mean(tv_train), fidelity_exact=mean({n: e["fidelity"] for n, e in exact.items()}),
                    share_tv_exact=mean(tv_exact),
                    response_loss=mean(loss), strategy_entropy=mean(entropy),
                    per_task={n: dict(fidelity=sampled[n], fidelity_greedy=greedy[n], share_tv=tv[n],
                                      response_loss=loss[n], strategy_entropy=entropy[n],
                                      share_tv_train=tv_train[n], strategy_shares=model_shares[n],
                                      fidelity_exact=exact[n]["fidelity"], share_tv_exact=tv_exact[n],
                                      strategy_shares_exact=exact[n]["shares"],
                                      data_strategy_shares=data_shares[n], train_strategy_shares=train_shares[n],
                                      by_input_length=self.by_input_length(n),
                                      greedy_failures=self.found["failures"][n],
                                      departures=self.found["departures"][n])
                              for n in self.bench.names},
                    tasks=self.bench.names, parameters=sum(p.numel() for p in self.model.parameters()),
                    trainable_parameters=sum(p.numel() for p in self.learnable()),
                    test_examples=len(self.bench.test_rows), probes=self.strategy_probes())
        return self.found["summary"]

    def by_input_length(self, task: str) -> dict[str, dict]:
        """Fidelity of one task's test samples by the input's length in characters: {length: {examples,
        fidelity, fidelity_greedy}} (where the errors gather: long lists, long numbers)."""
        lengths = self.bench.test.loc[self.bench.test["task"] == task, "input"].str.len().to_numpy()
        sampled, greedy = self.found["verdicts"][task], self.found["greedy_verdicts"][task]
        return {str(k): dict(examples=int((lengths == k).sum()),
                             fidelity=float(np.mean([v.valid for v, n in zip(sampled, lengths) if n == k])),
                             fidelity_greedy=float(np.mean([v.valid for v, n in zip(greedy, lengths) if n == k])))
                for k in sorted(set(lengths.tolist()))}

    def files(self, folder: Path) -> None:
        """A Hugging Face base's folder, hf/: the tokenizer and the adapter (or, adapted fully, the model),
        what strategies_factorize reads as its frozen base (model.base). Written into the run directory
        only: an evaluation's folder (internalize evaluate) would hold a copy of the same weights."""
        if self.config.model.hf_path is not None and (folder / "config.yaml").is_file():
            from internalize.systems.strategies import adapt

            adapt.save(self.model, self.bench.tokenizer, folder / adapt.FOLDER)

    def figures(self, folder: Path, per_stage: list[dict]) -> None:
        summary = self.summary()
        per_task = summary["per_task"]
        plots.grouped_bars({n: {"sampled (T = 1)": per_task[n]["fidelity"], "greedy": per_task[n]["fidelity_greedy"]}
                            for n in self.bench.names}, folder / "fidelity.png", "fidelity", "base model: fidelity per task",
                           ylim=(0, 1.05))
        bars = {f"{n}\n{s}": {"samples": (per_task[n]["strategy_shares"] or {}).get(s, np.nan),
                               "model, exact": (per_task[n].get("strategy_shares_exact") or {}).get(s, np.nan),
                               "data (test inputs)": per_task[n]["data_strategy_shares"][s],
                               "training draws": per_task[n]["train_strategy_shares"][s]}
                for n in self.bench.names for s in TASKS[n].strategies}
        plots.grouped_bars(bars, folder / "strategy_shares.png", "share of valid traces",
                           "base model: strategy shares of its samples against the data's", ylim=(0, 1.05))
        found = summary["probes"]
        figures.probe_heatmaps(found["accuracy"], found["chance"], folder / "probes.png",
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


def probe_line(found: dict | None) -> str:
    """'; strategy probes ...' for describe: the best layer's accuracy against chance, over tasks."""
    if not found or found.get("mean_accuracy") is None:
        return ""
    untrained = (found.get("untrained") or {}).get("mean_accuracy")
    return (f"; strategy probes {found['mean_accuracy']:.3f} at each task's best layer against chance "
            f"{found['mean_chance']:.3f}" + ("" if untrained is None else f" (untrained model: {untrained:.3f})"))
