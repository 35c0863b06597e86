"""What a ``hivemind`` node reads and fetches each poll: the rules, without I/O.

A node's cost per round is bounded whatever the swarm's size: it fetches at most
``fetch_per_round`` (K) bundles a round of its own, chosen over the announcing peers by its
:class:`~swarmnode.swarm.transport.pull.PullPlan`, and reads announcement shards only while
the plan has too few candidates to spend its budget on (:meth:`HivemindPull.shards_to_read`):
:data:`SHARDS_PER_POLL` a poll at most, fewer the more announcers a shard holds
(:meth:`HivemindPull.per_poll`: about :data:`POLL_ANNOUNCERS` announcers a poll, one shard
at least), since a read returns every announcer of its shards. Which shards: first those of peers fetched lately
(their next round is the likeliest news), then the next of a shuffled cycle over all shards
(:class:`ShardCycle`). The plan's freshness policy is
:class:`~swarmnode.swarm.transport.freshness.AwaitNext`: a drawn round made more than
:data:`~swarmnode.swarm.transport.freshness.FRESH_SHARE` of the node's round ago is not fetched;
the bundle key of the peer's next round is looked up when that round is due (an
announcement's age comes from its signed expiry), so what a node gets is fresh rather than
up to a round old. A fetch of an announced round that finds nothing is never retried; it is
counted against the announcer (``missing_payload``, :meth:`HivemindPull.missing`).

What a node holds is bounded whatever the swarm's size, as what it reads is not (a shard read
returns all of the shard's N / 16 announcers): a read passes the plan only the announcements
stored since the shard's last read (:meth:`HivemindPull.read_since`; one stored before was
passed then, and if it is still the peer's latest it is still what the plan holds), and the
plan holds at most :data:`PLAN_MEMORY` announcers: established peers first, then the rounds
made last, over all it holds (:meth:`HivemindPull.read`; a newcomer's round is drawn only
while fresh, so the oldest are the least use). An announcement the plan holds is current while its
shard holds no newer one of its peer and it has not expired, so a read of its shard counts as
seeing it again, as a read of the whole shard did.

Time comes in as ``now``, randomness from an injected ``random.Random``: the transport and a
simulation in virtual time run the same code.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Iterable, Mapping

from swarmnode.swarm.transport.freshness import FRESH_SHARE, AwaitNext
from swarmnode.swarm.transport.hivemind.layout import ANNOUNCE_SHARDS, shard_of
from swarmnode.swarm.transport.pull import FETCH_PER_ROUND, PullPlan

SHARDS_PER_POLL = 4
# Announcers a poll's read aims at: a shard holds N / 16 of them and a read returns them all,
# so past 32 a shard a poll reads fewer shards (one from 128 a shard: about 2,000 nodes). At
# 3,000 nodes a read of 4 shards brought 750 announcers, for a plan that draws K = 8 a round.
POLL_ANNOUNCERS = 128
# The freshness window's widest, as a share of the node's round. The window's 20 s floor is a
# GPU node's whole round: a round drawn at 19 s old arrived past it, which made a swarm's p95
# delivery latency 1.07 of the round at 1,000 simulated nodes (docs/scale.md).
FRESH_MOST = 0.75
RECENT_PEERS = 32  # peers fetched lately whose shards a poll reads first
# Announcers a node's plan holds: 32 times K, whatever the swarm's size (a read of 4 shards of
# 10,000 peers returns 2,500; a crowd of fresh keys fills the shards, not a node's memory).
PLAN_MEMORY = 256
# A read passes on what was stored since the shard's last read less this: an announcement's
# time comes from its signed expiry, set before the store traversal that takes seconds, and by
# the announcer's clock. A peer whose clock is further behind is seen at a node's first read
# of its shard, and not after.
READ_OVERLAP_S = 30.0
# How far a lookup goes. hivemind's get visits servers nearest the key first; asked for the
# record with the latest expiry (sufficient_expiration_time = infinity) it visits the key's
# bucket_size (20) nearest servers whatever it finds, and every replica answers with its
# copy: a 16-node swarm's fetch of one 8 KB bundle moved 5 copies and 15 answers' worth of
# peer lists, and a shard read 5 copies of the shard (docs/scale.md). A bundle key holds one
# record, written once by its author, so the first copy found is the record; a shard holds
# every announcer's latest round at each of its replicas (each store goes to all of them),
# so the first replica found has them too, but for stores it missed, which the next read,
# or the announcer's next round, makes up.
FETCH_TO_FIRST_COPY = True
READ_TO_FIRST_COPY = True


# hivemind's get has num_workers (4 by default) requests in flight, shared by the keys of a
# call, and every request of a wave answers: a get of one key that stops at its first copy
# had up to 4 replicas send theirs (an 8 KB bundle, or a shard of N / 16 announcements, each).
# One request a key at a time, the first copy found ends the key's search. At 3,000 simulated
# nodes a read of one shard moved 105 KB where its copy is 26 KB (docs/scale.md).
DHT_WORKERS = 4


def sufficient_expiration(to_first_copy: bool, now: float) -> float:
    """A get's ``sufficient_expiration_time``: ``now`` ends the search at the first live copy,
    infinity goes on to every replica and keeps the copy that expires last."""
    return now if to_first_copy else float("inf")


def get_workers(keys: int, to_first_copy: bool) -> int:
    """A get's ``num_workers`` for ``keys`` keys: one request a key at a time (hivemind's
    :data:`DHT_WORKERS` at most) when it stops at the first copy, hivemind's default else."""
    return max(1, min(keys, DHT_WORKERS)) if to_first_copy else DHT_WORKERS


class ShardCycle:
    """Which announcement shards a poll reads (see the module doc), and which were ever read."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.seen: set[int] = set()  # shards read since start
        self._order: list[int] = []  # the rest of the current shuffled cycle

    def next(self, recent_peers: Iterable[str], n: int = SHARDS_PER_POLL) -> list[int]:
        """Up to ``n`` shards: half at most of ``recent_peers`` (peers fetched lately; none
        when ``n`` is 1), the rest the next of the shuffled cycle."""
        recent = [shard_of(p) for p in recent_peers]
        shards = list(dict.fromkeys(self.rng.sample(recent, len(recent))))[:n // 2]
        while len(shards) < min(n, ANNOUNCE_SHARDS):
            if not self._order:
                self._order = self.rng.sample(range(ANNOUNCE_SHARDS), ANNOUNCE_SHARDS)
            shard = self._order.pop()
            if shard not in shards:
                shards.append(shard)
        return shards

    def census_done(self) -> bool:
        """Every shard has been read once: the node has seen every announcer."""
        return len(self.seen) == ANNOUNCE_SHARDS


class HivemindPull:
    """A hivemind node's pull decisions: its plan (``plan``, freshness
    :class:`~swarmnode.swarm.transport.freshness.AwaitNext`) and its :class:`ShardCycle`
    (``shards``), sharing one ``rng``. Not thread-safe: the transport uses it from one task.

    A poll: :meth:`shards_to_read`, read them, :meth:`read`, ``plan.choose``, fetch the
    chosen bundle keys, ``plan.note_delivered`` for each found, :meth:`missing` for the rest."""

    def __init__(self, own_peer_id: str, fetch_per_round: int = FETCH_PER_ROUND, *,
                 rng: random.Random | None = None, plan_type: type[PullPlan] = PullPlan):
        """``plan_type``: the plan's class (a simulation of many nodes gives one that keeps its
        candidates between calls, with the same choices)."""
        rng = rng or random.Random()
        self.plan = plan_type(own_peer_id, fetch_per_round, memory=PLAN_MEMORY,
                             freshness=AwaitNext(FRESH_SHARE, FRESH_MOST), rng=rng)
        self.shards = ShardCycle(rng)
        self.read_at: dict[int, float] = {}  # shard -> when it was last read (monotonic seconds)
        self.shard_size = 0  # announcers the largest shard of the last read that found a copy held

    def next_round(self, now: float) -> None:
        """This node published a round at ``now``."""
        self.plan.next_round(now)

    def shards_to_read(self, established: Callable[[str], bool]) -> list[int]:
        """The shards to read this poll: none while the plan has candidates enough for its
        budget, so the reads a round costs stop growing once the shards hold more peers than
        K, however many more."""
        if not self.plan.wants_announcements(established):
            return []
        return self.shards.next(self.plan.recent(RECENT_PEERS), self.per_poll())

    def per_poll(self) -> int:
        """Shards a read takes: :data:`SHARDS_PER_POLL`, or as many as hold about
        :data:`POLL_ANNOUNCERS` announcers by the last read (one at least)."""
        if not self.shard_size:
            return SHARDS_PER_POLL
        return max(1, min(SHARDS_PER_POLL, math.ceil(POLL_ANNOUNCERS / self.shard_size)))

    def read_since(self, shard: int) -> float:
        """The store time (monotonic seconds) from which a read of ``shard`` now passes its
        announcements on: its last read less :data:`READ_OVERLAP_S`; -inf if never read. A
        transport may leave out what was stored before (:meth:`read` does)."""
        return self.read_at.get(shard, float("-inf")) - READ_OVERLAP_S

    def read(self, shards: Collection[int], announced: Mapping[str, tuple[int, float]], now: float,
             established: Callable[[str], bool], answered: Mapping[int, int] | None = None) -> None:
        """What reading ``shards`` found at ``now``: peer -> (round, seconds since it was
        stored); all of it, or only what was stored since :meth:`read_since`. ``answered``: the
        shards whose read found a copy, each with the announcers its copy held (None: all, their
        announcers counted from ``announced``); the others are read again in full, their
        announcements not seen again. The plan sees again what it holds of the answered shards,
        still stored, and takes the news; past :data:`PLAN_MEMORY` announcers it keeps, of all
        it holds, ``established`` peers first, then the rounds made last."""
        if answered is None:
            counts = dict.fromkeys(shards, 0)
            for peer in announced:
                if shard_of(peer) in counts:
                    counts[shard_of(peer)] += 1
            answered = counts
        if answered:
            self.shard_size = max(answered.values())
        since = {s: self.read_since(s) for s in answered}
        self.read_at.update(dict.fromkeys(answered, now))
        self.shards.seen.update(shards)
        plan = self.plan
        plan.census_done = self.shards.census_done()
        held, ttl, unread = plan.announced, plan.ttl, float("inf")
        # peer -> (round, made, shard): what the plan holds of these shards and is still stored, then the news.
        seen = {p: (a.round, a.made, a.detail) for p, a in held.items()
                if a.detail in since and a.made + ttl > now} if since else {}
        for peer, (round_no, age) in announced.items():
            shard, made = shard_of(peer), now - age
            if made > since.get(shard, unread):
                seen[peer] = (round_no, made, shard)
        if len(held) + len(seen.keys() - held.keys()) > plan.memory:
            # Keep what may be drawn: an established peer's announcement whatever its age (its
            # period, its next round awaited), a newcomer's while fresh; the oldest go first (of
            # two as old, the later PeerID). Each peer once, as of this read if seen.
            made = {p: a.made for p, a in held.items()}
            made.update((p, m) for p, (_, m, _) in seen.items())
            # Newest first: a sort by PeerID, then a stable one by age (plain strings, then plain
            # floats: what sorting (rank, age, peer) tuples gives, a third of its time).
            by_age = sorted(sorted(made), key=made.__getitem__, reverse=True)
            ranked = [p for p in by_age if established(p)] + [p for p in by_age if not established(p)]
            dropped = set(ranked[plan.memory:])
            plan.forget([p for p in held if p in dropped])
            seen = {p: v for p, v in seen.items() if p not in dropped}
        plan.note_announced({p: r for p, (r, _, _) in seen.items()}, now,
                            details={p: s for p, (_, _, s) in seen.items()},
                            made={p: m for p, (_, m, _) in seen.items()})

    def missing(self, chosen: Iterable[tuple[str, int]], found: Collection[str]) -> list[str]:
        """Of the ``chosen`` (peer, round) pairs fetched, the peers whose round was not
        ``found`` though it was announced: counted against them. An awaited round not made
        yet is no fault of its peer's; it is asked for again later."""
        return [peer for peer, round_no in chosen if peer not in found and not self.plan.missed(peer, round_no)]
