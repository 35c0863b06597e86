"""The libp2p peer exchange, ``/swarmnode/peers/1.0.0``: how nodes find each other beyond the bootstrap peers.

A node with fewer than :data:`PEER_TARGET` connections asks :data:`EXCHANGE_ASK` of its
connected peers, at random, every :data:`EXCHANGE_EVERY` seconds for the addresses of
theirs (an answer is a JSON list of at most :data:`EXCHANGE_MAX_ADDRS` multiaddrs) and dials
the ones of peers it lacks until it knows more than :data:`PEER_TARGET`
(:class:`ExchangeRound`), never one of its own bootstrap peers: the join loop dials those,
two at a time drawn at random (:mod:`~swarmnode.swarm.transport.joining`), so that each
relay holds a share of the swarm; dialed from the exchange too, a relay's inbound slots
fill with connections it was not drawn for (in a simulated swarm of 1,000 nodes and 10
relays, a third of each relay's, until every relay refused dials). An answer names the peers in random order
(:func:`answer_order`): in the order they connected, every joiner would dial the same first
few, hubs connected to all, whose meshes are full, so nodes that reach only hubs starve.

The rules, without I/O: randomness from an injected ``random.Random``.
"""

from __future__ import annotations

import json
import random
from typing import Collection, Generic, Sequence, TypeVar

from swarmnode.swarm.address import peer_id_of
from swarmnode.swarm.transport.libp2p.wire import loads_bounded

PEERS_PROTOCOL = "/swarmnode/peers/1.0.0"
PEER_TARGET = 8
EXCHANGE_EVERY = 10.0
EXCHANGE_FIRST = 2.0        # seconds after start of the first exchange
EXCHANGE_ASK = 3            # peers asked per exchange
EXCHANGE_MAX_ADDRS = 64     # addresses sent or read per answer
EXCHANGE_MAX_BYTES = 32 * 1024
_MAX_ADDR_CHARS = 512

P = TypeVar("P")


class ExchangeRound(Generic[P]):
    """One exchange of a node whose connected peers are ``connected``: whom to ask
    (:attr:`ask`, empty when the node has none or :data:`PEER_TARGET` already) and which of
    the addresses they name to dial (none of ``bootstrap``, the PeerIDs of its bootstrap peers)."""

    def __init__(self, own_peer_id: str, connected: Sequence[P], rng: random.Random,
                 bootstrap: Collection[str] = ()):
        self.ask: list[P] = (rng.sample(list(connected), min(EXCHANGE_ASK, len(connected)))
                             if 0 < len(connected) < PEER_TARGET else [])
        self.known = {str(p) for p in connected} | {own_peer_id}
        self.bootstrap = bootstrap

    def enough(self) -> bool:
        """The node knows more than :data:`PEER_TARGET` peers: dial no more."""
        return len(self.known) > PEER_TARGET

    def worth_dialing(self, maddr: str) -> bool:
        peer = peer_id_of(maddr)
        return peer not in self.known and peer not in self.bootstrap

    def dialed(self, maddr: str) -> None:
        """A dial of ``maddr`` succeeded."""
        self.known.add(peer_id_of(maddr) or "")


def answer_order(connected: Sequence[P], asker: P, rng: random.Random) -> list[P]:
    """The peers an answer to ``asker`` names, in the order it names them: every connected
    peer but the asker, shuffled."""
    peers = [p for p in connected if p != asker]
    return rng.sample(peers, len(peers))


def encode_answer(addresses: Sequence[str]) -> bytes:
    return json.dumps(list(addresses[:EXCHANGE_MAX_ADDRS])).encode("utf-8")


def parse_peer_answer(raw: bytes) -> list[str]:
    """The usable multiaddrs of a peer-exchange answer; [] for anything malformed or oversized."""
    answer = loads_bounded(raw, EXCHANGE_MAX_BYTES)
    if not isinstance(answer, list):
        return []
    return [a for a in answer[:EXCHANGE_MAX_ADDRS]
            if isinstance(a, str) and len(a) < _MAX_ADDR_CHARS and a.startswith("/") and peer_id_of(a)]
