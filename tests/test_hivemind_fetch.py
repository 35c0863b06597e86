"""The hivemind transport's choice of what to read and fetch (DHT layout 2), with the DHT
process replaced by a fake swarm of announcements: a round costs at most K fetches however
many peers announce, Sybils get no more than the established peers leave, and a missing payload costs one fetch."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

pytest.importorskip("hivemind")

from swarmnode.swarm.bundle import encode_bundle  # noqa: E402
from swarmnode.swarm.identity import Identity  # noqa: E402
from swarmnode.swarm.transport.counters import TransportCounters  # noqa: E402
from swarmnode.swarm.transport.hivemind import dht_process as calls  # noqa: E402
from swarmnode.swarm.transport.hivemind.layout import ANNOUNCE_SHARDS, shard_of  # noqa: E402
from swarmnode.swarm.transport.hivemind.reads import SHARDS_PER_POLL, HivemindPull  # noqa: E402
from swarmnode.swarm.transport.hivemind.transport import HivemindTransport  # noqa: E402


class FakeSwarm:
    """Stands in for the DHT process: announcements by shard, and which payloads exist."""

    def __init__(self):
        self.rounds: dict[str, int] = {}
        self.made: dict[str, float] = {}  # monotonic time of each peer's announcement
        self.stored: set[str] = set()  # peers whose announced round has a payload
        self.shard_reads = 0
        self.fetched: list[str] = []

    def announce(self, peer: str, round_no: int, *, payload: bool, age: float = 0.0) -> None:
        self.rounds[peer] = round_no
        self.made[peer] = time.monotonic() - age
        (self.stored.add if payload else self.stored.discard)(peer)

    async def call(self, coro):
        if coro is calls.counters:
            return TransportCounters()
        fn, kw = coro.func, coro.keywords
        if fn is calls.read_announcements:
            self.shard_reads += len(kw["shards"])
            shards = set(kw["shards"])
            found = {p: (r, time.monotonic() - self.made[p]) for p, r in self.rounds.items() if shard_of(p) in shards}
            return found, {s: sum(shard_of(p) == s for p in found) for s in shards}, []
        if fn is calls.store_round:
            raise RuntimeError("no DHT node accepted the announcement")  # its replicas gone silent
        if fn is calls.fetch_bundles:
            self.fetched += [p for p, _ in kw["wanted"]]
            return [(p, r, f"{p}/{r}".encode()) for p, r in kw["wanted"] if p in self.stored and r == self.rounds[p]]
        raise AssertionError(fn)


def peer(name: str) -> str:
    return Identity.from_seed(name.encode().ljust(32, b"\0")[:32]).peer_id


def make_transport(swarm: FakeSwarm, established: set[str], k: int = 8):
    t = HivemindTransport(Identity.from_seed(bytes(32)), "sw", fetch_per_round=k)
    t._call = swarm.call
    t._pull = HivemindPull(t.identity.peer_id, k, rng=random.Random(0))
    t.set_established(established.__contains__)
    delivered, rejected = [], []
    t.set_handler(delivered.append)
    t.set_reject_handler(lambda author, reason: rejected.append((author, reason)))
    return t, delivered, rejected


def run_round(t, polls: int = 6) -> None:
    t._pull.next_round(time.monotonic())
    for _ in range(polls):
        asyncio.run(t._poll_once())


def test_sybils_get_only_what_established_peers_leave_and_each_missing_payload_costs_one_fetch():
    swarm = FakeSwarm()
    honest = [peer(f"honest-{i}") for i in range(4)]
    sybils = [peer(f"sybil-{i}") for i in range(50)]
    t, delivered, rejected = make_transport(swarm, set(honest))
    for r in range(1, 9):
        before = len(swarm.fetched)
        for p in honest:
            swarm.announce(p, r, payload=True)
        for p in sybils:  # every round a new round, never a payload
            swarm.announce(p, r, payload=False)
        run_round(t)
        this_round = swarm.fetched[before:]
        assert len(this_round) <= 2 * 8  # at most K fresh plus K carried over
        assert sorted(p for p in this_round if p in honest) == sorted(honest)  # every honest peer, once
        # What the 4 established announcers leave of K (more than a quarter of K, 2), as one crowd.
        assert 0 < len([p for p in this_round if p in sybils]) <= 4
    sybil_fetches = [p for p in swarm.fetched if p in sybils]
    # One fetch each, counted against its announcer; nothing of theirs delivered.
    assert sorted(rejected) == sorted((p, "missing_payload") for p in sybil_fetches)
    assert len(delivered) == 4 * 8 and all(d.split(b"/")[0].decode() in honest for d in delivered)


def test_a_rounds_fetches_stay_at_k_and_shard_reads_stop_however_many_peers_announce():
    costs = {}
    for n in (8, 64, 2000):
        swarm = FakeSwarm()
        peers = [peer(f"p-{n}-{i}") for i in range(n)]
        t, delivered, _ = make_transport(swarm, set(peers))
        for r in range(1, 5):
            for p in peers:
                swarm.announce(p, r, payload=True)
            run_round(t, polls=10)
        costs[n] = (len(swarm.fetched), swarm.shard_reads)
        assert len(swarm.fetched) <= 4 * 8 + 8  # K a round, plus the K it starts with
        assert len(set(delivered)) == len(delivered)
    # Past K peers, more peers cost no more fetches, and fewer shard reads, not more.
    assert costs[2000][0] == costs[64][0]
    assert costs[2000][1] <= costs[64][1] <= costs[8][1]


def test_a_round_whose_stores_failed_still_begins_its_k_fetches(tmp_path):
    swarm = FakeSwarm()
    friend = peer("friend")
    t, delivered, _ = make_transport(swarm, {friend}, k=1)
    swarm.announce(friend, 1, payload=True)
    run_round(t)
    assert delivered == [f"{friend}/1".encode()] and t._pull.plan.budget < 1
    t._spool = str(tmp_path)
    with pytest.raises(RuntimeError, match="announcement"):
        asyncio.run(t._publish(1, encode_bundle(t.identity, swarm="sw", round_no=1, model="m", groups=[])))
    swarm.announce(friend, 2, payload=True)
    for _ in range(6):
        asyncio.run(t._poll_once())
    assert delivered[1:] == [f"{friend}/2".encode()], "the friend's next round, on this round's budget"


def test_established_peers_keep_their_fetches_whatever_a_crowd_announces():
    swarm = FakeSwarm()
    honest = [peer(f"regular-{i}") for i in range(10)]  # more than K: newcomers get their quarter only
    sybils = [peer(f"crowd-{i}") for i in range(200)]
    t, _, _ = make_transport(swarm, set(honest))
    for r in range(1, 6):
        before = len(swarm.fetched)
        for p in honest + sybils:
            swarm.announce(p, r, payload=p in honest)
        run_round(t)
        this_round = swarm.fetched[before:]
        assert len([p for p in this_round if p in sybils]) <= 2
        assert len([p for p in this_round if p in honest]) >= 6



def test_a_round_made_long_ago_is_skipped_for_the_peers_next_and_waiting_for_it_costs_the_peer_nothing():
    swarm = FakeSwarm()
    a = peer("slow")
    t, delivered, rejected = make_transport(swarm, {a}, k=2)
    # This node's rounds: 40 s, so a round over 20 s (the floor) old is stale.
    t._pull.next_round(time.monotonic() - 40.0)
    # Its round 4 was read before, made 85 s ago, and 5 was made 45 s ago: its period is 40 s,
    # so round 6 is due already (a peer whose period is unknown is drawn only when fresh).
    t._pull.plan.note_announced({a: 4}, time.monotonic(), made={a: time.monotonic() - 85.0})
    swarm.announce(a, 5, payload=True, age=45.0)
    run_round(t, polls=3)
    assert swarm.fetched == [a] and delivered == [] and rejected == [], "asked for round 6, not made yet"
    assert t._pull.plan.freshness.awaited[a].next == 6
    swarm.announce(a, 6, payload=True)
    for _ in range(ANNOUNCE_SHARDS // SHARDS_PER_POLL):  # the shard cycle comes to a's, which says 6
        asyncio.run(t._poll_once())
    assert delivered == [f"{a}/6".encode()] and rejected == []
