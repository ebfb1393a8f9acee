"""The latent-strategies factorisation: router r(z|x), generator g(y|x,z), posterior q(z|x,y).

Built on a frozen base (internalize.systems.strategies.frozen_base: a finished strategies_base run, a
Hugging Face model, or a GPT trained first); LoRA copies through peft (latent.py). Training
minimises the objective named by `objective.name` (objectives.py): a response term over the
generator's token losses, weighted by the frozen base's surprisal where the objective says so and
divided by c (estimated once on the validation responses and checkpointed), plus beta * KL(q || r)
with beta's linear warm-up. One reparameterised z from the posterior per example. Responses come
from the benchmark or are sampled from the frozen base (`data.response_source`).

Evaluation on the test split: z drawn from the router, traces sampled at temperature 1 (greedy
beside). fidelity: the share of valid traces. alignment: `eval.pairs` pairs of distinct inputs of
the same task; one router z (from the first) drives both generations; consistent when the two
compatible-strategy sets intersect (strict: when they are equal; valid: among the pairs whose two
traces are both faithful, which takes fidelity's share out); alignment_chance: the same
figure for strategies drawn independently by the data's shares, coinciding traces included
(alignment_chance_model: by the shares of the model's own faithful samples, the level that
alignment_valid reaches when z is ignored). alignment_control: the same pairs with each target
generated from its own, independent router z: what a model that ignores z scores at its own
fidelity (an unfaithful trace names no strategy, so alignment and its control are both capped by
fidelity, while the chance levels are not); alignment_lift = alignment - alignment_control, and
alignment_lift_ci its 95% bootstrap interval over pairs (per task; for the mean, pairs resampled
within each task). kl: KL(q || r) on the test traces. fidelity_posterior: the fidelity with z drawn
from the posterior of each input's own test trace (what the generator trains on; against fidelity,
the router's mismatch); strategy_posterior: among those faithful traces, the share that keep the
test trace's strategy (whether z carries it). `eval.snapshots` evaluations during training give the
trajectories and the PCA of posterior means; steering applies the mean posterior z of one
strategy's traces on one half of a task's test inputs to the other half (alignment.steering). Every
generation of the final evaluation is kept, one row each, in the run's generations.parquet (task,
input, purpose, trace, valid, strategies, and the test row, pair or steering strategy it belongs to).
"""
from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from internalize.config import Config
from internalize.runs import frozen_names
from internalize.system import VAL_SEED, Stage, System, device_for
from internalize.systems.strategies import figures
from internalize.systems.strategies.alignment import steering
from internalize.systems.strategies.benchmark import frame, unframe
from internalize.systems.strategies.data import (
    Benchmark,
    Decode,
    by_length,
    by_rows,
    in_parts,
)
from internalize.systems.strategies.frozen_base import base_tokenizer, frozen_base
from internalize.systems.strategies.latent import Factorization, draw, gaussian_kl, share_frozen
from internalize.systems.strategies.measures import PCA_EXAMPLES, TRAJECTORY, Measures
from internalize.systems.strategies.objectives import LATENT_OBJECTIVES, kl_weight, response_term


class FactorizeSystem(Measures, System):
    headline = "alignment"

    def __init__(self, config: Config):
        self.config = config
        self.device = device_for(config)
        self.bench = Benchmark(config, self.device, base_tokenizer(config))
        self.num_stages = 1
        self.found: dict = {}  # what the latest evaluation found; the summary is cached here
        self.generations: list[pd.DataFrame] | None = None  # the final evaluation's generations, while recorded
        base = frozen_base(config, self.bench, self.device)
        m = config.model
        self.net = Factorization(base, m.d_z, m.lora_rank, m.lora_alpha, m.lora_targets,
                                 onward=m.z_injection == "onward").to(self.device)
        share_frozen(self.net.generator, self.net.posterior)  # two adapted copies of one frozen base
        self.model = self.net
        self.stage_metrics = {"fidelity": None, "alignment": None}
        self.c: float | None = None
        self.step = 0
        self.trajectory: list[dict] = []
        self.draws = {"rows": 0, "refused": 0, "replaced": 0}  # base_faithful's training draws (redraw)
        total = config.train.steps_per_stage
        self.snapshot_steps = sorted({round(i * total / max(1, config.eval.snapshots))
                                      for i in range(config.eval.snapshots)}) if config.eval.snapshots else []
        self.shares = {n: self.bench.split_shares(n) for n in self.bench.names}
        self.val_data = None  # the validation batch (tokens, response, seed), drawn at the first stage()
        self.memo: dict | None = None  # the frozen base's surprisal by (tokens, response) content, when shared

    # -- batches ---------------------------------------------------------------------------------
    def slots(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per row of right-padded framed tokens: the index of <z>, of <z_empty>, and of the last token."""
        tok = self.bench.tokenizer
        z_at = (tokens == tok.id("<z>")).int().argmax(1)
        end_at = (tokens != tok.pad_id).sum(1) - 1
        return z_at, z_at + 1, end_at

    def sample(self, batch_size: int, generator: torch.Generator):
        if self.config.data.response_source == "benchmark":
            tokens, response = self.bench.sample(batch_size, generator)
        else:
            tokens, response = self.base_responses(self.bench.sample_frame(batch_size, generator), generator,
                                                   self.draws)
        return tokens, response, int(torch.randint(2**62, (1,), generator=generator))

    @torch.no_grad()
    def base_responses(self, examples: pd.DataFrame, generator: torch.Generator, tally: dict | None = None):
        """The same inputs, each with a response sampled from the frozen base at temperature 1; under
        `base_faithful`, each unfaithful one drawn again (see redraw; counted into `tally`)."""
        traces = self.base_traces(examples, generator)
        if self.config.data.response_source == "base_faithful":
            traces = self.redraw(examples, traces, generator, tally)
        texts = [frame(x, t if t is not None else "") for x, t in zip(examples["input"], traces)]
        tokens, response = self.bench.encode(pd.DataFrame({"input": examples["input"], "text": texts}))
        return tokens.to(self.device), response.to(self.device)

    def base_traces(self, examples: pd.DataFrame, generator: torch.Generator) -> list[str | None]:
        with self.net.generator.disable_adapter():
            return self.bench.generate(self.decoder(None), examples, 1.0, generator, steps=self.bench.longest,
                                       batch=self.config.train.micro_batch or 256)

    def redraw(self, examples: pd.DataFrame, traces: list[str | None], generator: torch.Generator,
               tally: dict | None = None) -> list:
        """Each trace that the benchmark's validators refuse, sampled again from the base, up to
        data.redraws times; one still refused then takes its example's benchmark trace. The base's
        faithful samples keep their strategy shares and its lean; its errors are gone. Counted into
        `tally` where given (rows, refused at the first draw, replaced by the benchmark's trace): the
        training draws are (self.draws), the validation responses, drawn again at every start, are not."""
        traces = list(traces)
        bad = [i for i, v in enumerate(self.bench.verdicts(examples, traces)) if not v.valid]
        first = len(bad)
        for _ in range(self.config.data.redraws):
            if not bad:
                break
            again = self.base_traces(examples.iloc[bad], generator)
            for i, trace in zip(bad, again):
                traces[i] = trace
            verdicts = self.bench.verdicts(examples.iloc[bad], again)
            bad = [i for i, v in zip(bad, verdicts) if not v.valid]
        for i in bad:
            traces[i] = unframe(examples["text"].iloc[i])[1]
        if tally is not None:
            tally["rows"] += len(traces)
            tally["refused"] += first
            tally["replaced"] += len(bad)
        return traces

    def decoder(self, z: torch.Tensor | None) -> Decode:
        """Benchmark.generate's `decode` for the generator with row i of `z` (N, d_z) added at each prompt
        of frame row i; with z None, nothing is injected (the frozen base, its adapter disabled by the caller)."""
        backbone = self.net.generator.get_base_model()
        stop = self.bench.tokenizer.id("<eos>")

        def decode(ids, mask, steps, temperature, generator, rows):
            if z is None:
                inject = None
            else:
                slots = torch.full((ids.shape[0],), ids.shape[1] - 3, device=ids.device)
                inject = self.net.inject(slots, z[rows])
            return backbone.generate(ids, steps, temperature=temperature, generator=generator, stop_token=stop,
                                     attention_mask=mask, inject=inject)
        return decode

    # -- the objective ---------------------------------------------------------------------------
    def terms(self, batch):
        """Per row: the objective's response term, KL(q || r) and the mean response nll; computed on
        train.length_chunks groups of rows of similar length (see by_length), one z drawn per row."""
        tokens, response, seed = batch
        generator = torch.Generator(device=tokens.device).manual_seed(seed)
        o = self.config.objective
        weighs_by_surprisal = LATENT_OBJECTIVES[o.name][0] in ("surprisal", "inverse")

        def per_row(rows: torch.Tensor, width: int) -> torch.Tensor:
            t, where = tokens[rows, :width], response[rows, 1:width]
            z_at, slot, end_at = self.slots(t)
            q = self.net.posterior_params(t, end_at)
            logits, r = self.net.generate_pass(t[:, :-1], draw(q, generator), slot, z_at)
            nll = F.cross_entropy(logits.transpose(1, 2), t[:, 1:], reduction="none") * where  # (b, width-1)
            # the frozen base's pass only where the objective weighs tokens by its surprisal
            surprisal = self.shared_surprisal(t, where) if weighs_by_surprisal else torch.zeros_like(nll)
            rec = response_term(o.name, nll, surprisal, where, o.alpha, o.gamma, self.c or 1.0)
            return torch.stack([rec, gaussian_kl(q, r), nll.sum(1) / where.sum(1)], dim=1)  # (b, 3)

        rec, kl, nll = by_length(tokens, self.bench.tokenizer.pad_id, self.config.train.length_chunks, per_row).unbind(1)
        return rec, kl, nll

    def surprisal(self, tokens: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        """(B, L-1) the frozen base's -log p of each next token, 0 off the response (`where`)."""
        logits = self.net.reference_logits(tokens[:, :-1])
        return F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none") * where

    def shared_surprisal(self, tokens: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        """surprisal(tokens, where), looked up in `memo` where runs stacked over one base share it
        (internalize.systems.strategies.stacked): computed once for every run that reads these rows."""
        if self.memo is None:
            return self.surprisal(tokens, where)
        key = (tuple(tokens.shape), tokens.cpu().numpy().tobytes(), where.cpu().numpy().tobytes())
        if key not in self.memo:
            self.memo[key] = self.surprisal(tokens, where)
        return self.memo[key]

    def loss_of(self, batch):
        o = self.config.objective
        beta = kl_weight(o.name, o.beta, o.beta_warmup, self.step, self.config.train.steps_per_stage)
        rec, kl, nll = self.terms(batch)
        return (rec + beta * kl).mean(), {"reconstruction": float(rec.detach().mean()), "kl": float(kl.detach().mean()),
                                          "nll": float(nll.detach().mean()), "beta": beta}

    @torch.no_grad()
    def estimate_c(self, batch) -> float:
        """The objective's response term of the frozen base on the validation responses, averaged."""
        o = self.config.objective

        def term(piece) -> torch.Tensor:
            tokens, response, _ = piece
            surprisal = self.surprisal(tokens, response[:, 1:])
            return response_term(o.name, surprisal, surprisal, response[:, 1:], o.alpha, o.gamma, 1.0).mean()
        return float(in_parts(term, batch, by_rows, self.config.train.micro_batch))

    def validation(self) -> tuple:
        """The validation batch (tokens, response, seed): the benchmark's, or the frozen base's samples
        on the same inputs (drawn again at every start, from the validation seed)."""
        if self.val_data is None:
            tokens, response = (t.to(self.device) for t in self.bench.val)
            if self.config.data.response_source != "benchmark":
                tokens, response = self.base_responses(self.bench.val_frame,
                                                       torch.Generator().manual_seed(self.config.seed + VAL_SEED))
            self.val_data = (tokens, response, self.config.seed + VAL_SEED)
        return self.val_data

    def stage(self, index: int) -> Stage:
        val = self.validation()
        if self.c is None:
            self.c = self.estimate_c(val)

        @torch.no_grad()
        def validate_loss() -> float:
            return float(in_parts(lambda b: self.loss_of(b)[0], val, by_rows, self.config.train.micro_batch))

        # micro-batches of rows, each drawing its z from a seed of its own
        return Stage(info={}, params=self.net.learnable(), sample=self.sample, loss=self.loss_of,
                     validate=validate_loss, split=by_rows)

    def on_step(self, step: int) -> None:
        self.step = step
        if step in self.snapshot_steps and all(s["step"] != step for s in self.trajectory):
            self.trajectory.append(dict(step=step, **self.measure(snapshot=True)))

    def state(self) -> dict:
        return {"c": self.c, "trajectory": self.trajectory, "draws": self.draws}

    def fixed(self) -> set[str]:  # the frozen base's copies, read again (or trained, seeded) at every start
        return frozen_names(self.net)

    def load_state(self, state: dict) -> None:
        self.c = state.get("c")
        self.trajectory = state.get("trajectory", [])
        self.draws = state.get("draws", self.draws)

    def evaluate(self, stage: int = 0) -> dict[str, float]:
        started = time.perf_counter()
        self.found = self.measure()
        self.found["evaluation_seconds"] = time.perf_counter() - started
        return {k: self.found[k] for k in ("fidelity", "fidelity_greedy", "alignment", "alignment_chance", "kl")}

    def summary(self) -> dict:
        if "summary" in self.found:
            return self.found["summary"]
        if "per_task" not in self.found:
            self.evaluate(0)
        started = time.perf_counter()
        o, m = self.config.objective, self.config.model
        self.found["summary"] = dict(
            {k: self.found[k] for k in ("fidelity", "fidelity_greedy", "alignment", "alignment_strict",
                                       "alignment_valid", "alignment_chance", "alignment_chance_model",
                                       "alignment_control", "alignment_lift", "alignment_lift_ci", "kl",
                                       "fidelity_posterior", "strategy_posterior", "per_task", "pairs")},
            objective=o.name, response_source=self.config.data.response_source, c=self.c, d_z=m.d_z,
            lora_rank=m.lora_rank, trainable_parameters=sum(p.numel() for p in self.net.learnable()),
            tasks=self.bench.names, test_examples=len(self.bench.test_rows),
            trajectory=[*self.trajectory, dict(step=self.config.train.steps_per_stage,
                                               **{k: self.found[k] for k in TRAJECTORY})],  # the end, without PCA
            steering=steering(self), data_strategy_shares=self.shares,
            **(self.draws_summary() if self.config.data.response_source == "base_faithful" else {}))
        # the final evaluation's own time: the measures at the stage's end and the steering generations
        self.found["summary"]["evaluation_seconds"] = self.found.get("evaluation_seconds", 0.0) + time.perf_counter() - started
        return self.found["summary"]

    def draws_summary(self) -> dict:
        """base_faithful's training draws: counts, and the shares refused at the first draw and replaced."""
        rows = max(1, self.draws["rows"])
        return {"base_draws": dict(self.draws), "base_refused": self.draws["refused"] / rows,
                "base_replaced": self.draws["replaced"] / rows}

    def files(self, folder: Path) -> None:
        """generations.parquet: every generation of the final evaluation, one row each (see traces_with):
        every figure of the summary can be recomputed from it."""
        self.summary()
        if self.generations:
            table = pd.concat(self.generations, ignore_index=True)
            table.to_parquet(folder / "generations.parquet", index=False)

    def figures(self, folder: Path, per_stage: list[dict]) -> None:
        keep = min(PCA_EXAMPLES, len(self.bench.test))
        labels = [f"{t} / {st}" for t, st in zip(self.bench.test["task"][:keep], self.bench.test["strategy"][:keep])]
        figures.factorisation(self.summary(), labels, folder)

    @staticmethod
    def describe(summary: dict) -> str:
        return (f"{summary['objective']} ({summary['response_source']} responses): fidelity "
                f"{summary['fidelity']:.3f} sampled, {summary['fidelity_greedy']:.3f} greedy; alignment "
                f"{summary['alignment']:.3f} (strict {summary['alignment_strict']:.3f}, among faithful pairs "
                + ("n/a" if summary.get("alignment_valid") is None else f"{summary['alignment_valid']:.3f}")
                + f", chance {summary['alignment_chance']:.3f} by the data's shares, "
                + ("n/a" if summary.get("alignment_chance_model") is None else f"{summary['alignment_chance_model']:.3f}")
                + " by the model's own)"
                + ("" if summary.get("alignment_lift") is None else
                   f"; lift over its control {summary['alignment_lift']:+.3f} (95% "
                   f"[{summary['alignment_lift_ci'][0]:+.3f}, {summary['alignment_lift_ci'][1]:+.3f}])")
                + f"; KL {summary['kl']:.3f}")


