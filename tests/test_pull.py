"""PullPlan, the per-round fetch budget of the pull transports, on its own."""

from __future__ import annotations

import random

from swarmnode.swarm.standing import Established, Standing
from swarmnode.swarm.transport.freshness import AwaitNext, OnlyFresh, fresh_window_s
from swarmnode.swarm.transport.hivemind.layout import shard_of
from swarmnode.swarm.transport.hivemind.reads import (
    PLAN_MEMORY,
    POLL_ANNOUNCERS,
    READ_OVERLAP_S,
    SHARDS_PER_POLL,
    HivemindPull,
    get_workers,
)
from swarmnode.swarm.transport.pull import PullPlan
from swarmsim.plan import KeptPullPlan


def everyone(_peer: str) -> bool:
    return True


def heard() -> OnlyFresh:
    """Announcements handed over as they are made, any age fresh (no window)."""
    return OnlyFresh(share=0.0)


def reread() -> AwaitNext:
    """Announcements read when wanted, read again each round; any age fresh (no window)."""
    return AwaitNext(share=0.0)


def test_a_round_fetches_at_most_k_and_carries_nothing_over():
    plan = PullPlan("me", 3, memory=100, freshness=heard(), rng=random.Random(1))
    plan.note_announced({f"p{i}": 1 for i in range(10)} | {"me": 1}, now=1.0)
    first = plan.choose(everyone)
    assert len(first) == 3 and "me" not in dict(first) and plan.choose(everyone) == []
    plan.next_round(now=2.0)  # the first publish: the round's K, not K more on the start's K
    plan.next_round(now=3.0)
    plan.next_round(now=4.0)  # three publishes, nothing spent: still K
    plan.note_announced({f"p{i}": 2 for i in range(10)}, now=5.0)
    assert [len(plan.choose(everyone)) for _ in range(2)] == [3, 0]


def test_an_announcement_seen_before_this_round_is_read_again_before_it_is_fetched():
    plan = PullPlan("me", 8, memory=100, freshness=reread())
    plan.note_announced({"a": 4}, now=10.0)
    plan.next_round(now=20.0)
    assert plan.candidates() == {} and plan.wants_announcements(everyone)
    plan.note_announced({"a": 5}, now=21.0)  # read again: the peer has moved on meanwhile
    assert plan.choose(everyone) == [("a", 5)]
    plan.note_announced({"a": 5}, now=22.0)
    assert plan.candidates() == {}  # a round is fetched once


def test_announcements_expire_and_memory_is_bounded():
    plan = PullPlan("me", 8, memory=5, freshness=heard(), ttl=60.0)
    plan.note_announced({f"p{i}": 1 for i in range(20)}, now=0.0)
    assert len(plan.announced) == 5
    plan.note_announced({"late": 1}, now=100.0)
    assert list(plan.announced) == ["late"]


def test_pushed_announcements_stay_candidates_across_rounds():
    plan = PullPlan("me", 8, memory=100, freshness=heard())  # pushes: each peer's newest arrives as it is made
    plan.note_announced({"a": 4}, now=10.0)
    plan.next_round(now=20.0)
    assert plan.choose(everyone) == [("a", 4)]



def test_an_announcements_detail_lives_and_dies_with_it():
    plan = PullPlan("me", 4, memory=2, freshness=heard())
    plan.note_announced({"a": 1, "b": 1}, now=0.0, details={"a": "a-1"})
    assert plan.detail("a") == "a-1" and plan.detail("b") is None and plan.detail("nobody") is None
    plan.note_announced({"a": 2}, now=1.0, details={"a": "a-2"})
    assert plan.detail("a") == "a-2", "the newest announcement's"
    plan.note_announced({"c": 1}, now=2.0, details={"c": "c-1"})  # memory 2: b, the oldest, goes
    assert plan.detail("b") is None and plan.detail("c") == "c-1"
    plan.note_announced({}, now=2.0 + plan.ttl + 1)
    assert plan.detail("a") is None and plan.detail("c") is None, "expired with its entry"


def fresh_plan(k: int = 2) -> PullPlan:
    """A hivemind-like plan whose rounds are 100 s: a round made over 25 s ago is awaited."""
    plan = PullPlan("me", k, memory=100, freshness=AwaitNext(share=0.25), rng=random.Random(3))
    plan.next_round(now=0.0)
    plan.next_round(now=100.0)
    plan.budget = float(k)  # one round's
    return plan


def test_an_old_round_is_drawn_once_its_peers_next_is_due_within_the_window_then_awaited():
    plan = fresh_plan()
    # a made 90 s ago, then 60 s later it made round 6: its period is 60 s, so 7 is due at 130.
    plan.note_announced({"a": 5, "b": 3}, now=100.0, made={"a": 10.0, "b": 95.0})
    plan.note_announced({"a": 6}, now=101.0, made={"a": 70.0})
    assert sorted(plan.choose(everyone)) == [("b", 3)], "b's round is fresh; a's 31 s old one is not drawn"
    assert plan.drawable_from(everyone) == 105.0 and not plan.freshness.awaited, "a window (25 s) before 130"
    plan.note_announced({}, now=105.0)
    assert plan.choose(everyone) == [] and plan.budget == 0 and plan.freshness.awaited["a"].due == 130.0
    plan.note_announced({}, now=120.0)
    assert plan.choose(everyone) == []
    plan.note_announced({}, now=130.0)
    assert plan.choose(everyone) == [("a", 7)]
    assert plan.missed("a", 7), "not made yet: no fault of a's"
    plan.note_announced({}, now=131.0)
    assert plan.choose(everyone) == [], "asked again after a wait"
    plan.note_announced({}, now=132.0)
    assert plan.choose(everyone) == [("a", 7)]
    plan.note_delivered("a")
    plan.note_announced({"a": 7}, now=140.0)
    assert plan.choose(everyone) == [] and plan.candidates() == {}, "round 7 came, once"


def period_100(plan: PullPlan, peer: str, made: float, round_no: int = 5, now: float = 100.0) -> None:
    """``peer`` read at ``now`` with ``round_no`` made at ``made`` and the round before 100 s earlier."""
    plan.note_announced({peer: round_no - 1}, now=now, made={peer: made - 100.0})
    plan.note_announced({peer: round_no}, now=now, made={peer: made})


def test_an_awaited_peer_announcing_is_fetched_at_once_and_a_miss_then_counts():
    plan = fresh_plan()
    period_100(plan, "a", made=0.0)
    assert plan.choose(everyone) == [("a", 6)], "due already"
    assert plan.missed("a", 6)
    plan.note_announced({"a": 8}, now=100.5)  # it skipped rounds: what it announced is what to take
    assert plan.choose(everyone) == [("a", 8)]
    assert not plan.missed("a", 8), "announced and missing: the peer's fault"
    assert "a" not in plan.freshness.awaited


def test_an_awaited_peer_that_never_moves_on_is_given_up_after_one_round():
    plan = fresh_plan()
    period_100(plan, "a", made=50.0)  # 6 due at 150: drawn from 125, given up at 225
    assert plan.choose(everyone) == [] and not plan.freshness.awaited
    plan.note_announced({"a": 5}, now=125.0)
    assert plan.choose(everyone) == [] and "a" in plan.freshness.awaited
    for t in (150.0, 152.0, 156.0, 164.0, 180.0):
        plan.note_announced({"a": 5}, now=t)
        assert plan.choose(everyone) == [("a", 6)]
        assert plan.missed("a", 6)
    plan.note_announced({"a": 5}, now=224.0)
    assert plan.choose(everyone) == [], "five asks, then nothing until the round is over"
    plan.note_announced({"a": 5}, now=225.0)
    assert plan.choose(everyone) == [] and not plan.freshness.awaited, "its old round is not taken: it would be old"
    assert plan.candidates() == {} and plan.budget == 1, "the fetch was spent"


def test_storing_a_round_again_does_not_make_it_fresh():
    plan = fresh_plan()
    plan.budget = 0
    period_100(plan, "a", made=50.0)
    plan.note_announced({"a": 5}, now=126.0, made={"a": 125.0})  # stored again just now
    plan.budget = 1
    assert plan.choose(everyone) == [] and "a" in plan.freshness.awaited and plan.freshness.awaited["a"].next == 6


def test_a_peer_whose_period_is_unknown_is_drawn_only_while_its_round_is_fresh():
    plan = fresh_plan()
    plan.note_announced({"a": 5}, now=100.0, made={"a": 50.0})
    assert plan.choose(everyone) == [] and plan.candidates() == {"a": 5} and plan.drawable_from(everyone) is None
    plan.note_announced({"a": 6}, now=160.0, made={"a": 150.0})
    assert plan.choose(everyone) == [("a", 6)]


def test_without_fresh_any_round_is_fetched_at_once():
    plan = PullPlan("me", 2, memory=100, freshness=reread())
    plan.next_round(now=0.0)
    plan.next_round(now=100.0)
    plan.note_announced({"a": 5}, now=100.0, made={"a": 1.0})
    assert plan.choose(everyone) == [("a", 5)] and not plan.freshness.awaited


def test_a_newcomers_round_is_drawn_only_while_fresh_and_never_awaited_so_its_announcement_costs_one_fetch():
    plan = fresh_plan(k=4)  # newcomers get a quarter of K: 1
    plan.note_announced({"stranger": 5, "other": 2}, now=100.0, made={"stranger": 0.0, "other": 90.0})
    assert plan.choose(lambda _peer: False) == [("other", 2)] and not plan.freshness.awaited
    assert not plan.missed("other", 2)


def test_a_peer_read_rounds_behind_is_asked_for_the_round_it_should_have_made_by_now():
    plan = fresh_plan()
    # The read shows round 5 made 230 s ago, period 100 s: 6 and 7 should exist, 7 made 30 s
    # ago (not fresh), so the plan asks for 8, due 70 s from now.
    plan.note_announced({"a": 4}, now=100.0, made={"a": -230.0})
    plan.note_announced({"a": 5}, now=100.0, made={"a": -130.0})
    assert plan.choose(everyone) == [] and not plan.freshness.awaited, "drawn from 145, a window before 170"
    plan.note_announced({}, now=145.0)
    awaited = plan.freshness.awaited
    assert plan.choose(everyone) == [] and (awaited["a"].next, awaited["a"].due) == (8, 170.0)
    plan = fresh_plan()
    plan.note_announced({"b": 4}, now=100.0, made={"b": -210.0})
    plan.note_announced({"b": 5}, now=100.0, made={"b": -110.0})  # 7 made 10 s ago: fresh, asked at once
    assert plan.choose(everyone) == [("b", 7)]
    assert plan.missed("b", 7), "a guess, not an announcement: no fault of b's"


def test_without_awaiting_an_old_round_is_no_candidate_until_the_peers_next_is_heard_of():
    """libp2p's plan: a round heard of over a quarter of this node's round ago (at least 20 s)
    is not drawn, whoever made it; a newer one heard of is."""
    plan = PullPlan("me", 2, memory=100, freshness=OnlyFresh(share=0.25), rng=random.Random(3))
    plan.next_round(now=0.0)
    plan.note_announced({"a": 5, "b": 3}, now=10.0)
    plan.next_round(now=100.0)  # 100 s rounds: fresh means made within 25 s
    plan.note_announced({"c": 7}, now=101.0)
    assert plan.choose(everyone) == [("c", 7)], "a's and b's rounds, 90 s old, are not fetched"
    assert plan.fetched == {"c": 7} and plan.budget == 1.0, \
        "nothing else asked for, the rest of the round's budget kept"
    plan.tick(now=127.0)
    assert plan.candidates() == {}, "c's round is now 26 s old"
    plan.note_announced({"a": 6}, now=128.0)
    assert plan.choose(everyone) == [("a", 6)]


def test_without_awaiting_a_node_that_published_once_draws_any_round_it_holds():
    plan = PullPlan("me", 2, memory=100, freshness=OnlyFresh(share=0.25))
    plan.note_announced({"a": 5}, now=0.0)
    plan.next_round(now=50.0)  # its round is not known until it has published twice
    assert plan.choose(everyone) == [("a", 5)]


def test_an_awaited_peer_whose_announcement_expired_is_asked_for_no_more():
    plan = fresh_plan()
    period_100(plan, "a", made=50.0)
    plan.note_announced({}, now=125.0)
    assert plan.choose(everyone) == [] and "a" in plan.freshness.awaited
    plan.tick(now=100.0 + plan.ttl + 1)  # unseen for the ttl: its announcement is gone
    assert plan.choose(everyone) == []
    plan.note_announced({}, now=100.0 + plan.ttl + 2)
    assert not plan.freshness.awaited


def test_the_windows_floor_never_takes_a_short_round_whole():
    assert fresh_window_s(20.0) == 20.0 and fresh_window_s(20.0, most=0.75) == 15.0
    assert fresh_window_s(60.0, most=0.75) == 20.0 and fresh_window_s(200.0, most=0.75) == 50.0
    assert fresh_window_s(1.0, most=0.75) == 5.0  # never under a store and a poll
    drawn = {}
    for most in (None, 0.75):
        plan = PullPlan("me", 2, memory=100, freshness=AwaitNext(share=0.25, most=most), rng=random.Random(3))
        plan.next_round(now=0.0)
        plan.next_round(now=20.0)  # 20 s rounds
        plan.note_announced({"a": 4}, now=20.0, made={"a": -17.0})
        plan.note_announced({"a": 5}, now=20.0, made={"a": 3.0})  # made 17 s ago: a round old on arrival
        drawn[most] = (plan.choose(everyone), {p: (a.next, a.due) for p, a in plan.freshness.awaited.items()})
    assert drawn[None] == ([("a", 5)], {}), "inside the 20 s floor"
    assert drawn[0.75] == ([], {"a": (6, 23.0)}), "past 15 s: its next round awaited, asked for when due"


def shard_peers(shard: int, n: int, prefix: str = "p") -> list[str]:
    """``n`` peer names whose announcements go to ``shard``."""
    out, i = [], 0
    while len(out) < n:
        name = f"{prefix}{i}"
        if shard_of(name) == shard:
            out.append(name)
        i += 1
    return out


def test_a_hivemind_read_holds_at_most_its_memory_established_peers_first_then_the_newest_rounds():
    pull = HivemindPull("me", rng=random.Random(1))
    regular, stranger = shard_peers(4, 1, "regular") + shard_peers(4, 1, "stranger")
    pull.read([4], {regular: (1, 50.0), stranger: (1, 0.0)}, 950.0, everyone)  # both in another shard
    crowd = {p: (1, float(i % 100)) for i, p in enumerate(shard_peers(3, 5000, "crowd"))}  # ages 0-99 s
    regulars = shard_peers(3, 10, "regular")
    crowd.update({p: (1, 110.0) for p in regulars})  # established, and older than any of the crowd
    pull.read([3], crowd, 1000.0, {regular, *regulars}.__contains__)
    held = pull.plan.announced
    assert len(held) == PLAN_MEMORY
    assert {regular, *regulars} <= set(held) and stranger not in held, "a newcomer's old round goes first"
    assert max(1000.0 - a.made for p, a in held.items() if p not in regulars and p != regular) <= 6.0


def test_a_hivemind_read_takes_what_was_stored_since_the_last_and_sees_again_what_it_holds():
    """The transport passes a whole shard; a simulation only what was stored since read_since:
    the plan comes out the same, and what it holds stays current while its shard holds it."""
    a, b, c = shard_peers(5, 3)
    plans = []
    for incremental in (False, True):
        pull = HivemindPull("me", rng=random.Random(1))
        stored = {a: (1, 0.0), b: (1, 5.0)}  # peer -> (round, store time)

        def read(now: float) -> None:
            since = pull.read_since(5) if incremental else float("-inf")
            pull.read([5], {p: (r, now - t) for p, (r, t) in stored.items() if t > since}, now, everyone)

        read(50.0)
        stored[c] = (1, 60.0)
        stored[a] = (2, 70.0)
        read(110.0)  # b's round, stored before 50 - 30 s, passed only in full: seen again all the same
        plans.append({p: (e.round, e.made, e.seen) for p, e in pull.plan.announced.items()})
        del stored[b]  # expired in the DHT, 120 s after it was stored
        read(130.0)
        plans.append({p: e.seen for p, e in pull.plan.announced.items()})
    assert plans[0] == plans[2] == {a: (2, 70.0, 110.0), b: (1, 5.0, 110.0), c: (1, 60.0, 110.0)}
    assert plans[1] == plans[3] == {a: 130.0, b: 110.0, c: 130.0}, "b not seen again once expired"


def test_a_hivemind_shard_whose_read_found_nothing_is_read_in_full_next_time():
    pull = HivemindPull("me", rng=random.Random(1))
    pull.read([2, 7], {}, 100.0, everyone, answered={7: 0})
    assert pull.read_since(2) == float("-inf") and pull.read_since(7) == 100.0 - READ_OVERLAP_S
    assert pull.shards.seen == {2, 7}, "read, for the census"


def test_a_hivemind_poll_reads_fewer_shards_the_more_announcers_a_shard_holds():
    # A read returns every announcer of its shards: 4 shards of a 3,000-node swarm are 750.
    pull = HivemindPull("me", rng=random.Random(2))
    assert POLL_ANNOUNCERS == 128 and len(pull.shards_to_read(everyone)) == SHARDS_PER_POLL  # none read yet
    for size, a_poll in ((2, 4), (32, 4), (64, 2), (127, 2), (190, 1), (700, 1)):
        pull.read([3], {}, 10.0, everyone, answered={3: size})
        assert pull.per_poll() == a_poll
        assert len(pull.shards_to_read(everyone)) == a_poll  # the plan holds nothing: it wants to read
    pull.read([3, 5], {}, 11.0, everyone, answered={3: 20, 5: 300})
    assert pull.per_poll() == 1, "the largest shard of the read counts"
    pull.read([3, 5], {}, 12.0, everyone, answered={})
    assert pull.per_poll() == 1, "a read that found no copy says nothing of the shards' size"


def test_a_hivemind_get_to_the_first_copy_asks_one_server_a_key_at_a_time():
    # Every request of a wave answers: 4 in flight for one key brought up to 4 copies of it.
    assert [get_workers(n, True) for n in (1, 2, 4, 8)] == [1, 2, 4, 4]
    assert [get_workers(n, False) for n in (1, 8)] == [4, 4], "a get of every replica keeps hivemind's default"


def test_the_simulators_plan_keeps_the_candidates_and_choices_of_the_plain_plan():
    """The simulator's plan keeps its candidates between calls, and while its policy's bounds
    move forward (OnlyFresh's with every tick): after each kind of change its candidates (in
    order) and its choices equal the product's plan, which walks its announcements afresh."""
    for fresh in (lambda: OnlyFresh(share=0.25), lambda: AwaitNext(share=0.25), lambda: OnlyFresh(share=0.0)):
        rng = random.Random(7)
        plain, kept = (kind("me", 3, memory=12, freshness=fresh(), ttl=40.0, rng=random.Random(1))
                       for kind in (PullPlan, KeptPullPlan))
        name = type(plain.freshness).__name__
        peers = [f"p{i}" for i in range(20)]
        rounds = dict.fromkeys(peers, 0)
        now, chosen = 0.0, 0
        for step in range(3000):
            now += rng.choice((0.0, 0.5, 3.0))
            op = rng.random()
            if op < 0.4:
                heard = rng.sample(peers, rng.randint(1, 4))
                for p in heard:
                    rounds[p] += rng.random() < 0.6  # else the same round, seen again
                made = {p: now - rng.choice((0.0, 10.0, 30.0)) for p in heard if rng.random() < 0.5}
                for plan in (plain, kept):
                    plan.note_announced({p: rounds[p] for p in heard}, now, made=made)
            elif op < 0.6:
                for plan in (plain, kept):
                    plan.tick(now)
            elif op < 0.75:
                picks = []
                for plan in (plain, kept):
                    plan.tick(now)
                    picks.append(plan.choose(lambda p: p < "p5"))
                assert picks[0] == picks[1], (name, step)
                chosen += len(picks[0])
            elif op < 0.82:
                peer = rng.choice(peers)
                for plan in (plain, kept):
                    plan.note_delivered(peer)
            elif op < 0.87:
                peer, round_no = rng.choice(peers), rng.randint(0, 5)
                assert plain.missed(peer, round_no) == kept.missed(peer, round_no), (name, step)
            elif op < 0.9:
                gone = rng.sample(peers, 2)
                for plan in (plain, kept):
                    plan.forget(gone)
            elif op < 0.93:
                for plan in (plain, kept):
                    plan.next_round(now)
            assert list(kept.candidates().items()) == list(plain.candidates().items()), (name, step)
        assert chosen > 100, name


def test_a_standings_set_counts_established_announcers_as_any_callable_would():
    """Given a Standing's established peers (an :class:`Established`, which counts them from
    the set's side when that is the smaller), the plan's choices are those the same test
    wrapped in a plain function (counted over the announcers) brings."""
    standing = Standing()  # 9 established of 60
    standing.restore({"round": 0, "qualified": 0, "rows": [[f"p{i}", [], None, True] for i in range(0, 60, 7)]})
    plans = [PullPlan("me", 8, memory=50, freshness=OnlyFresh(share=0.25), rng=random.Random(2)) for _ in range(2)]
    tests = [standing.is_established, lambda p: standing.is_established(p)]
    assert isinstance(tests[0], Established) and not isinstance(tests[1], Established)
    rng = random.Random(9)
    now, fetched = 0.0, []
    for step in range(400):
        now += rng.choice((0.5, 2.0))
        heard = {f"p{rng.randint(0, 59)}": step for _ in range(rng.randint(1, 6))}
        if step % 40 == 0:
            for plan in plans:
                plan.next_round(now)
        picks = []
        for plan, test in zip(plans, tests):
            plan.census_done = step % 3 > 0
            plan.note_announced(heard, now)
            picks.append((plan.wants_announcements(test), plan.choose(test)))
        assert picks[0] == picks[1], step
        fetched += picks[0][1]
    assert len(fetched) > 50
