"""The factorisation's measures on the test split (fidelity, alignment and its control, KL, the
posterior's figures), a part of FactorizeSystem kept apart: see factorize.py for what each means."""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from internalize.system import TEST_SEED
from internalize.systems.strategies.alignment import (
    consistent,
    consistent_when_valid,
    draw_pairs,
    lift_interval,
    pair_chance,
    pca2,
)
from internalize.systems.strategies.benchmark import TASKS
from internalize.systems.strategies.data import credit, generation_rows, mean
from internalize.systems.strategies.latent import draw, gaussian_kl

PCA_EXAMPLES = 240  # test examples whose posterior means each snapshot projects
TRAJECTORY = ("fidelity", "fidelity_greedy", "alignment", "alignment_strict", "alignment_valid", "kl")


class Measures:
    """Evaluation methods of FactorizeSystem (self.net, self.bench, self.config, self.device, self.slots,
    self.decoder, self.shares and self.generations are the system's)."""

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

