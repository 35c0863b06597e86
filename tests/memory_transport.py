"""An in-process transport for tests: every node of one :class:`MemoryHub` and swarm sees the others.

A test double of the network transports (a node never runs it: ``--transport`` offers only
the real ones). It keeps
the network transports' semantics: no self-delivery, delivery on each receiver's own
asyncio loop, a peer list of the other running nodes, and an idempotent stop. Nothing is
copied or serialised: receivers get the very bytes object that was published.
"""

from __future__ import annotations

import threading
from typing import Sequence

from swarmnode.swarm.transport.base import MAX_MESSAGE_BYTES, NodeIdentity, Transport


class MemoryHub:
    """The shared medium of a group of :class:`MemoryTransport` nodes; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: list[MemoryTransport] = []

    def join(self, node: "MemoryTransport") -> None:
        with self._lock:
            if any(n.identity.peer_id == node.identity.peer_id for n in self._nodes):
                raise ValueError(f"PeerID {node.identity.peer_id} is already on this hub")
            self._nodes.append(node)

    def leave(self, node: "MemoryTransport") -> None:
        with self._lock:
            if node in self._nodes:
                self._nodes.remove(node)

    def others(self, node: "MemoryTransport") -> list["MemoryTransport"]:
        """The running nodes of ``node``'s swarm, except ``node``."""
        with self._lock:
            return [n for n in self._nodes if n is not node and n.swarm == node.swarm]


class MemoryTransport(Transport):
    name = "memory"
    uses_bootstrap = False

    def __init__(self, identity: NodeIdentity, swarm: str, bootstrap: Sequence[str] = (),
                 listen: str | None = None, announce: str | None = None, *, hub: MemoryHub):
        super().__init__(identity, swarm, bootstrap, listen, announce)
        self.hub = hub

    async def _start(self) -> None:
        self.hub.join(self)

    async def _stop(self) -> None:
        self.hub.leave(self)

    async def _publish(self, round_no: int, data: bytes) -> None:
        if len(data) > MAX_MESSAGE_BYTES:
            raise ValueError(f"message of {len(data)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")
        for node in self.hub.others(self):
            node._deliver_threadsafe(data)

    async def _dial(self, maddr: str) -> bool:
        return False

    def peers(self) -> list[str]:
        return [n.identity.peer_id for n in self.hub.others(self)] if self._started and not self._stopped else []

    def addresses(self) -> list[str]:
        return [f"/memory/{id(self.hub):x}/p2p/{self.identity.peer_id}"]
