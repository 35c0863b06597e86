"""How a node stays joined to its swarm: the rule of :meth:`Transport._keep_joined`, without I/O.

A node dials its bootstrap peers until one answers, and again whenever none of them is
connected: other peers are not enough, since nodes that keep only each other after a
bootstrap peer restarts would never dial it again, and every node joining through it later
would form a second swarm cut off from theirs. Each time it dials at most :data:`JOIN_DIALS`
of them, drawn at random (all of them when there are no more): a relay holds a few hundred
connections (py-libp2p's connection manager), so a swarm of thousands needs many relays,
and a node that dialed every one would take a connection at each, so that more relays would
hold no more nodes. While one is connected it looks again every :data:`CHECK_S` seconds;
after dials that no one answered it waits a :class:`~swarmnode.backoff.Backoff` delay (1 s
doubling to 60 s, +-20 %), and draws again.
Randomness comes from an injected ``random.Random``, so a transport and a simulation run the
same rule.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from functools import lru_cache

from swarmnode.backoff import Backoff
from swarmnode.swarm.address import peer_id_of

CHECK_S = 5.0  # seconds between looks while a bootstrap peer is connected, or after one answered
JOIN_DIALS = 2  # bootstrap peers dialed at a time: two, so that one down costs no backoff


def bootstrap_in_reach(connected: Collection[str], bootstrap: Sequence[str]) -> bool:
    """Connected to a bootstrap peer (to any peer, for bootstrap addresses without a PeerID)."""
    if not connected:
        return False
    ids = _peer_ids(tuple(bootstrap))
    if None in ids:
        return True
    if len(connected) < len(ids):  # a node of a large swarm has many relays and a few peers
        return any(p in ids for p in connected)
    return any(i in connected for i in ids)


@lru_cache(maxsize=1024)
def _peer_ids(bootstrap: tuple[str, ...]) -> frozenset[str | None]:
    """The PeerIDs ``bootstrap`` names, parsed once: a node looks every few seconds, and a
    simulated swarm has thousands of nodes with one list (and each of its relays, one
    without itself)."""
    return frozenset(peer_id_of(m) for m in bootstrap)


class JoinLoop:
    """One node's join loop over ``bootstrap`` (multiaddrs): :meth:`to_dial`, dial them,
    :meth:`wait` after. Not thread-safe."""

    def __init__(self, bootstrap: Sequence[str], rng: random.Random | None = None):
        self.bootstrap = list(bootstrap)
        self.rng = rng
        self.backoff = Backoff(rng=rng)

    def to_dial(self, in_reach: bool) -> list[str]:
        """The bootstrap peers to dial now (at most :data:`JOIN_DIALS`, drawn at random), or
        none while one is in reach."""
        if in_reach:
            self.backoff.reset()
            return []
        if len(self.bootstrap) <= JOIN_DIALS:
            return list(self.bootstrap)
        return (self.rng or random).sample(self.bootstrap, JOIN_DIALS)

    def wait(self, dialed: bool, answered: bool) -> float:
        """Seconds until the next look: :data:`CHECK_S` if nothing was dialed or a peer answered,
        else the next backoff delay."""
        return CHECK_S if not dialed or answered else self.backoff.next_delay()
