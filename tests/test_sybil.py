"""A crowd of fresh keys against one honest peer the node already knows.

Through a real Exchange: every Sybil is an Identity of its own, signing valid bundles whose
groups carry signal after re-scoring by the real verifier (the attacker's best case) and
claiming round ~10^9. The honest peer must keep its place in the pool and its share of the
draws; the crowd shares one minority slice, and gets records only a few at a time.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter

import pytest

from swarmnode.config import NodeConfig
from swarmnode.records import Group, Question
from swarmnode.swarm.bundle import encode_bundle
from swarmnode.swarm.exchange import Exchange
from swarmnode.swarm.identity import Identity
from swarmnode.swarm.standing import PROMOTIONS_PER_ROUND, PeerShare, Standing
from swarmnode.train.tasks import Scorer

SWARM = "sybil-test"
J = 4
NODE = Identity.from_seed(b"N" * 32)
HONEST = Identity.from_seed(b"H" * 32)
SYBILS = [Identity.from_seed(hashlib.sha256(f"sybil-{i}".encode()).digest()) for i in range(200)]


def signal_groups(n: int, first: int) -> list[Group]:
    """One right and one wrong answer per question: signal once re-scored."""
    return [Group(Question("chain_sum", f"What is {i} + 2?", str(i + 2), {"num_terms": 2, "num_digits": 1}),
                  [f"<answer>{i + 2}</answer>", "<answer>x</answer>"], [1.0, 0.0]) for i in range(first, first + n)]


def send(ex: Exchange, who: Identity, round_no: int, n: int = 16, first: int = 0) -> None:
    verdict = ex.receive(encode_bundle(who, swarm=SWARM, round_no=round_no, model="m",
                                       groups=signal_groups(n, first)))
    assert verdict.accepted, verdict.reason


def known_honest_peer() -> Exchange:
    """A node that has trained beside HONEST for a while: HONEST is established and holds
    its full 128 groups in the pool."""
    ex = Exchange(NODE, NodeConfig(swarm=SWARM, solo=False), Scorer(), "m")
    for r in range(8):
        ex.draw(r, J, random.Random(r))  # this node's round r starts
        send(ex, HONEST, r, first=16 * r)
    assert ex.standing.is_established(HONEST.peer_id)
    assert ex.pool.stats()["by_peer"] == {HONEST.peer_id: 128}
    return ex


def test_200_sybils_claiming_round_1e9_cannot_take_the_pool_or_the_draws():
    ex = known_honest_peer()
    cfg, pool = ex.cfg, ex.pool
    newcomer_room = PeerShare(newcomer_share=cfg.newcomer_share).newcomers(pool.max_total)
    per_peer = PeerShare(max_peer_share=cfg.max_peer_share).per_peer(J)
    for r in range(8, 20):  # twelve rounds of the node, each Sybil sending a bundle in every one
        ex.draw(r, J, random.Random(r))
        for k, sybil in enumerate(SYBILS):
            send(ex, sybil, 10**9 + r, first=1000 + k)
        by_peer = pool.stats()["by_peer"]
        established = [p for p in by_peer if ex.standing.is_established(p)]
        newcomers_pooled = sum(n for p, n in by_peer.items() if not ex.standing.is_established(p))
        assert newcomers_pooled <= newcomer_room
        # The honest peer keeps at least its fair share of the room established peers have.
        fair = min(128, (pool.max_total - newcomer_room) // len(established))
        assert by_peer[HONEST.peer_id] >= fair
    stats = ex.standing.stats()
    # Qualified after three rounds of signal (rounds 8-10); from round 11 on, two a round.
    assert stats["established"] - 1 <= PROMOTIONS_PER_ROUND * (19 - 10)
    assert stats["established"] > 1  # the bound above was tested against a growing crowd, not a static one

    drawn = Counter()
    for seed in range(1000):
        got = Counter(g.source for g in ex.draw(20, J, random.Random(seed)))
        newcomers = sum(n for p, n in got.items() if not ex.standing.is_established(p))
        assert newcomers <= PeerShare(newcomer_share=cfg.newcomer_share).newcomers(J)
        assert max(got.values()) <= per_peer
        drawn.update({"honest": got[HONEST.peer_id], "sybil": sum(got.values()) - got[HONEST.peer_id]})
    # Each draw slot goes alike to one of the established peers or to the newcomers as one
    # crowd: the honest peer's fair share is J / (established + 1) a round (0.2 here; 1000
    # draws give it within +-0.015, one standard deviation).
    assert drawn["honest"] / 1000 >= 0.8 * J / (stats["established"] + 1)


def test_before_any_sybil_has_a_record_the_honest_peer_keeps_half_the_draws():
    ex = known_honest_peer()
    ex.draw(8, J, random.Random(0))
    for k, sybil in enumerate(SYBILS):
        send(ex, sybil, 10**9, first=1000 + k)
    for seed in range(100):
        got = Counter(g.source for g in ex.draw(8, J, random.Random(seed)))
        assert got[HONEST.peer_id] == 2  # its full per-peer share
        assert sum(got.values()) - got[HONEST.peer_id] <= 1  # the crowd together: floor(0.25 * 4)


def test_an_all_newcomer_pool_gives_only_the_newcomer_slice():
    ex = Exchange(NODE, NodeConfig(swarm=SWARM, solo=False), Scorer(), "m")
    ex.draw(0, J, random.Random(0))
    for k, sybil in enumerate(SYBILS[:20]):
        send(ex, sybil, 5, first=k)
    assert len(ex.draw(0, J, random.Random(1))) == 1  # the rest of J is filled with local groups


def test_share_pick_is_uniform_over_peers_not_items():
    share = PeerShare(max_peer_share=1.0, newcomer_share=1.0)
    rng = random.Random(3)
    counts = Counter()
    for _ in range(2000):
        counts.update(share.pick(1, {"prolific": 1000, "quiet": 1}, lambda p: True, rng))
    assert 0.45 < counts["prolific"] / 2000 < 0.55


def test_share_pick_k_distinct_peers_with_a_newcomer_minority():
    share = PeerShare(max_peer_share=0.5, newcomer_share=0.25)
    peers = {f"s{i}": 1 for i in range(500)} | {"h1": 1, "h2": 1, "h3": 1}
    for seed in range(50):
        got = share.pick(8, peers, lambda p: p.startswith("h"), random.Random(seed))
        assert len(set(got)) == len(got)
        assert {"h1", "h2", "h3"} <= set(got) and sum(p.startswith("s") for p in got) <= 2
    # The 500 newcomers weigh as one peer: in one slot, each of h1..h3 is as likely as all of them.
    one_slot = PeerShare(max_peer_share=1.0, newcomer_share=1.0)
    counts = Counter(p if p.startswith("h") else "crowd" for seed in range(4000)
                     for p in one_slot.pick(1, peers, lambda p: p.startswith("h"), random.Random(seed)))
    assert all(0.2 < counts[k] / 4000 < 0.3 for k in ("h1", "h2", "h3", "crowd"))


def test_standing_promotes_oldest_qualifier_first_and_a_flood_of_keys_forgets_no_established_peer():
    standing = Standing(probation_rounds=2, promotions_per_round=1, max_peers=100)
    for r in range(3):
        standing.advance(r)
        standing.note("early", useful=True)
        standing.note("useless", useful=False)
        if r >= 1:
            standing.note("late", useful=True)
    assert standing.is_established("early") and not standing.is_established("late")
    assert standing.advance(3) == ["late"]
    assert not standing.is_established("useless")
    for i in range(10_000):
        standing.note(f"fresh-{i}", useful=True)
    assert standing.is_established("early") and standing.is_established("late")
    assert standing.stats() == {"established": 2, "newcomers": 98}


def test_standing_promotes_what_its_rows_say_through_notes_trims_and_restores():
    """Promotion keeps the qualified newcomers aside: after any notes, trims of the table and
    restores, each advance promotes the oldest qualifiers its rows (to_json) hold."""
    rng = random.Random(5)
    standing = Standing(probation_rounds=2, promotions_per_round=2, max_peers=30)
    promoted_ever = 0
    for r in range(12):  # at most 24 established: rows to trim are newcomers' still
        rows = standing.to_json()["rows"]
        waiting = sorted((q, peer) for peer, _, q, established in rows if q is not None and not established)
        promoted = standing.advance(r)
        assert promoted == [peer for _, peer in waiting[:2]]
        promoted_ever += len(promoted)
        for _ in range(rng.randint(20, 60)):
            standing.note(f"p{rng.randint(0, 59)}", useful=rng.random() < 0.7)
        if r % 4 == 3:
            standing.restore(standing.to_json())
    assert promoted_ever > 8


def test_a_newcomer_heard_of_when_every_row_is_established_takes_the_least_recently_heard_ones_place():
    standing = Standing(probation_rounds=1, promotions_per_round=2, max_peers=2)
    standing.advance(0)
    for peer in ("a", "b"):
        standing.note(peer, useful=True)
    assert standing.advance(1) == ["a", "b"]
    standing.note("c", useful=True)
    assert [row[0] for row in standing.to_json()["rows"]] == ["b", "c"]
    assert not standing.is_established("a") and standing.is_established("b")
    assert standing.advance(2) == ["c"]


def test_bad_standing_parameters():
    with pytest.raises(ValueError):
        Standing(probation_rounds=0)
    with pytest.raises(ValueError):
        Standing(max_peers=0)
