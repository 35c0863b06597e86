"""What an experiment node's checkpoint carries of its exchange: the pool, the peers' standing
and its own recent rewards go to JSON and back unchanged; damaged records are refused whole."""

from __future__ import annotations

import json
import random

import pytest

from swarmnode.records import Group, Question
from swarmnode.swarm.pool import ExternalPool, OwnRewards
from swarmnode.swarm.standing import Standing


def _group(peer: str, i: int, rewards: list[float]) -> Group:
    return Group(Question("gcd", f"q{i}", str(i), {"x": [i, {"y": "z"}]}, level=i % 3 or None), ["a", f"b{i}"],
                 rewards, source=peer)


def _filled() -> tuple[ExternalPool, Standing]:
    standing = Standing(probation_rounds=2, promotions_per_round=1)
    pool = ExternalPool(max_total=20, max_per_peer=6, standing=standing, newcomer_share=0.5)
    for r in range(5):
        standing.advance(r)
        for peer in ("B", "A", "C")[: 1 + r % 3]:
            standing.note(peer, useful=True)
            pool.add(r, [_group(peer, 10 * r + i, [0.1 * i, 1.0 / 3]) for i in range(3)])
    return pool, standing


def _again(pool: ExternalPool, standing: Standing) -> tuple[ExternalPool, Standing]:
    standing2 = Standing(probation_rounds=2, promotions_per_round=1)
    pool2 = ExternalPool(max_total=20, max_per_peer=6, standing=standing2, newcomer_share=0.5)
    standing2.restore(json.loads(json.dumps(standing.to_json())))
    pool2.restore(json.loads(json.dumps(pool.to_json())))
    return pool2, standing2


def test_pool_and_standing_come_back_from_json_as_they_were_and_go_on_alike():
    pool, standing = _filled()
    pool2, standing2 = _again(pool, standing)
    assert pool2.stats() == pool.stats() and pool2.groups() == pool.groups()
    assert standing2.to_json() == standing.to_json() and standing2.stats() == standing.stats()
    assert {p: standing2.is_established(p) for p in "ABC"} == {p: standing.is_established(p) for p in "ABC"}
    for s in (standing, standing2):  # the next round: promotions, arrivals, evictions and draws all alike
        s.advance(5)
    for p in (pool, pool2):
        p.add(5, [_group("D", 50 + i, [0.0, 1.0]) for i in range(4)])
    assert pool2.groups() == pool.groups()
    for seed in range(5):
        assert pool2.sample(4, random.Random(seed)) == pool.sample(4, random.Random(seed))


def test_own_rewards_come_back_within_their_window():
    own = OwnRewards(window=3)
    own.note([_group("local", i, [0.25 * i, 0.5]) for i in range(3)])
    again = OwnRewards(window=3)
    again.restore(json.loads(json.dumps(own.to_json())))
    assert again.means() == own.means() and again.to_json() == own.to_json()
    again.note([_group("local", 9, [1.0, 1.0])])
    assert again.to_json()["recent"][0][1] == [0.5, 1.0, 1.0]


def test_own_rewards_keep_their_best_means_and_read_a_bare_recent_list():
    own = OwnRewards(window=2)
    for rewards in ([1.0, 1.0], [0.0, 0.0]):
        own.note([_group("local", 0, rewards)])
    again = OwnRewards(window=2)
    again.restore(json.loads(json.dumps(own.to_json())))
    assert again.bests() == own.bests() == {"gcd": 1.0} and again.means() == {"gcd": 0.0}
    bare = OwnRewards(window=2)
    bare.restore(own.to_json()["recent"])  # no best means in it: the bar starts from the recent mean
    assert bare.bests() == bare.means() == {"gcd": 0.0}


@pytest.mark.parametrize("damage", [
    lambda s: s["peers"][0].pop("groups"),
    lambda s: s["peers"][0]["rounds"].pop(),
    lambda s: s["peers"][0]["groups"][0].update(rewards=["NaN"]),
    lambda s: s["peers"][0]["groups"][0].update(question="q" * 100_000),
    lambda s: s.update(peers=[["not", "a", "row"]]),
    lambda s: s.pop("seq"),
])
def test_a_damaged_pool_record_is_refused_and_the_pool_left_as_it_was(damage):
    pool, _ = _filled()
    state = json.loads(json.dumps(pool.to_json()))
    damage(state)
    fresh = ExternalPool()
    fresh.add(0, [_group("Z", 0, [0.0, 1.0])])
    with pytest.raises(ValueError, match="pool state is damaged"):
        fresh.restore(state)
    assert fresh.stats()["by_peer"] == {"Z": 1}


def test_a_damaged_standing_or_own_record_is_refused():
    with pytest.raises(ValueError, match="standing state is damaged"):
        Standing().restore({"round": 1, "qualified": 0, "rows": [["A", "x", None, False]]})
    with pytest.raises(ValueError, match="standing state is damaged"):
        Standing().restore({"rows": []})
    for damaged in ([["gcd", ["x"]]], {"recent": []}, {"recent": [], "best": {"gcd": "high"}}, {"best": {}}):
        own = OwnRewards()
        own.note([_group("local", 0, [0.5, 1.0])])
        with pytest.raises(ValueError, match="own rewards"):
            own.restore(damaged)
        assert own.means() == {"gcd": 0.75}
