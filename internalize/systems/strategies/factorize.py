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

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from internalize.config import Config
from internalize.runs import frozen_names
from internalize.system import TEST_SEED, VAL_SEED, Stage, System, device_for
from internalize.systems.strategies import figures
from internalize.systems.strategies.alignment import (
    consistent,
    consistent_when_valid,
    draw_pairs,
    lift_interval,
    pair_chance,
    pca2,
    steering,
)
from internalize.systems.strategies.benchmark import TASKS, frame
from internalize.systems.strategies.data import (
    Benchmark,
    Decode,
    by_length,
    by_rows,
    credit,
    generation_rows,
    in_parts,
    mean,
)
from internalize.systems.strategies.frozen_base import base_tokenizer, frozen_base
from internalize.systems.strategies.latent import Factorization, draw, gaussian_kl
from internalize.systems.strategies.objectives import LATENT_OBJECTIVES, kl_weight, response_term

PCA_EXAMPLES = 240  # test examples whose posterior means each snapshot projects
TRAJECTORY = ("fidelity", "fidelity_greedy", "alignment", "alignment_strict", "alignment_valid", "kl")


class FactorizeSystem(System):
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
        self.model = self.net
        self.stage_metrics = {"fidelity": None, "alignment": None}
        self.c: float | None = None
        self.step = 0
        self.trajectory: list[dict] = []
        total = config.train.steps_per_stage
        self.snapshot_steps = sorted({round(i * total / max(1, config.eval.snapshots))
                                      for i in range(config.eval.snapshots)}) if config.eval.snapshots else []
        self.shares = {n: self.bench.split_shares(n) for n in self.bench.names}

    # -- batches ---------------------------------------------------------------------------------
    def slots(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per row of right-padded framed tokens: the index of <z>, of <z_empty>, and of the last token."""
        tok = self.bench.tokenizer
        z_at = (tokens == tok.id("<z>")).int().argmax(1)
        end_at = (tokens != tok.pad_id).sum(1) - 1
        return z_at, z_at + 1, end_at

    def sample(self, batch_size: int, generator: torch.Generator):
        tokens, response = self.bench.sample(batch_size, generator)
        if self.config.data.response_source == "base":
            tokens, response = self.base_responses(tokens, generator)
        return tokens, response, int(torch.randint(2**62, (1,), generator=generator))

    @torch.no_grad()
    def base_responses(self, tokens: torch.Tensor, generator: torch.Generator):
        """The same inputs, each with a response sampled from the frozen base at temperature 1."""
        inputs = [self.bench.tokenizer.decode(row).split("<x>")[1].split("</x>")[0] for row in tokens.cpu().tolist()]
        with self.net.generator.disable_adapter():
            traces = self.bench.generate(self.decoder(None), pd.DataFrame({"input": inputs}), 1.0, generator,
                                         steps=self.bench.longest, batch=self.config.train.micro_batch or 256)
        texts = [frame(x, t if t is not None else "") for x, t in zip(inputs, traces)]
        return self.bench.encode(pd.DataFrame({"input": inputs, "text": texts}))

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
            surprisal = self.surprisal(t, where) if weighs_by_surprisal else torch.zeros_like(nll)
            rec = response_term(o.name, nll, surprisal, where, o.alpha, o.gamma, self.c or 1.0)
            return torch.stack([rec, gaussian_kl(q, r), nll.sum(1) / where.sum(1)], dim=1)  # (b, 3)

        rec, kl, nll = by_length(tokens, self.bench.tokenizer.pad_id, self.config.train.length_chunks, per_row).unbind(1)
        return rec, kl, nll

    def surprisal(self, tokens: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        """(B, L-1) the frozen base's -log p of each next token, 0 off the response (`where`)."""
        logits = self.net.reference_logits(tokens[:, :-1])
        return F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none") * where

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

    def stage(self, index: int) -> Stage:
        tokens, response = (t.to(self.device) for t in self.bench.val)
        if self.config.data.response_source == "base":
            tokens, response = self.base_responses(tokens, torch.Generator().manual_seed(self.config.seed + VAL_SEED))
        val = (tokens, response, self.config.seed + VAL_SEED)
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
        return {"c": self.c, "trajectory": self.trajectory}

    def fixed(self) -> set[str]:  # the frozen base's copies, read again (or trained, seeded) at every start
        return frozen_names(self.net)

    def load_state(self, state: dict) -> None:
        self.c = state.get("c")
        self.trajectory = state.get("trajectory", [])

    # -- evaluation ------------------------------------------------------------------------------

    @torch.no_grad()
    def route(self, frame: pd.DataFrame, generator: torch.Generator) -> torch.Tensor:
        """(N, d_z) a z drawn from the router for each input of the frame."""
        out = []
        for lo in range(0, len(frame), 256):
            ids, mask = self.bench.prompts(frame["input"].iloc[lo:lo + 256])
            z_at = torch.full((ids.shape[0],), ids.shape[1] - 4, device=ids.device)
            out.append(draw(self.net.router(ids, z_at, mask), generator))
        return torch.cat(out)

    @torch.no_grad()
    def posterior_means(self, tokens: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """(N, d_z) the posterior mean of each framed (x, y); with a generator, a z drawn from it, as in training."""
        params = [self.net.posterior_params(t, self.slots(t)[2]) for t in tokens.to(self.device).split(256)]
        return torch.cat([p[0] if generator is None else draw(p, generator) for p in params])

    def traces_with(self, frame: pd.DataFrame, z: torch.Tensor, temperature: float, generator: torch.Generator,
                    purpose: str | None = None, **columns) -> list:
        """Verdicts of the traces sampled on each input with its row of z. With a `purpose`, while the final
        evaluation records them, every generation joins `generations` (one row each, `columns` beside)."""
        traces = self.bench.generate(self.decoder(z), frame, temperature, generator)
        verdicts = self.bench.verdicts(frame, traces)
        if purpose is not None and self.generations is not None:
            self.generations.append(generation_rows(frame, traces, verdicts, purpose, **columns))
        return verdicts

    @torch.no_grad()
    def measure(self, snapshot: bool = False) -> dict:
        """fidelity (sampled, greedy), alignment (intersecting, strict) and its control, KL; per task and
        the mean. The final evaluation (not a snapshot) records every generation (`generations`)."""
        was = self.net.training
        self.net.eval()
        self.generations = None if snapshot else []
        seed = self.config.seed + TEST_SEED
        frame, (tokens, response) = self.bench.test, self.bench.test_data
        pairs = self.config.eval.pairs
        if snapshot:  # a trajectory point: the first eval.snapshot_size test inputs, pairs in proportion
            keep = min(self.config.eval.snapshot_size, len(frame))
            pairs = max(1, round(pairs * keep / len(frame)))
            frame, tokens, response = frame.iloc[:keep], tokens[:keep], response[:keep]
        tasks = frame["task"].to_numpy()
        positions = np.arange(len(frame))
        gen = lambda offset: torch.Generator(device=self.device).manual_seed(seed + offset)  # noqa: E731
        z = self.route(frame, gen(0))
        sampled = self.traces_with(frame, z, 1.0, gen(0), "fidelity", row=positions)
        greedy = self.traces_with(frame, z, 0.0, None, "fidelity_greedy", row=positions)
        src, tgt = draw_pairs(self.bench, pairs, self.config.seed + TEST_SEED, frame)
        pair = np.arange(len(src))
        both = frame.iloc[np.concatenate([src, tgt])]
        zz = torch.cat([z[torch.from_numpy(src)]] * 2)  # the source's router z drives both generations
        purposes = np.array(["pair_source"] * len(src) + ["pair_target"] * len(tgt))
        paired = self.traces_with(both, zz, 1.0, gen(1), purposes, row=np.concatenate([src, tgt]),
                                  pair=np.concatenate([pair, pair]))
        a, b = paired[:len(src)], paired[len(src):]
        together = consistent(a, b)  # (pairs,) one z, the two traces' strategy sets intersect
        kls = torch.cat([self.kl_of(tokens[r].to(self.device)) for r in torch.arange(len(tokens)).split(256)]).cpu().numpy()
        per_task = {}
        for n in self.bench.names:
            here = tasks == n
            pair_here = tasks[src] == n
            per_task[n] = dict(
                fidelity=float(np.mean([v.valid for v, h in zip(sampled, here) if h])),
                fidelity_greedy=float(np.mean([v.valid for v, h in zip(greedy, here) if h])),
                alignment=float(together[pair_here].mean()) if pair_here.any() else None,
                alignment_strict=float(np.mean([bool(x.strategies) and x.strategies == y.strategies
                                                for x, y, h in zip(a, b, pair_here) if h])) if pair_here.any() else None,
                alignment_valid=consistent_when_valid([(x, y) for x, y, h in zip(a, b, pair_here) if h]),
                kl=float(kls[here].mean()))
        result = {k: mean({n: per_task[n][k] for n in self.bench.names}) for k in TRAJECTORY}
        if snapshot:
            keep = torch.arange(min(PCA_EXAMPLES, len(tokens)))
            means = self.posterior_means(tokens[keep]).cpu().numpy()
            result["pca"] = pca2(means).round(4).tolist()
        else:
            # z from the posterior of each input's own test trace, as the generator sees in training: its
            # fidelity against the router's tells the generator's damage from the router's mismatch, and
            # how often the trace keeps the reference's strategy tells whether z carries it
            post = self.posterior_means(tokens, torch.Generator(device=self.device).manual_seed(seed + 3))
            posterior = self.traces_with(frame, post, 1.0, gen(3), "posterior", row=positions)
            for n in self.bench.names:
                mine = [(v, r) for v, r, t in zip(posterior, self.bench.test_verdicts, tasks) if t == n]
                per_task[n]["fidelity_posterior"] = float(np.mean([v.valid for v, _ in mine]))
                per_task[n]["strategy_posterior"] = consistent_when_valid(mine)
            for k in ("fidelity_posterior", "strategy_posterior"):
                result[k] = mean({n: per_task[n][k] for n in self.bench.names})
            result.update(self.control(a, together, src, tgt, per_task, gen))
            result["per_task"] = per_task
            result["pairs"] = len(src)
            chance = pair_chance(self.bench, src, tgt, self.shares)
            # the level alignment_valid reaches when z is ignored: strategies drawn by the shares of the
            # model's own faithful samples (a base leaning to one strategy agrees with itself often)
            own = {n: credit([v for v, t in zip(sampled, tasks) if t == n], TASKS[n].strategies) for n in self.bench.names}
            chance_model = pair_chance(self.bench, src, tgt, {n: p for n, p in own.items() if p is not None})
            result["alignment_chance"] = mean(chance)
            result["alignment_chance_model"] = mean(chance_model)
            for n in self.bench.names:
                per_task[n]["alignment_chance"] = chance.get(n)
                per_task[n]["alignment_chance_model"] = chance_model.get(n)
                per_task[n]["strategy_shares"] = own[n]
        self.net.train(was)
        return result

    def control(self, sources: list, together: np.ndarray, src: np.ndarray, tgt: np.ndarray, per_task: dict,
                gen) -> dict:
        """alignment_control: the same pairs with each target generated from its own, independent router z,
        the level a model that ignores z reaches at its fidelity; alignment_lift = alignment - control
        and its 95% bootstrap interval over pairs (alignment_lift_ci); into per_task, the means returned."""
        frame, tasks = self.bench.test, self.bench.test["task"].to_numpy()
        targets = frame.iloc[tgt]
        controls = self.traces_with(targets, self.route(targets, gen(4)), 1.0, gen(5), "control_target", row=tgt,
                                    pair=np.arange(len(src)))
        control = consistent(sources, controls)
        lifts = {n: together[tasks[src] == n].astype(float) - control[tasks[src] == n] for n in self.bench.names}
        intervals, overall = lift_interval(lifts, np.random.default_rng(self.config.seed + TEST_SEED))
        for n in self.bench.names:
            here = tasks[src] == n
            per_task[n]["alignment_control"] = float(control[here].mean()) if here.any() else None
            per_task[n]["alignment_lift"] = float(lifts[n].mean()) if here.any() else None
            per_task[n]["alignment_lift_ci"] = intervals.get(n)
        return dict(alignment_control=mean({n: per_task[n]["alignment_control"] for n in self.bench.names}),
                    alignment_lift=mean({n: per_task[n]["alignment_lift"] for n in self.bench.names}),
                    alignment_lift_ci=overall)

    def kl_of(self, tokens: torch.Tensor) -> torch.Tensor:
        z_at, _, end_at = self.slots(tokens)
        return gaussian_kl(self.net.posterior_params(tokens, end_at), self.net.router(tokens, z_at))

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
            steering=steering(self), data_strategy_shares=self.shares)
        # the final evaluation's own time: the measures at the stage's end and the steering generations
        self.found["summary"]["evaluation_seconds"] = self.found.get("evaluation_seconds", 0.0) + time.perf_counter() - started
        return self.found["summary"]

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


