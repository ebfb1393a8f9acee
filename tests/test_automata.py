
import pytest
import torch

from internalize.config import ConfigError, load
from internalize.systems.automata.semiautomata import (
    AutomatonTask,
    action_distribution,
    alternating4,
    cyclic,
    dihedral,
    from_yaml,
    make,
    symmetric3,
)

TABLE = """name: three_cycle_with_reset
states: [a, b, c]
start: a
actions:
  step:  {a: b, b: c, c: a}
  reset: {a: a, b: a, c: a}
"""


def test_counter_labels_are_prefix_sums_mod_n():
    for n, action_set in [(6, "increment"), (13, "increment"), (5, "all")]:
        task = AutomatonTask(cyclic(n, action_set), 16)
        actions, states = task.sample(256, torch.Generator().manual_seed(0))
        # action index r adds r: stay/step for increment, every residue for all
        assert torch.equal(states, torch.cumsum(actions, dim=1) % n)


def is_group(automaton, order):
    """Every action a bijection, and the actions generate all `order` states from the start."""
    assert len(automaton.states) == order
    assert all(sorted(row) == list(range(order)) for row in automaton.table)
    reached, frontier = {automaton.start}, [automaton.start]
    while frontier:
        q = frontier.pop()
        for row in automaton.table:
            if row[q] not in reached:
                reached.add(int(row[q]))
                frontier.append(int(row[q]))
    return len(reached) == order


def test_groups_have_their_orders_and_bijective_actions():
    assert is_group(symmetric3(), 6)
    assert is_group(alternating4(), 12)
    assert is_group(dihedral(5), 10)
    s3 = symmetric3()
    assert s3.states[0] == "(0, 1, 2)"  # identity first
    # S_3 is not abelian: cycle then swap differs from swap then cycle
    cycle, swap = s3.table[1], s3.table[2]
    assert any(swap[cycle[q]] != cycle[swap[q]] for q in range(6))


def test_a_user_table_runs_like_its_definition(tmp_path):
    path = tmp_path / "three.yaml"
    path.write_text(TABLE)
    automaton = from_yaml(path)
    assert automaton.states == ("a", "b", "c") and automaton.actions == ("step", "reset")
    actions = torch.tensor([[0, 0, 1, 0, 0, 0]])
    names = [automaton.states[q] for q in automaton.run(actions)[0]]
    assert names == ["b", "c", "a", "b", "c", "a"]


@pytest.mark.parametrize("broken,message", [
    (TABLE.replace("c: a}\n  reset", "c: d}\n  reset"), "to unknown state 'd'"),
    (TABLE.replace("{a: a, b: a, c: a}", "{a: a, b: a}"), "no entry for state 'c'"),
    (TABLE.replace("start: a", "start: z"), "start state 'z'"),
    (TABLE.replace("{a: b, b: c, c: a}", "{a: b, b: c, c: a, q: a}"), "from unknown state 'q'"),
])
def test_a_broken_table_is_refused(tmp_path, broken, message):
    path = tmp_path / "bad.yaml"
    path.write_text(broken)
    with pytest.raises(ValueError, match=message):
        from_yaml(path)
    with pytest.raises(ConfigError, match=message):
        load("automata_regimes", [f"task.automaton={path}"])


def test_ood_skew_puts_its_mass_on_the_last_action():
    assert torch.allclose(action_distribution(2, 0.9), torch.tensor([0.1, 0.9]))
    assert torch.allclose(action_distribution(3, 0.7), torch.tensor([0.15, 0.15, 0.7]))
    task = AutomatonTask(make("cyclic", 6), 16)
    actions, _ = task.sample(4000, torch.Generator().manual_seed(0), skew=0.1)
    assert abs(actions.float().mean() - 0.1) < 0.02


def encode_one(system, stage, seed=0):
    actions, states = system.task.sample(3, torch.Generator().manual_seed(seed))
    removed = system.curriculum.sample_removed(stage, system.thinking, 3, torch.Generator().manual_seed(seed))
    return actions, states, *system.encode(actions, states, removed)


def test_token_formats_of_left_removal_and_e2e():
    from internalize.registry import build
    from internalize.systems.automata.system import ANS, SEP

    system = build(load("automata_regimes", ["task.length=5"], scale="smoke"))
    actions, states, tokens, target = encode_one(system, 0)
    s0 = system.state0
    row = tokens[0].tolist()
    expected = [*(actions[0] + system.act0).tolist(), SEP, *(states[0, :4] + s0).tolist(), ANS, int(states[0, 4]) + s0]
    assert row == expected
    assert target[0].tolist() == [False] * 6 + [True] * 6
    _, states, tokens, target = encode_one(system, 3)  # 3 of 4 CoT states deleted: only q_4 stays
    assert tokens[0, 6:].tolist() == [int(states[0, 3]) + s0, ANS, int(states[0, 4]) + s0]
    e2e = build(load("automata_regimes", ["task.length=5", "curriculum.name=e2e"], scale="smoke"))
    actions, states, tokens, target = encode_one(e2e, 0)
    assert tokens[0].tolist() == [*(actions[0] + e2e.act0).tolist(), ANS, int(states[0, 4]) + e2e.state0]
    assert target[0].tolist() == [False] * 6 + [True]


def test_mixture_hint_counts_the_kept_tokens_and_keep_positions_blanks_them():
    from internalize.registry import build
    from internalize.systems.automata.system import PAD

    mixture = build(load("automata_regimes", ["task.length=5", "curriculum.name=mixture"], scale="smoke"))
    actions, states, tokens, target = encode_one(mixture, 0, seed=3)
    for row, tgt in zip(tokens, target):
        kept = int(row[6]) - mixture.hint0
        assert int(tgt.sum()) == kept + 2 and not tgt[:7].any()
    keep = build(load("automata_regimes", ["task.length=5", "model.keep_positions=true"], scale="smoke"))
    _, states, tokens, target = encode_one(keep, 2)  # the first two CoT states blanked, positions kept
    assert tokens.shape[1] == 12 and tokens[0, 6:8].tolist() == [PAD, PAD]
    assert target[0, 6:].tolist() == [False, False, True, True, True, True]


def test_bare_answer_follows_sep_only_when_no_cot_is_left():
    from internalize.registry import build

    bare = build(load("automata_regimes", ["task.length=5", "model.bare_answer=true"], scale="smoke"))
    plain = build(load("automata_regimes", ["task.length=5"], scale="smoke"))
    for stage in range(4):  # CoT kept: the same sequences as without the switch
        assert all(torch.equal(x, y) for x, y in zip(encode_one(bare, stage), encode_one(plain, stage)))
    actions, states, tokens, target = encode_one(bare, 4)
    assert tokens[0, 5:].tolist() == [1, int(states[0, 4]) + bare.state0]  # <sep> q_5: no <ans>
    assert target[0].tolist() == [False] * 6 + [True]
    removed = bare.curriculum.removed(4, bare.thinking)

    def oracle(prompt, steps):  # writes the true answer first, then junk: only the first token may count
        return torch.stack([states[:, -1] + bare.state0, *[torch.zeros_like(states[:, 0])] * (steps - 1)], dim=1)

    bare.model.generate = oracle
    assert bare.answer_accuracy(actions, states, removed) == 1.0
    plain.model.generate = oracle  # the paper's format wants <ans> first: the same output is wrong there
    assert plain.answer_accuracy(actions, states, removed) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("curriculum,headline", [("e2e", "id_accuracy"), ("mixture", "direct_id_accuracy"),
                                                 ("inductive", "id_accuracy")])
def test_every_regime_is_evaluated_in_its_own_format(cli, tmp_path, curriculum, headline):
    from tests.conftest import read_summary

    out = tmp_path / "run"
    result = cli("run", "automata_regimes", "--smoke", "--quiet", "--set", f"curriculum.name={curriculum}",
                 "--out", out)
    assert result.exit_code == 0, result.output
    summary = read_summary(out)
    assert summary[headline] > 1 / 6 + 0.2  # the smoke run learns; the evaluation reads its answers
    assert (out / "figures" / f"{headline}.png").exists()


@pytest.mark.slow
def test_smoke_run_of_the_regimes_config_learns_something(cli, tmp_path):
    from tests.conftest import read_summary

    out = tmp_path / "run"
    assert cli("run", "automata_regimes", "--smoke", "--quiet", "--out", out).exit_code == 0
    summary = read_summary(out)
    assert summary["stages"] == 6 and summary["automaton"] == "C6"
    assert summary["per_stage"][0]["id_accuracy"] > 0.5  # well above chance (1/6) after CoT training
    assert {"id_accuracy", "ood_accuracy", "ood_p0.1_accuracy", "ood_p0.9_accuracy"} <= set(summary)
