"""Where a node stores its announcement: straight at its shard's replicas, or by a traversal.

A store that traverses the DHT (hivemind's ``store``) asks each node it visits for the key, and
every replica it meets answers with the whole shard: N / 16 announcements, up to
``num_replicas`` times, to store one. A node only ever announces into its own shard (one
key), so it remembers the replicas its last traversal stored at and stores straight at them
(one request each, nothing comes back), traversing again when that may no longer reach the
shard's readers:

* when it knows no replicas (its first round, or after the rules below forgot them);
* when its routing table knows a peer nearer the key than the farthest its last traversal
  found, that traversal did not find (a node joined near the key since, or the traversal
  ran while the swarm was still gathering);
* every :data:`REFRESH_ROUNDS`-th round anyway, so replicas that nodes joining near the key
  displaced are found again even while the old ones still accept;
* in the same round, when fewer than half the remembered replicas accepted (the
  announcement is then held by too few of the nodes readers look at);
* in the next round, when any of them refused or did not answer (the announcement stands
  at the others meanwhile).

This module imports no hivemind: :class:`ShardReplicas` is the rule both the transport (in the
DHT process, :func:`~swarmnode.swarm.transport.hivemind.dht_process.store_round`) and the
simulator follow. A replica is whatever identifies a peer to the caller (a PeerID, a host).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from swarmnode.swarm.transport.counters import AnnounceStores

# Rounds from one traversal to the next, the traversal's included. A traversal is what brings
# the shard back (num_replicas copies of N / 16 announcements); one round in 8 pays for it, an
# eighth of what every round paid. What waiting costs: replicas that left are noticed at
# once (their direct store fails), and a node that joined nearer the key than a remembered
# replica as soon as the routing table holds it; one it does not hold (a table holds 20
# servers of the key's region, not all) is not, and until the next traversal this node's
# announcement is missing from that newcomer's copy of the shard, which a reader stopping at
# the first copy may read: up to 7 rounds (under 2 minutes at 15 s rounds, 10 to 19
# minutes at 90-160 s). A
# reader awaiting this node's next round asks for it by name when due, announced or not, so
# the peers it already follows are not lost that way. More than 8 saves little more (the
# traversal's bytes a round fall as 1/M) and waits longer.
REFRESH_ROUNDS = 8

P = TypeVar("P", bound=Hashable)  # what identifies a peer: a PeerID in the transport, a host in the simulator


@dataclass
class ShardReplicas(Generic[P]):
    """The remembered replicas of one announcement shard and the rule for using them.

    Per round: :meth:`targets` says where to store (a tuple of replicas: direct; None:
    traverse); after a direct store, :meth:`direct_done` with those that accepted says whether
    the store stands (False: traverse now); after a traversal, :meth:`traversed` with the
    replicas that accepted it.
    """

    refresh_rounds: int = REFRESH_ROUNDS
    replicas: tuple[P, ...] = ()
    found: frozenset[P] = frozenset()  # the peers the last traversal found nearest
    farthest: int = -1  # the distance to the key of the farthest of them
    direct_rounds: int = 0  # direct stores since the last traversal
    traversals: int = field(default=0, compare=False)  # counters: see counts()
    directs: int = field(default=0, compare=False)
    direct_failures: int = field(default=0, compare=False)

    def targets(self, table: Iterable[tuple[int, P]] = ()) -> tuple[P, ...] | None:
        """The replicas to store straight at this round, or None when this round traverses.
        ``table``: (distance to the key, peer) of the peers nearest the key that the node's
        routing table holds, the node itself among them if it is a server."""
        if not self.replicas or self.direct_rounds + 1 >= self.refresh_rounds:
            return None
        if any(d < self.farthest and p not in self.found for d, p in table):
            self.replicas = ()
            return None
        return self.replicas

    def direct_done(self, accepted: Collection[P]) -> bool:
        """Take the outcome of a direct store at :meth:`targets` (``accepted``: those that
        stored it); True when the store stands, False when the round must traverse now."""
        asked = self.replicas
        took = [r for r in asked if r in accepted]
        self.directs += 1
        self.direct_rounds += 1
        if len(took) == len(asked):
            return True
        self.replicas = ()  # one missed: the next round learns the replicas again
        if 2 * len(took) >= len(asked):
            return True
        self.direct_failures += 1
        return False

    def traversed(self, found: Sequence[tuple[int, P]], accepted: Collection[P]) -> None:
        """Remember what this round's traversal found, (distance to the key, peer), and the
        replicas among them that accepted its store (none: forget)."""
        self.traversals += 1
        self.replicas = tuple(p for _, p in found if p in accepted)
        self.found = frozenset(p for _, p in found)
        self.farthest = max((d for d, _ in found), default=-1)
        self.direct_rounds = 0

    def stores(self) -> AnnounceStores:
        """How this shard's announcements were stored so far, for ``/metrics``."""
        return AnnounceStores(direct=self.directs, traversal=self.traversals, direct_failed=self.direct_failures)

    def counts(self) -> dict[str, int]:
        """How this shard's announcements were stored so far, named as the simulator's meter
        names them: ``announce_direct`` (direct stores, those that fell back included),
        ``announce_traversal`` (traversals, fallbacks included) and
        ``announce_direct_failed`` (direct stores that reached too few replicas, so that the
        same round traversed). Rounds announced: direct + traversal - direct_failed."""
        return {"announce_direct": self.directs, "announce_traversal": self.traversals,
                "announce_direct_failed": self.direct_failures}


def rounds_announced(counts: Mapping[str, float]) -> float:
    """The rounds whose announcements :meth:`ShardReplicas.counts` (or sums or means of them)
    account for: each stored direct or by a traversal, one that fell back by both. A name
    missing counts 0 (the simulator's meter has only the names it counted)."""
    return counts.get("announce_direct", 0) + counts.get("announce_traversal", 0) - _fallbacks(counts)


def direct_share(counts: Mapping[str, float]) -> float | None:
    """The share of those rounds whose direct store stood (no traversal); None for none."""
    rounds = rounds_announced(counts)
    return (counts.get("announce_direct", 0) - _fallbacks(counts)) / rounds if rounds else None


def _fallbacks(counts: Mapping[str, float]) -> float:
    return counts.get("announce_direct_failed", 0)
