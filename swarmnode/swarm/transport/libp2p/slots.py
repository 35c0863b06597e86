"""Which inbound connections a libp2p node closes so that newcomers always find a slot (no I/O).

A node accepts a bounded number of inbound connections (py-libp2p's inbound slots, 250), and
keys cost nothing: a crowd of keys that dial a node and then send nothing would hold every
slot, and an honest node that joins later would be refused until they left. So a node keeps
:data:`SLOT_RESERVE` slots free: when fewer are, it closes the inbound connections that are
*idle* (their peer opened no stream to this node for :data:`IDLE_GRACE_S`, counted from the
connection's opening) longest first, and only those. The same for one IP address: it may
hold at most :data:`PER_ADDRESS` connections (the rest are refused before their handshake,
:func:`swarmnode.compat.libp2p.release_inbound_slots`), and an address within
:data:`SLOT_RESERVE` of that loses its idlest too, so a newcomer behind it gets in. A peer
that uses its connection (pushes, samples, asks, pulls, holds) is never closed for room, and
is the first a node pushes its announcements to; a peer closed for idling may dial again.
:class:`Activity` remembers when each peer last opened a stream, for at most
:data:`MAX_PEERS` peers.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Iterable, Protocol

SLOT_RESERVE = 16      # inbound slots a node keeps free for newcomers
IDLE_GRACE_S = 10.0    # a connection whose peer opened no stream for this long is idle
PER_ADDRESS = 125      # inbound connections from one IP address: half the slots
MAX_PEERS = 4096       # peers Activity remembers (beyond, the longest quiet are forgotten)
ACTIVE_S = 60.0        # a peer that opened a stream this recently is pushed to first (libp2p.spread.push_targets)


class Held(Protocol):
    @property
    def peer(self) -> str: ...
    @property
    def address(self) -> str: ...
    @property
    def opened(self) -> float: ...


class Activity:
    """When each peer last opened a stream to this node (``time.monotonic()``), bounded.
    Not thread-safe: the host's thread only."""

    def __init__(self, max_peers: int = MAX_PEERS):
        self.max_peers = max_peers
        self._last: OrderedDict[str, float] = OrderedDict()

    def seen(self, peer: str, now: float) -> None:
        self._last[peer] = now
        self._last.move_to_end(peer)
        while len(self._last) > self.max_peers:
            self._last.popitem(last=False)

    def last(self, peer: str) -> float | None:
        return self._last.get(peer)

    def active(self, peer: str, now: float, within: float = ACTIVE_S) -> bool:
        """Whether ``peer`` opened a stream within the last ``within`` seconds."""
        last = self._last.get(peer)
        return last is not None and now - last <= within


def to_close(held: Iterable[Held], activity: Activity, free: int, now: float, *,
             reserve: int = SLOT_RESERVE, per_address: int = PER_ADDRESS, grace: float = IDLE_GRACE_S) -> list[str]:
    """The peers whose inbound connections to close now: idle ones (see the module), idlest
    first, while fewer than ``reserve`` slots would be free or their address would hold more
    than ``per_address - reserve``. Never a peer that opened a stream within ``grace``."""
    held = list(held)
    by_address = Counter(c.address for c in held)
    since = {c.peer: max(c.opened, activity.last(c.peer) or c.opened) for c in held}
    idle = sorted((c for c in held if now - since[c.peer] >= grace), key=lambda c: since[c.peer])
    short, closing = reserve - free, {}
    for c in idle:
        if c.peer not in closing and (short > 0 or by_address[c.address] > per_address - reserve):
            closing[c.peer] = None
            short -= 1
            by_address[c.address] -= 1
    return list(closing)
