"""Poisoned rollouts: through a real Exchange, real signed bundles and a real Scorer.

A liar claims reward 1.0 for wrong answers: the receiver re-scores, so the pooled group
carries the receiver's rewards (all 0), has no advantage and is never drawn. A peer that
shares only wrong answers with some signal gets at most ``max_peer_share`` of the J external
groups, however much it sends.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from swarmnode.config import NodeConfig
from swarmnode.records import Group, Question
from swarmnode.sampling import RewardWeighted, Uniform
from swarmnode.swarm.bundle import encode_bundle
from swarmnode.swarm.exchange import Exchange
from swarmnode.swarm.identity import Identity
from swarmnode.train.tasks import Scorer

SWARM = "poison-test"
NODE, LIAR, HONEST = (Identity.from_seed(bytes([c]) * 32) for c in b"NLH")


def question(i: int) -> Question:
    return Question("chain_sum", f"What is {i} + 2?", str(i + 2), {"num_terms": 2, "num_digits": 1})


def bundle(identity: Identity, round_no: int, groups: list[Group]) -> bytes:
    return encode_bundle(identity, swarm=SWARM, round_no=round_no, model="m", groups=groups)


def exchange(max_peer_share: float = 0.5) -> Exchange:
    """Every peer competes alike here (no newcomer limit): that limit has its own tests in test_sybil.py."""
    cfg = NodeConfig(swarm=SWARM, solo=False, max_peer_share=max_peer_share, newcomer_share=1.0)
    return Exchange(NODE, cfg, Scorer(), "m")


def liar_groups(n: int, first: int = 0) -> list[Group]:
    """Wrong answers, all claimed at 1.0."""
    return [Group(question(i), ["<answer>banana</answer>", "<answer></answer>", "no idea", "<answer>x</answer>"],
                  [1.0] * 4) for i in range(first, first + n)]


def honest_groups(n: int, first: int = 0) -> list[Group]:
    """One right answer in four, claimed honestly."""
    return [Group(question(i), [f"<answer>{i + 2}</answer>", f"<answer>{i + 9}</answer>", "x",
                                f"<answer>{i + 8}</answer>"], [1.0, 0.0, 0.0, 0.0]) for i in range(first, first + n)]


def near_misses() -> list[Group]:
    """Eight groups of wrong answers that still differ: chain_sum's verifier gives 0.5 to an
    answer that starts with the right digit, 0 to a word; both claimed at 1.0."""
    return [Group(question(i), [f"<answer>{i + 2}9</answer>", "<answer>banana</answer>"], [1.0, 1.0])
            for i in range(8)]


def test_fabricated_rewards_are_replaced_and_never_drawn():
    ex = exchange()
    verdict = ex.receive(bundle(LIAR, 1, liar_groups(8)))
    assert verdict.accepted
    pooled = ex.pool.groups()
    assert len(pooled) == 8 and all(g.source == LIAR.peer_id for g in pooled)
    # the receiver's scores, not the claim; "no idea" holds no answer: left out, and counted
    assert all(g.rewards == [0.0, 0.0, 0.0] for g in pooled)
    assert next(r for r in ex.peer_rows() if r["peer_id"] == LIAR.peer_id)["left_out_by_reason"] == {"no_answer": 8}
    assert not any(g.has_signal() for g in pooled)
    for seed in range(20):
        for mode in (Uniform(), RewardWeighted()):
            assert ex.pool.sample(4, random.Random(seed), exclude=NODE.peer_id, mode=mode) == []
    row = next(r for r in ex.peer_rows() if r["peer_id"] == LIAR.peer_id)
    assert row["reported_mean_reward"] == 1.0  # the claim is shown in the peer table, and only there


def test_a_liar_gains_nothing_next_to_an_honest_peer():
    ex = exchange(max_peer_share=1.0)
    ex.receive(bundle(LIAR, 1, liar_groups(16)))
    ex.receive(bundle(HONEST, 1, honest_groups(4, first=100)))
    drawn = Counter(g.source for seed in range(50) for g in ex.draw(2, 4, random.Random(seed)))
    assert drawn[LIAR.peer_id] == 0 and drawn[HONEST.peer_id] == 50 * 4
    for g in (g for g in ex.pool.groups() if g.source == HONEST.peer_id):
        assert g.rewards == [1.0, 0.0, 0.0]  # "x" holds no answer: left out


def test_a_wrong_claim_of_zero_cannot_hide_a_right_answer():
    """The other direction: rewards claimed too low are re-scored up, so a peer cannot make
    the receiver learn against the right answer by labelling it wrong."""
    ex = exchange()
    g = Group(question(3), ["<answer>5</answer>", "<answer>1</answer>"], [0.0, 1.0])
    ex.receive(bundle(LIAR, 1, [g]))
    assert ex.pool.groups()[0].rewards == [1.0, 0.0]


@pytest.mark.parametrize("share, j", [(0.5, 4), (0.25, 8), (0.5, 8)])
def test_a_peer_sharing_only_wrong_answers_is_held_to_its_share(share, j):
    """Wrong answers with some signal (partial credit from the real verifier) are pooled; the
    flood of them is capped per draw."""
    ex = exchange(max_peer_share=share)
    spam = near_misses()
    ex.receive(bundle(LIAR, 1, spam))
    pooled_liar = [g for g in ex.pool.groups() if g.source == LIAR.peer_id]
    assert [g.rewards for g in pooled_liar] == [[0.5, 0.0]] * 8  # wrong, yet with signal

    ex.receive(bundle(HONEST, 1, honest_groups(j, first=100)))
    cap = max(1, -(-share * j // 1))
    for seed in range(30):
        got = Counter(g.source for g in ex.draw(2, j, random.Random(seed)))
        assert got[LIAR.peer_id] <= cap and got[HONEST.peer_id] == cap  # the cap binds every peer alike


def test_a_peer_alone_with_wrong_answers_fills_at_most_its_share():
    ex = exchange(max_peer_share=0.5)
    spam = near_misses()
    ex.receive(bundle(LIAR, 1, spam))
    for seed in range(10):
        assert len(ex.draw(2, 8, random.Random(seed))) <= 4  # the free slots go to local groups


class _CountingScorer(Scorer):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def score(self, question, response):
        self.calls += 1
        return super().score(question, response)


@pytest.mark.parametrize("model", ["", "no-such-model-7T", "[bold red]x[/", "\x1b[2J\x1b]0;owned\x07\u202e" * 12,
                                   "q" * 256, "🦙" * 64])
def test_a_bundle_naming_an_unknown_or_absurd_model_is_rescored_like_any_other(model):
    """The model a bundle names is information only: the same groups under any name are
    accepted, re-scored response by response with this node's own verifier (the same work),
    pooled with the same rewards and drawn alike; the peer table shows the name made safe."""
    plain, absurd = (Exchange(NODE, NodeConfig(swarm=SWARM, solo=False, newcomer_share=1.0), _CountingScorer(), "m")
                     for _ in range(2))
    groups = honest_groups(4)
    assert plain.receive(bundle(HONEST, 1, groups)).accepted
    data = encode_bundle(HONEST, swarm=SWARM, round_no=1, model=model, groups=groups)
    assert absurd.receive(data).accepted
    assert absurd.scorer.calls == plain.scorer.calls == 12  # 4 groups x 3 answers ("x" has none)
    assert [g.rewards for g in absurd.pool.groups()] == [g.rewards for g in plain.pool.groups()]
    assert absurd.draw(2, 2, random.Random(0)) == plain.draw(2, 2, random.Random(0))
    shown = next(r for r in absurd.peer_rows() if r["peer_id"] == HONEST.peer_id)["model"]
    assert len(shown) <= 40 and shown.isprintable()


def test_a_model_name_past_the_limit_is_a_rejected_bundle_not_a_crash():
    ex = exchange()
    verdict = ex.receive(encode_bundle(HONEST, swarm=SWARM, round_no=1, model="q" * 257, groups=honest_groups(1)))
    assert (verdict.accepted, verdict.reason) == (False, "field_too_long")
    assert len(ex.pool) == 0


def test_above_own_measures_the_bar_by_what_this_node_itself_shared():
    """The bar of ``above-own`` is this node's own rewards, from the groups it sends: while its
    own answers on a family are better than a peer's (as this node re-scores them, whatever the
    peer claims), the peer's groups of it are not drawn; when its own get worse, they are again."""
    cfg = NodeConfig(swarm=SWARM, solo=False, newcomer_share=1.0, external_sampling="above-own")
    ex = Exchange(NODE, cfg, Scorer(), "m")
    ex.receive(bundle(HONEST, 1, honest_groups(4, first=100)))  # one right in four: 0.25 each
    assert len(ex.draw(1, 1, random.Random(0))) == 1  # no own rewards yet: any group with signal
    mine = [Group(question(i), ["<answer>x</answer>", f"<answer>{i + 2}</answer>"], [0.0, 1.0]) for i in range(2)]
    ex.outgoing(1, mine)  # this node's own chain_sum: 0.5
    assert ex.draw(2, 1, random.Random(0)) == []
    ex.receive(bundle(LIAR, 1, near_misses()))  # claimed 1.0 each, re-scored 0.25
    assert ex.draw(3, 4, random.Random(0)) == []  # the sender's claim never lifts a group over the bar
    ex.outgoing(2, [Group(question(i), ["<answer>x</answer>", "y"], [0.0, 0.0]) for i in range(30)])
    # Its own window (the last 64 completions) is now 2 right in 64: both peers' groups pass again.
    assert {g.source for g in ex.draw(4, 4, random.Random(0))} == {HONEST.peer_id, LIAR.peer_id}


def test_bundles_of_a_newer_format_are_refused_counted_and_said_once(caplog):
    ex = exchange()
    newer = bytearray(bundle(HONEST, 1, honest_groups(1)))
    newer[3] = 3  # the format version byte of a later release
    with caplog.at_level("WARNING", logger="swarmnode.swarm.exchange"):
        verdicts = [ex.receive(bytes(newer)) for _ in range(3)]
    assert [v.reason for v in verdicts] == ["bad_version"] * 3 and len(ex.pool) == 0
    assert len([r for r in caplog.records if "newer release" in r.getMessage()]) == 1
    assert ex.receive(bundle(HONEST, 2, honest_groups(1))).accepted, "its bundles of this format still count"
