"""The latent-strategies factorisation: the frozen reference, the objectives' terms, the KL."""
import json

import numpy as np
import pytest
import torch

from internalize.config import load
from internalize.models.gpt import GPT, GPTConfig
from internalize.registry import build
from internalize.systems.strategies.alignment import draw_pairs, pair_chance
from internalize.systems.strategies.latent import Factorization, gaussian_kl
from internalize.systems.strategies.objectives import LATENT_OBJECTIVES, token_weights

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def small_base(seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab=43, max_len=40, width=32, depth=2, heads=2))


def perturb_adapters(net: Factorization, seed=1):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.learnable():
            p.add_(0.2 * torch.randn(p.shape, generator=gen))


def test_disabled_adapters_are_the_base_even_after_the_adapters_moved():
    base = small_base()
    net = Factorization(base, d_z=4, rank=2, alpha=4.0, targets=["qkv", "proj", "fc_in", "fc_out"])
    idx = torch.randint(0, 43, (3, 12), generator=torch.Generator().manual_seed(0))
    expected = base(idx)[0]
    assert torch.allclose(net.generator(idx)[0], expected, atol=1e-6)  # LoRA B starts at zero
    perturb_adapters(net)
    assert not torch.allclose(net.generator(idx)[0], expected, atol=1e-3)  # the adapters do act
    assert not torch.allclose(net.posterior(idx)[0], expected, atol=1e-3)
    assert torch.allclose(net.reference_logits(idx), expected, atol=1e-6)
    assert all(not p.requires_grad for n, p in net.named_parameters() if "lora" not in n and "head" not in n
               and "embed_z" not in n)


@pytest.mark.parametrize("onward", [False, True])
def test_z_reaches_the_generator_from_its_slot_on_and_never_the_router(onward):
    net = Factorization(small_base(), d_z=4, rank=2, alpha=4.0, onward=onward)
    perturb_adapters(net)  # E(z) and the heads nonzero
    idx = torch.randint(0, 43, (2, 14), generator=torch.Generator().manual_seed(0))
    z_at, slots = torch.tensor([3, 6]), torch.tensor([4, 7])
    gen = torch.Generator().manual_seed(1)
    z1, z2 = torch.randn(2, 4, generator=gen), torch.randn(2, 4, generator=gen)
    with torch.no_grad():
        (l1, r1), (l2, r2) = net.generate_pass(idx, z1, slots, z_at), net.generate_pass(idx, z2, slots, z_at)
        _, embed1 = net.generator.get_base_model().run_with_cache(idx, ["hook_embed"], inject=net.inject(slots, z1))
        _, plain = net.generator.get_base_model().run_with_cache(idx, ["hook_embed"])
    assert all(torch.equal(a, b) for a, b in zip(r1, r2))  # the router reads <z>, before the slot
    added = (embed1["hook_embed"] - plain["hook_embed"]).abs().amax(-1)  # (B, T)
    for b, s in enumerate(slots.tolist()):
        assert torch.equal(l1[b, :s], l2[b, :s]) and not torch.allclose(l1[b, s:], l2[b, s:])
        assert (added[b, :s] == 0).all() and added[b, s] > 0
        assert ((added[b, s + 1:] > 0).all() if onward else (added[b, s + 1:] == 0).all())


def test_the_two_copies_have_their_own_adapters():
    net = Factorization(small_base(), d_z=4, rank=2, alpha=4.0, targets=["qkv"])
    gen = {n for n, p in net.generator.named_parameters() if p.requires_grad}
    post = {n for n, p in net.posterior.named_parameters() if p.requires_grad}
    assert gen and gen == post  # the same names ...
    a = dict(net.generator.named_parameters())
    b = dict(net.posterior.named_parameters())
    assert all(a[n] is not b[n] for n in gen)  # ... but separate tensors


def test_kl_matches_torch_distributions():
    gen = torch.Generator().manual_seed(0)
    q = (torch.randn(5, 7, generator=gen), torch.randn(5, 7, generator=gen))
    r = (torch.randn(5, 7, generator=gen), torch.randn(5, 7, generator=gen))
    normal = torch.distributions.Normal
    expected = torch.distributions.kl_divergence(normal(q[0], (0.5 * q[1]).exp()),
                                                 normal(r[0], (0.5 * r[1]).exp())).sum(-1)
    assert torch.allclose(gaussian_kl(q, r), expected, atol=1e-5)
    assert torch.allclose(gaussian_kl(q, q), torch.zeros(5), atol=1e-6)


def weights(name, surprisal, response, alpha=0.05, gamma=0.25):
    return token_weights(name, surprisal, response, alpha, gamma)


def test_token_weights_of_each_objective():
    gen = torch.Generator().manual_seed(0)
    surprisal = torch.rand(4, 9, generator=gen) * 3
    response = torch.zeros(4, 9, dtype=torch.bool)
    for i, length in enumerate([9, 5, 3, 7]):
        response[i, 9 - length:] = True
    for name in ("model_directed", "token_weighting", "token_inverse", "global_scale"):
        a = weights(name, surprisal, response)
        assert torch.allclose(a.sum(-1), torch.ones(4)), name  # a weighted mean over each response
        assert (a[~response] == 0).all(), name
    assert torch.equal(weights("elbo", surprisal, response), response.float())
    assert torch.equal(weights("beta_elbo", surprisal, response), response.float())
    uniform = weights("global_scale", surprisal, response)
    assert torch.allclose(uniform[response], (1 / response.sum(-1, keepdim=True).float()).expand(-1, 9)[response])
    # surprisal weighting puts more weight on surprising tokens, inverse on easy ones, alpha = 1 on neither
    up, down = weights("model_directed", surprisal, response), weights("token_inverse", surprisal, response)
    for row in range(4):
        s, u, d = surprisal[row][response[row]], up[row][response[row]], down[row][response[row]]
        assert torch.equal(torch.argsort(s), torch.argsort(u))
        assert torch.equal(torch.argsort(s), torch.argsort(d, descending=True))
    assert torch.allclose(weights("model_directed", surprisal, response, alpha=1.0), uniform)
    assert set(LATENT_OBJECTIVES) == {"elbo", "beta_elbo", "model_directed", "token_weighting", "global_scale",
                                      "token_inverse"}


def smoke_system(*overrides):
    torch.manual_seed(0)
    return build(load("strategies_factorize", scale="smoke", overrides=list(overrides)))


@pytest.mark.slow
def test_the_response_term_is_one_when_the_generator_is_the_base_and_each_ablation_changes_its_term():
    found = {}
    for name in LATENT_OBJECTIVES:
        system = smoke_system(f"objective.name={name}")
        stage = system.stage(0)  # estimates c on the validation responses
        val = (*(t.to(system.device) for t in system.bench.val), system.config.seed + 1)
        with torch.no_grad():
            rec, kl, nll = system.terms(val)
        found[name] = (rec, system.c, nll)
        assert torch.allclose(kl, torch.zeros_like(kl), atol=1e-5)  # both heads start standard normal
        if LATENT_OBJECTIVES[name][1]:  # normalised by c: exactly 1 on average where c was estimated
            assert float(rec.mean()) == pytest.approx(1.0, abs=1e-5), name
        assert stage.params and all(p.requires_grad for p in stage.params)
    md_rec, md_c, _ = found["model_directed"]
    tw_rec, _, _ = found["token_weighting"]
    assert torch.allclose(tw_rec, md_rec * md_c, atol=1e-5)  # token_weighting: only c removed
    elbo_rec, _, nll = found["elbo"]
    assert torch.allclose(found["beta_elbo"][0], elbo_rec)  # the same response term, a different beta
    lengths = (system.bench.val[1][:, 1:]).sum(1).float()
    assert torch.allclose(elbo_rec, nll * lengths, atol=1e-4)  # summed, not averaged
    gs_rec, gs_c, _ = found["global_scale"]
    assert torch.allclose(gs_rec, nll / gs_c, atol=1e-5)  # global_scale: the mean token loss over c


def test_the_kl_weight_warms_up_and_elbo_keeps_one():
    from internalize.systems.strategies.objectives import kl_weight

    assert kl_weight("elbo", 0.01, 1.0, 0, 100) == 1.0
    assert kl_weight("model_directed", 0.01, 1.0, 0, 100) == 0.0
    assert kl_weight("model_directed", 0.01, 0.5, 25, 100) == pytest.approx(0.005)
    assert kl_weight("model_directed", 0.01, 0.5, 80, 100) == pytest.approx(0.01)
    assert kl_weight("beta_elbo", 0.2, 0.0, 0, 100) == pytest.approx(0.2)


@pytest.mark.slow
def test_a_base_run_is_loaded_and_bad_bases_are_one_line(cli, tmp_path):
    base = tmp_path / "base"
    assert cli("run", "strategies_base", "--smoke", "--quiet", "--out", base).exit_code == 0
    out = tmp_path / "fz"
    result = cli("run", "strategies_factorize", "--smoke", "--quiet", "--set", f"model.base={base}", "--out", out)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert 0 <= summary["alignment_chance"] <= 1 and summary["pairs"] > 0
    # the frozen reference is the loaded base, exactly
    system = smoke_system(f"model.base={base}")
    from internalize.runs import load_checkpoint

    tensors = load_checkpoint(base)[1]
    model = GPT(system.net.base_cfg)
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, strict=False)
    tokens = system.bench.val[0][:4]
    assert torch.allclose(system.net.reference_logits(tokens), model(tokens)[0], atol=1e-5)
    for setting, message, extra in ((f"model.base={tmp_path}", "is not a run directory", []),
                                    (f"model.base={base}", "trained on other data", ["task.per_task=50"]),
                                    # the same inputs, but traces the base never wrote
                                    (f"model.base={base}", "trained on other data",
                                     ["task.formats={linear_equation: columns}"])):
        extra = [arg for e in extra for arg in ("--set", e)]
        result = cli("run", "strategies_factorize", "--smoke", "--set", setting, *extra, "--out", tmp_path / "x")
        assert result.exit_code == 2 and message in result.output, result.output
    # how a base drew its training examples does not touch the splits: a base trained with other
    # task weights is the same benchmark's
    result = cli("run", "strategies_factorize", "--smoke", "--quiet", "--set", f"model.base={base}",
                 "--set", "task.weights={sorting: 2}", "--out", tmp_path / "weights")
    assert result.exit_code == 0, result.output


def test_a_hugging_face_model_behind_the_gpt_interface(tiny_hf):
    from internalize.systems.strategies.hf import HFCausalLM, load_tokenizer, read_model

    folder = tiny_hf["gpt2_bpe"]
    lm = read_model(folder).eval()
    tokenizer = load_tokenizer(folder)
    model = HFCausalLM.load(folder, tokenizer)
    vocab = lm.config.vocab_size  # the frame tokens grew the model's embeddings past it
    assert model.grown and model.cfg.vocab == len(tokenizer) == vocab + 10
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(1, vocab, (3, 10), generator=gen)
    assert torch.allclose(model(idx)[0][..., :vocab], lm(idx).logits, atol=1e-5)  # the old rows are untouched
    # a left-padded row gives, at its real tokens, what it gives alone
    mask = torch.ones(3, 10, dtype=torch.bool)
    mask[1, :4] = False
    alone = model(idx[1:2, 4:])[0]
    assert torch.allclose(model(idx, attention_mask=mask)[0][1, 4:], alone[0], atol=1e-5)
    # cached decoding equals recomputation; temperature-0 sampling is greedy
    steps = 6
    new = model.generate(idx, steps)
    full = idx
    for _ in range(steps):
        full = torch.cat([full, model(full)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(new, full[:, 10:])
    # an injected vector changes what follows its slot only
    vectors = torch.randn(3, 32, generator=gen)
    with_z = model(idx, inject=(torch.full((3,), 5), vectors))[0]
    base = model(idx)[0]
    assert torch.allclose(with_z[:, :5], base[:, :5], atol=1e-6) and not torch.allclose(with_z[:, 5:], base[:, 5:])
    assert {"c_attn", "c_proj", "c_fc"} <= set(model.lora_targets()) and "lm_head" not in model.lora_targets()


@pytest.mark.slow
def test_the_factorisation_runs_on_a_hugging_face_base(cli, tmp_path, tiny_hf):
    from internalize.systems.strategies.hf import HFCausalLM

    folder = tiny_hf["gpt2_bpe"]
    out = tmp_path / "fz"
    result = cli("run", "strategies_factorize", "--smoke", "--quiet", "--set", f"model.hf_path={folder}",
                 "--set", "eval.snapshots=0", "--out", out)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trainable_parameters"] > 0 and 0 <= summary["alignment_chance"] <= 1
    system = smoke_system(f"model.hf_path={folder}")
    tokens = system.bench.val[0][:4]
    reference = HFCausalLM.load(folder, system.bench.tokenizer)(tokens)[0]
    perturb_adapters(system.net)
    assert torch.allclose(system.net.reference_logits(tokens), reference, atol=1e-5)


def test_alignment_among_faithful_pairs_leaves_out_unfaithful_ones():
    from internalize.systems.strategies.alignment import consistent_when_valid
    from internalize.systems.strategies.benchmark import Verdict

    def v(*strategies, valid=True):
        return Verdict(valid, valid, frozenset(strategies), "")

    pairs = [(v("a"), v("a", "b")), (v("a"), v("b")), (v(valid=False), v("a")), (v("b"), v(valid=False))]
    assert consistent_when_valid(pairs) == 0.5  # two faithful pairs, one of them consistent
    assert consistent_when_valid(pairs[2:]) is None


@pytest.mark.slow
def test_the_chance_of_alignment_follows_the_shares_it_is_given():
    system = smoke_system()
    src, tgt = draw_pairs(system.bench, system.config.eval.pairs, system.config.seed)
    tasks = system.bench.test["task"].to_numpy()
    assert len(src) > 0 and all(tasks[a] == tasks[b] and a != b for a, b in zip(src, tgt))
    data = pair_chance(system.bench, src, tgt, system.shares)
    assert data["linear_equation"] == pytest.approx(sum(p * p for p in system.shares["linear_equation"].values()))
    always = pair_chance(system.bench, src, tgt, {"linear_equation": {"subtract_first": 1.0, "divide_first": 0.0}})
    assert always == {"linear_equation": 1.0}  # one strategy everywhere always agrees; other tasks left out
    assert pair_chance(system.bench, src, tgt, {}) == {}
    # sorting's strategies coincide on some inputs: chance can only rise above the sum of squared shares
    assert data["sorting"] >= sum(p * p for p in system.shares["sorting"].values()) - 1e-9


@pytest.mark.slow
def test_posterior_fidelity_and_strategy_are_scored_against_each_inputs_own_test_trace():
    from internalize.systems.strategies.benchmark import TASKS

    system = smoke_system()
    first = {n: TASKS[n].strategies[0] for n in system.bench.names}

    def always_first(decode, frame, temperature, generator, steps=None):  # whatever z says: each task's first strategy
        return [system.bench.tasks[t].traces(json.loads(p))[first[t]] for t, p in zip(frame["task"], frame["problem"])]

    system.bench.generate = always_first
    result = system.measure()
    tasks = system.bench.test["task"].to_numpy()
    for n in system.bench.names:
        found = result["per_task"][n]
        assert found["fidelity_posterior"] == 1.0 and found["fidelity"] == 1.0
        keeps = [first[n] in v.strategies for v, t in zip(system.bench.test_verdicts, tasks) if t == n]
        assert found["strategy_posterior"] == pytest.approx(np.mean(keeps))
    assert 0 < result["strategy_posterior"] < 1  # the reference traces use other strategies too


def test_the_lift_interval_is_a_bootstrap_of_the_paired_differences():
    from internalize.systems.strategies.alignment import lift_interval

    rng = np.random.default_rng(0)
    same = {"a": np.full(40, 0.5)}  # every pair lifts by 0.5: the interval is that point
    per_task, overall = lift_interval(same, rng)
    assert per_task["a"] == [0.5, 0.5] and overall == [0.5, 0.5]
    lifts = {"a": rng.choice([-1.0, 0.0, 1.0], size=400, p=[0.1, 0.5, 0.4]), "b": np.zeros(300)}
    per_task, overall = lift_interval(lifts, rng)
    low, high = per_task["a"]
    assert low < lifts["a"].mean() < high and 0 < low  # a true lift of 0.3: the interval excludes 0
    assert high - low < 0.15  # about 4 standard errors of 0.032
    assert per_task["b"] == [0.0, 0.0] and overall[0] < lifts["a"].mean() / 2 < overall[1]


@pytest.mark.slow
def test_every_figure_of_the_final_evaluation_is_recomputed_from_its_generations(tmp_path):
    import pandas as pd

    system = smoke_system("eval.pairs=60")
    result = system.measure()
    system.found = result
    system.files(tmp_path)  # the summary (and its steering) first, then the file
    table = pd.read_parquet(tmp_path / "generations.parquet")
    assert set(table["purpose"]) == {"fidelity", "fidelity_greedy", "pair_source", "pair_target", "control_target",
                                     "posterior", "steering"}
    assert len(table[table["purpose"] == "fidelity"]) == len(system.bench.test)
    assert (table.loc[table["purpose"] == "pair_source", "pair"].to_numpy() == np.arange(result["pairs"])).all()
    pairs = {p: table[table["purpose"] == p].set_index("pair") for p in ("pair_source", "pair_target", "control_target")}

    def agree(a, b):  # the two traces' strategy sets intersect
        return [bool(set(filter(None, x.split(","))) & set(filter(None, y.split(","))))
                for x, y in zip(a["strategies"], b["strategies"])]

    for task, found in result["per_task"].items():
        rows = table[table["task"] == task]
        for purpose, key in (("fidelity", "fidelity"), ("fidelity_greedy", "fidelity_greedy"),
                             ("posterior", "fidelity_posterior")):
            assert found[key] == pytest.approx(rows.loc[rows["purpose"] == purpose, "valid"].mean())
        source = pairs["pair_source"][pairs["pair_source"]["task"] == task]
        target, control = (pairs[p].loc[source.index] for p in ("pair_target", "control_target"))
        assert (target["task"] == task).all() and (target["input"] != source["input"]).all()
        assert (control["input"] == target["input"]).all()  # the control regenerates the same target input
        assert found["alignment"] == pytest.approx(np.mean(agree(source, target)))
        assert found["alignment_control"] == pytest.approx(np.mean(agree(source, control)))
        assert found["alignment_lift"] == pytest.approx(found["alignment"] - found["alignment_control"])
        low, high = found["alignment_lift_ci"]
        assert low <= found["alignment_lift"] <= high
    assert result["alignment_lift"] == pytest.approx(np.mean([f["alignment_lift"] for f in result["per_task"].values()]))
    steered = table[table["purpose"] == "steering"]
    cells = [(n, s, cell) for n, row in system.summary()["steering"].items() for s, cell in row.items() if cell]
    assert cells  # some cell is measured at the smoke scale
    for task, strategy, cell in cells:
        rows = steered[(steered["task"] == task) & (steered["strategy"] == strategy)]
        assert cell["inputs"] == len(rows) and cell["share"] == pytest.approx((rows["strategies"] == strategy).mean())
        positions = system.bench.test.reset_index(drop=True)
        assert set(rows["row"]) <= set(np.flatnonzero(positions["task"] == task)[1::2])  # the other half only
        assert cell["chance"] == pytest.approx((positions["strategy"].iloc[rows["row"]] == strategy).mean())


def test_pairs_are_as_many_as_asked_spread_over_the_tasks_and_the_even_ones_kept():
    from types import SimpleNamespace

    import pandas as pd

    names = ["list_sum", "sorting", "grid_path", "addition"]
    bench = SimpleNamespace(names=names, test=pd.DataFrame({"task": [n for n in names for _ in range(50)]}))
    src, tgt = draw_pairs(bench, 1026, 7)
    tasks = bench.test["task"].to_numpy()
    assert len(src) == 1026 and (src != tgt).all() and (tasks[src] == tasks[tgt]).all()
    assert [int((tasks[src] == n).sum()) for n in names] == [257, 257, 256, 256]
    even, _ = draw_pairs(bench, 1024, 7)
    assert np.array_equal(src[:1024], even)  # the remainder is drawn after the evenly spread pairs
    assert len(draw_pairs(bench, 3, 7)[0]) == 4  # fewer than the tasks: one a task


def test_the_frozen_bases_pass_runs_only_for_objectives_that_weigh_by_its_surprisal():
    for name in LATENT_OBJECTIVES:
        system = smoke_system(f"objective.name={name}")
        stage = system.stage(0)
        calls = []
        reference = system.net.reference_logits
        system.net.reference_logits = lambda *a, **k: calls.append(1) or reference(*a, **k)
        stage.loss(stage.sample(8, torch.Generator().manual_seed(0)))
        assert bool(calls) == (LATENT_OBJECTIVES[name][0] in ("surprisal", "inverse")), name


def test_base_faithful_draws_refused_samples_again_and_falls_back_to_the_benchmarks_trace():
    system = smoke_system("data.response_source=base_faithful", "data.redraws=2")
    examples = system.bench.sample_frame(6, torch.Generator().manual_seed(3))
    truth = [examples["text"].iloc[i].split("<y>")[1].split("</y>")[0] for i in range(6)]
    # rows 0-1 right at once, rows 2-3 right at the second draw, rows 4-5 never: the stub base answers
    # with the benchmark's trace where the plan says so and with garbage elsewhere
    plan = {0: 0, 1: 0, 2: 1, 3: 1}
    calls = []

    def base_traces(frame, generator):
        calls.append(list(frame.index))
        draw = len(calls) - 1
        return [truth[i] if plan.get(i, 99) <= draw else "9=9" for i in frame.index]

    system.base_traces = base_traces
    tally = {"rows": 0, "refused": 0, "replaced": 0}
    traces = system.redraw(examples, base_traces(examples, None), None, tally)
    assert traces[:4] == truth[:4] and traces[4:] == truth[4:]  # refused twice more: the benchmark's trace
    assert calls == [[0, 1, 2, 3, 4, 5], [2, 3, 4, 5], [4, 5]]  # only the refused rows are drawn again
    assert tally == {"rows": 6, "refused": 4, "replaced": 2}
    verdicts = system.bench.verdicts(examples, traces)
    assert all(v.valid for v in verdicts)


def test_the_base_sources_read_the_examples_that_the_benchmark_source_draws():
    base = smoke_system("data.response_source=base")
    bench = smoke_system()
    seen = []
    base.base_responses = lambda examples, generator, tally: seen.append(examples) or bench.bench.encode(examples)
    tokens, response, _ = base.sample(8, torch.Generator().manual_seed(5))
    expected, expected_response, _ = bench.sample(8, torch.Generator().manual_seed(5))
    assert torch.equal(tokens, expected) and torch.equal(response, expected_response)
    assert list(seen[0].columns) == ["task", "input", "text"]


def test_the_generator_and_posterior_hold_one_frozen_base_and_a_stack_one_for_all_its_runs():
    from internalize.systems.strategies.stacked import StackedFactorize

    def frozen(module):
        return {n: p for n, p in module.named_parameters() if not p.requires_grad}

    system = smoke_system()
    net = system.net
    ours, theirs = frozen(net.generator), frozen(net.posterior)
    assert ours and ours.keys() == theirs.keys()
    assert all(ours[n].data_ptr() == theirs[n].data_ptr() for n in ours)
    learning = [p.data_ptr() for p in net.learnable()]
    assert len(set(learning)) == len(learning)  # each adapter and head its own
    system.stage(0).loss(system.stage(0).sample(4, torch.Generator().manual_seed(0)))[0].backward()
    assert all(p.grad is None for p in ours.values())  # and none of the shared weights learns

    stack = StackedFactorize([load("strategies_factorize", scale="smoke", overrides=[f"objective.name={o}"])
                              for o in ("elbo", "model_directed")])
    first, second = (frozen(r.net) for r in stack.runs)
    assert all(first[n].data_ptr() == second[n].data_ptr() for n in first)
    assert not {p.data_ptr() for p in stack.runs[0].net.learnable()} & {p.data_ptr() for p in stack.runs[1].net.learnable()}
