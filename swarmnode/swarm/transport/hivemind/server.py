"""A hivemind DHT server in this process, without torch: the ``hivemind`` side of ``swarmnode relay``.

A node's :class:`~swarmnode.swarm.transport.hivemind.transport.HivemindTransport` runs hivemind's
``DHT``, a forked process whose results come back through ``MPFuture``, which keeps its state
in torch shared memory; and ``import hivemind`` imports torch, its optimizers and its mixture
of experts. A relay needs none of that: it only serves the DHT (stores what peers put,
answers what they get). So this module runs hivemind's ``DHTNode`` on the relay's own event
loop and imports only the DHT and p2p modules
(:func:`~swarmnode.compat.hivemind_torchless.import_dht_without_torch`): one process and
p2pd, about a tenth of the memory.

Records are checked by the same
:class:`~swarmnode.swarm.transport.hivemind.records.SwarmRecordValidator` as every node's DHT
(bundles signed by their sender, announcements signed by their owner in the owner's shard),
so a relay stores nothing a peer could forge; nodes behind NAT, DHT clients, store their
records on servers like this one. It keeps them within the same bounds as a node's DHT
process (:class:`~swarmnode.swarm.transport.hivemind.storage.BoundedStorage`: bytes per
signer and in all, newcomers' share), and its counters are the same
(:meth:`HivemindServer.counters`). It publishes nothing and reads no bundle.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Sequence

from swarmnode.compat.hivemind_torchless import import_dht_without_torch
from swarmnode.swarm.sealing import Sealer
from swarmnode.swarm.transport.base import NodeIdentity, Transport, TransportError
from swarmnode.swarm.transport.counters import TransportCounters


class HivemindServer(Transport):
    """A DHT server for the swarm's records; see the module doc. ``private`` is refused: a
    server must be reachable."""

    name = "hivemind"

    def __init__(self, identity: NodeIdentity, swarm: str, bootstrap: Sequence[str] = (),
                 listen: str | None = None, announce: str | None = None, sealer: Sealer | None = None):
        """``sealer``: a private swarm's; the relay then holds that swarm's sealed records only."""
        super().__init__(identity, swarm, bootstrap, listen, announce)
        self.sealer = sealer
        self._node: Any = None
        self._addresses: list[str] = []

    async def _start(self) -> None:
        import_dht_without_torch()
        from hivemind.dht.node import DHTNode
        from hivemind.dht.validation import CompositeValidator

        from swarmnode.swarm.transport.hivemind.dht_process import bound_node, write_private
        from swarmnode.swarm.transport.hivemind.records import SwarmRecordValidator

        spool = tempfile.mkdtemp(prefix="swarmnode-relay-")
        key_file = os.path.join(spool, "identity.key")
        kwargs: dict[str, Any] = {"host_maddrs": [self.listen], "identity_path": key_file}
        if self.announce:
            kwargs["announce_maddrs"] = [self.announce]
        try:
            write_private(key_file, self.identity.private_key_protobuf())
            self._node = await DHTNode.create(
                initial_peers=[], client_mode=False,
                record_validator=CompositeValidator([SwarmRecordValidator(self.swarm, sealer=self.sealer)]), **kwargs)
            bound_node(self._node, SwarmRecordValidator(self.swarm, sealer=self.sealer))
        except Exception as exc:
            raise TransportError(f"the hivemind DHT server could not start on {self.listen}: {exc}") from None
        finally:
            shutil.rmtree(spool, ignore_errors=True)  # p2pd has read the key (or failed)
        self._addresses = [str(m) for m in await self._node.get_visible_maddrs()]
        if not all(a.endswith(f"/p2p/{self.identity.peer_id}") for a in self._addresses):
            await self._stop()
            raise TransportError(f"p2pd reports addresses {self._addresses} for another PeerID than "
                                 f"{self.identity.peer_id}")

    async def _stop(self) -> None:
        node, self._node = self._node, None
        if node is not None:
            await node.shutdown()

    async def _publish(self, round_no: int, data: bytes) -> None:
        raise RuntimeError("a hivemind DHT server publishes nothing of its own")

    async def _dial(self, maddr: str) -> bool:
        from swarmnode.swarm.transport.hivemind.dht_process import join

        return self._node is not None and await join(None, self._node, maddr=maddr)

    def peers(self) -> list[str]:
        """The DHT servers in this node's routing table (DHT clients, such as nodes behind NAT,
        are never listed there)."""
        if self._node is None:
            return []
        from swarmnode.compat.hivemind import routed_peers

        return [str(peer) for peer in routed_peers(self._node)]

    def addresses(self) -> list[str]:
        return list(self._addresses)

    def counters(self) -> TransportCounters | None:
        """What the DHT server refused and evicted, by reason, and what its storage holds
        (:func:`~swarmnode.swarm.transport.hivemind.dht_process.storage_counters`); None
        before it starts."""
        if self._node is None:
            return None
        from swarmnode.swarm.transport.hivemind.dht_process import storage_counters

        return storage_counters(self._node)
