"""Where an announcement is stored: the rule (ShardReplicas) and, on real hivemind DHTs, the
direct store and its fallback (tests/programs/hivemind_direct_announce.py)."""

import json

import pytest

from programs import output
from swarmnode.swarm.transport.counters import AnnounceStores
from swarmnode.swarm.transport.hivemind.announce import (
    REFRESH_ROUNDS,
    ShardReplicas,
    direct_share,
    rounds_announced,
)


def found(*peers):
    """(distance, peer) of ``peers``, nearest first: distances 10, 20, ..."""
    return [(10 * (i + 1), p) for i, p in enumerate(peers)]


def test_first_round_traverses_then_rounds_go_straight_to_the_replicas_it_found():
    rule = ShardReplicas()
    assert rule.targets() is None
    rule.traversed(found("a", "b", "c"), {"a", "b", "c"})
    assert rule.targets() == ("a", "b", "c")
    assert rule.direct_done({"a", "b", "c"})
    assert rule.targets() == ("a", "b", "c")


def test_every_refresh_rounds_th_round_traverses_even_when_all_accept():
    rule = ShardReplicas()
    kinds = []
    for _ in range(3 * REFRESH_ROUNDS):
        targets = rule.targets()
        if targets is None:
            kinds.append("t")
            rule.traversed(found("a", "b", "c"), {"a", "b", "c"})
        else:
            kinds.append("d")
            assert rule.direct_done(set(targets))
    assert "".join(kinds) == ("t" + "d" * (REFRESH_ROUNDS - 1)) * 3
    assert (rule.traversals, rule.directs) == (3, 3 * (REFRESH_ROUNDS - 1))


def test_a_peer_the_table_holds_nearer_than_the_farthest_replica_found_makes_the_round_traverse():
    rule = ShardReplicas()
    rule.traversed(found("a", "b", "c"), {"a", "b", "c"})
    assert rule.targets([(10, "a"), (20, "b"), (30, "c")]) == ("a", "b", "c")
    assert rule.targets([(10, "a"), (35, "x")]) == ("a", "b", "c")  # farther than all found: no news
    assert rule.targets([(10, "a"), (25, "x"), (30, "c")]) is None  # x joined between b and c
    rule.traversed(found("a", "b", "x"), {"a", "b", "x"})
    assert rule.targets([(10, "a"), (20, "b"), (30, "x")]) == ("a", "b", "x")


def test_a_near_peer_that_refused_is_not_news():
    rule = ShardReplicas()
    rule.traversed(found("a", "b", "c"), {"a", "c"})  # b refused (another version, a full key)
    assert rule.targets([(10, "a"), (20, "b"), (30, "c")]) == ("a", "c")


def test_one_replica_missing_stands_this_round_and_the_next_round_traverses():
    rule = ShardReplicas()
    rule.traversed(found(*"abcde"), set("abcde"))
    assert rule.direct_done({"a", "b", "c", "d"})  # 4 of 5: held by enough readers' replicas
    assert rule.targets() is None


@pytest.mark.parametrize("accepted", [set(), {"a"}, {"a", "b"}, {"x", "y", "z"}])
def test_fewer_than_half_accepting_traverses_in_the_same_round(accepted):
    rule = ShardReplicas()
    rule.traversed(found(*"abcde"), set("abcde"))
    assert not rule.direct_done(accepted)  # {"x", ...}: peers not asked do not count
    assert rule.targets() is None


def test_a_traversal_that_no_replica_accepted_leaves_nothing_to_store_at():
    rule = ShardReplicas()
    rule.traversed([], set())
    assert rule.targets() is None


def test_half_accepting_stands():
    rule = ShardReplicas()
    rule.traversed(found(*"abcd"), set("abcd"))
    assert rule.direct_done({"a", "b"})


def test_the_counts_a_dht_process_reports_are_its_rules_decisions(monkeypatch):
    calls = pytest.importorskip("swarmnode.swarm.transport.hivemind.dht_process")
    rule = ShardReplicas()
    monkeypatch.setattr(calls, "SHARD_REPLICAS", {"key": rule})
    assert calls.announce_stores() == AnnounceStores(direct=0, traversal=0, direct_failed=0)
    assert rule.targets() is None  # round 1 traverses
    rule.traversed(found("a", "b", "c"), {"a", "b", "c"})
    assert rule.direct_done(set(rule.targets()))  # round 2 direct
    assert rule.targets() == ("a", "b", "c")
    assert not rule.direct_done({"a"})  # round 3: 1 of 3 took it, so it traverses too
    rule.traversed(found("a", "d", "e"), {"a", "d", "e"})
    assert calls.announce_stores() == AnnounceStores(direct=2, traversal=2, direct_failed=1)
    counts = rule.counts()  # the simulator's names of the same counts
    assert counts == {"announce_direct": 2, "announce_traversal": 2, "announce_direct_failed": 1}
    assert rounds_announced(counts) == 3 and direct_share(counts) == 1 / 3


def test_a_direct_share_from_the_simulators_counts_which_lack_the_names_never_counted():
    assert direct_share({"announce_traversal": 0.5, "announce_direct": 1.5}) == 0.75
    assert direct_share({"announce_traversal": 1.0}) == 0.0
    assert direct_share({}) is None


@pytest.mark.slow
def test_direct_announcements_are_read_back_and_fall_back_to_a_traversal_when_replicas_go():
    got = json.loads(output("hivemind_direct_announce", timeout=240).splitlines()[-1])
    assert got == {"first round traverses": True, "replicas learnt": 3, "read round 1": 1, "read round 2": 2,
                   "read round 3": 3, "rounds 2 and 3 direct": True, "replicas shut down": 2,
                   "round 4 tried direct, then traversed": True, "round 4's replicas exclude the gone": True,
                   "read round 4": 4, "read round 5": 5, "round 5 direct again": True,
                   # (announce_direct, announce_traversal, announce_direct_failed) as reported
                   "reported after round 1": [0, 1, 0], "reported after round 1 is the rule's": True,
                   "reported after round 3": [2, 1, 0], "reported after round 3 is the rule's": True,
                   "reported after round 4": [3, 2, 1], "reported after round 4 is the rule's": True,
                   "reported after round 5": [4, 2, 1], "reported after round 5 is the rule's": True}
