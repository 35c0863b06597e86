"""What a ``hivemind`` node reads and fetches each poll: the rules, without I/O.

A node's cost per round is bounded whatever the swarm's size: it fetches at most
``fetch_per_round`` (K) bundles a round of its own, chosen over the announcing peers by its
:class:`~swarmnode.swarm.transport.pull.PullPlan`, and reads :data:`SHARDS_PER_POLL`
announcement shards a poll only while the plan has too few candidates to spend its budget
on (:meth:`HivemindPull.shards_to_read`). Which shards: first those of peers fetched lately
(their next round is the likeliest news), then the next of a shuffled cycle over all shards
(:class:`ShardCycle`). The plan's freshness policy is
:class:`~swarmnode.swarm.transport.pull.AwaitNext`: a drawn round made more than
:data:`~swarmnode.swarm.transport.pull.FRESH_SHARE` of the node's round ago is not fetched;
the bundle key of the peer's next round is looked up when that round is due (an
announcement's age comes from its signed expiry), so what a node gets is fresh rather than
up to a round old. A fetch of an announced round that finds nothing is never retried; it is
counted against the announcer (``missing_payload``, :meth:`HivemindPull.missing`).

Time comes in as ``now``, randomness from an injected ``random.Random``: the transport and a
simulation in virtual time run the same code.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Mapping

from swarmnode.swarm.transport.hivemind_layout import (
    ANNOUNCE_SHARDS,
    SUBKEYS_PER_KEY,
    shard_of,
)
from swarmnode.swarm.transport.pull import (
    FETCH_PER_ROUND,
    FRESH_SHARE,
    AwaitNext,
    PullPlan,
)

SHARDS_PER_POLL = 4
# The freshness window's widest, as a share of the node's round. The window's 20 s floor is a
# GPU node's whole round: a round drawn at 19 s old arrived past it, which made a swarm's p95
# delivery latency 1.07 of the round at 1,000 simulated nodes (docs/scale.md).
FRESH_MOST = 0.75
RECENT_PEERS = 32  # peers fetched lately whose shards a poll reads first
ANNOUNCED_MEMORY = ANNOUNCE_SHARDS * SUBKEYS_PER_KEY  # every announcement the shards can hold
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


def sufficient_expiration(to_first_copy: bool, now: float) -> float:
    """A get's ``sufficient_expiration_time``: ``now`` ends the search at the first live copy,
    infinity goes on to every replica and keeps the copy that expires last."""
    return now if to_first_copy else float("inf")


class ShardCycle:
    """Which announcement shards a poll reads (see the module doc), and which were ever read."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.seen: set[int] = set()  # shards read since start
        self._order: list[int] = []  # the rest of the current shuffled cycle

    def next(self, recent_peers: Iterable[str]) -> list[int]:
        """Up to :data:`SHARDS_PER_POLL` shards: half at most of ``recent_peers`` (peers
        fetched lately), the rest the next of the shuffled cycle."""
        recent = [shard_of(p) for p in recent_peers]
        shards = list(dict.fromkeys(self.rng.sample(recent, len(recent))))[:SHARDS_PER_POLL // 2]
        while len(shards) < min(SHARDS_PER_POLL, ANNOUNCE_SHARDS):
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
    :class:`~swarmnode.swarm.transport.pull.AwaitNext`) and its :class:`ShardCycle`
    (``shards``), sharing one ``rng``. Not thread-safe: the transport uses it from one task.

    A poll: :meth:`shards_to_read`, read them, :meth:`read`, ``plan.choose``, fetch the
    chosen bundle keys, ``plan.note_delivered`` for each found, :meth:`missing` for the rest."""

    def __init__(self, own_peer_id: str, fetch_per_round: int = FETCH_PER_ROUND, *,
                 rng: random.Random | None = None):
        rng = rng or random.Random()
        self.plan = PullPlan(own_peer_id, fetch_per_round, memory=ANNOUNCED_MEMORY,
                             freshness=AwaitNext(FRESH_SHARE, FRESH_MOST), rng=rng)
        self.shards = ShardCycle(rng)

    def next_round(self, now: float) -> None:
        """This node published a round at ``now``."""
        self.plan.next_round(now)

    def shards_to_read(self, established: Callable[[str], bool]) -> list[int]:
        """The shards to read this poll: none while the plan has candidates enough for its
        budget, so the reads a round costs stop growing once the shards hold more peers than
        K, however many more."""
        if not self.plan.wants_announcements(established):
            return []
        return self.shards.next(self.plan.recent(RECENT_PEERS))

    def read(self, shards: Collection[int], announced: Mapping[str, tuple[int, float]], now: float) -> None:
        """What reading ``shards`` found at ``now``: peer -> (round, seconds since it was stored)."""
        self.shards.seen.update(shards)
        self.plan.census_done = self.shards.census_done()
        self.plan.note_announced({p: r for p, (r, _) in announced.items()}, now,
                                 made={p: now - age for p, (_, age) in announced.items()})

    def missing(self, chosen: Iterable[tuple[str, int]], found: Collection[str]) -> list[str]:
        """Of the ``chosen`` (peer, round) pairs fetched, the peers whose round was not
        ``found`` though it was announced: counted against them. An awaited round not made
        yet is no fault of its peer's; it is asked for again later."""
        return [peer for peer, round_no in chosen if peer not in found and not self.plan.missed(peer, round_no)]
