"""What a transport counts and holds, typed per component (no I/O).

Each field says what it is: a *counter* only grows while the process runs (refusals by
reason, evictions, how announcements were stored); a *gauge* is what a store holds now.
``/metrics`` writes them as such (:mod:`swarmnode.node.prometheus`); the refusals by reason,
for callers that need only those, are :attr:`TransportCounters.refused`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RoomGauges:
    """Gauges of one :class:`~swarmnode.swarm.transport.room.Room`: the bytes newcomers and
    established signers hold in it now, and how many signers each."""

    newcomer_bytes: int = 0
    established_bytes: int = 0
    newcomers: int = 0
    established: int = 0


@dataclass(frozen=True)
class AnnounceStores:
    """Counters of how a hivemind node's announcements were stored: straight at the shard's
    remembered replicas (``direct``, those that fell back included), by a DHT traversal
    (``traversal``, fallbacks included), and direct stores that reached too few replicas, so
    that the same round traversed (``direct_failed``, counted in both)."""

    direct: int = 0
    traversal: int = 0
    direct_failed: int = 0

    def __add__(self, other: AnnounceStores) -> AnnounceStores:
        return AnnounceStores(self.direct + other.direct, self.traversal + other.traversal,
                              self.direct_failed + other.direct_failed)


@dataclass(frozen=True)
class TransportCounters:
    """What a transport refused, evicted and holds, below the bundle checks.

    ``refused``: counters, records or requests refused, by reason. ``evicted``: counter,
    records its stores evicted to stay within their bounds. ``stored_bytes``: gauges, the
    bytes of peers' records each store holds (hivemind: ``stored``, ``cached``; libp2p:
    ``held``). ``room``: gauges of the bundle records' room by standing; ``announce_room``:
    the announcements' (hivemind). ``announce_stores``: counters of how this node's own
    announcements were stored (a hivemind node; a relay announces nothing)."""

    refused: Mapping[str, int] = field(default_factory=dict)
    evicted: int = 0
    stored_bytes: Mapping[str, int] = field(default_factory=dict)
    room: RoomGauges | None = None
    announce_room: RoomGauges | None = None
    announce_stores: AnnounceStores | None = None
