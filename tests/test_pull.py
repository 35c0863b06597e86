"""PullPlan, the per-round fetch budget of the pull transports, on its own."""

from __future__ import annotations

import random

from swarmnode.swarm.transport.pull import PullPlan


def everyone(_peer: str) -> bool:
    return True


def test_a_round_fetches_at_most_k_and_carries_at_most_k_over():
    plan = PullPlan("me", 3, memory=100, rng=random.Random(1))
    plan.note_announced({f"p{i}": 1 for i in range(10)} | {"me": 1}, now=1.0)
    first = plan.choose(everyone)
    assert len(first) == 3 and "me" not in dict(first) and plan.choose(everyone) == []
    plan.next_round(now=2.0)
    plan.next_round(now=3.0)
    plan.next_round(now=4.0)  # three publishes, nothing spent: 2K at most
    plan.note_announced({f"p{i}": 2 for i in range(10)}, now=5.0)
    # At most K a choice; the carried budget goes over the next choices.
    assert [len(plan.choose(everyone)) for _ in range(3)] == [3, 3, 0]


def test_an_announcement_seen_before_this_round_is_read_again_before_it_is_fetched():
    plan = PullPlan("me", 8, memory=100, reread=True)
    plan.note_announced({"a": 4}, now=10.0)
    plan.next_round(now=20.0)
    assert plan.candidates() == {} and plan.wants_announcements(everyone)
    plan.note_announced({"a": 5}, now=21.0)  # read again: the peer has moved on meanwhile
    assert plan.choose(everyone) == [("a", 5)]
    plan.note_announced({"a": 5}, now=22.0)
    assert plan.candidates() == {}  # a round is fetched once


def test_announcements_expire_and_memory_is_bounded():
    plan = PullPlan("me", 8, memory=5, ttl=60.0)
    plan.note_announced({f"p{i}": 1 for i in range(20)}, now=0.0)
    assert len(plan.announced) == 5
    plan.note_announced({"late": 1}, now=100.0)
    assert list(plan.announced) == ["late"]


def test_pushed_announcements_stay_candidates_across_rounds():
    plan = PullPlan("me", 8, memory=100)  # pushes: each peer's newest arrives as it is made
    plan.note_announced({"a": 4}, now=10.0)
    plan.next_round(now=20.0)
    assert plan.choose(everyone) == [("a", 4)]



def test_an_announcements_detail_lives_and_dies_with_it():
    plan = PullPlan("me", 4, memory=2)
    plan.note_announced({"a": 1, "b": 1}, now=0.0, details={"a": "a-1"})
    assert plan.detail("a") == "a-1" and plan.detail("b") is None and plan.detail("nobody") is None
    plan.note_announced({"a": 2}, now=1.0, details={"a": "a-2"})
    assert plan.detail("a") == "a-2", "the newest announcement's"
    plan.note_announced({"c": 1}, now=2.0, details={"c": "c-1"})  # memory 2: b, the oldest, goes
    assert plan.detail("b") is None and plan.detail("c") == "c-1"
    plan.note_announced({}, now=2.0 + plan.ttl + 1)
    assert plan.detail("a") is None and plan.detail("c") is None, "expired with its entry"
