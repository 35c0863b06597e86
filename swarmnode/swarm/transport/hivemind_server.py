"""A hivemind DHT server in this process, without torch: the ``hivemind`` side of ``swarmnode relay``.

:class:`~swarmnode.swarm.transport.hivemind_dht.HivemindTransport` runs hivemind's ``DHT``,
a forked process that returns results through ``MPFuture``, which keeps its state in torch
shared memory; and ``import hivemind`` imports torch, its optimizers and its mixture of
experts. A relay needs none of that: it only serves the DHT (stores what peers put, answers
what they get). So this module runs hivemind's ``DHTNode`` on the relay's own event loop and
imports only the DHT and p2p modules (:func:`import_dht_without_torch`): one process and
p2pd, about a tenth of the memory.

Records are checked by the same :class:`~swarmnode.swarm.transport.hivemind_dht.SwarmRecordValidator`
as every node's DHT (only bundles signed by their sender, heads signed by their owner), so a
relay stores nothing a peer could forge. It publishes nothing and reads no bundle.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
import tempfile
import types
from typing import Any, Sequence

from swarmnode.swarm.transport.base import NodeIdentity, Transport, TransportError

# hivemind.utils submodules whose names the DHT and p2p modules import from ``hivemind.utils``.
_UTILS_EXPORTS = ("logging", "serializer", "timed_storage", "asyncio", "nested", "performance_ema")


def import_dht_without_torch() -> None:
    """Make ``hivemind.dht`` and ``hivemind.p2p`` importable without running hivemind's package
    ``__init__`` files, which import torch (hivemind.utils.mpfuture, tensor_descr, moe, optim).

    It registers bare ``hivemind``, ``hivemind.utils`` and ``hivemind.dht`` packages pointing
    at the installed sources, and gives ``hivemind.utils`` the names its torch-free
    submodules export. This relies on hivemind 1.1's layout (a private internal): it is the
    one place that does. A process that already imported hivemind keeps it as it is; one that
    calls this cannot use ``hivemind.DHT`` afterwards.
    """
    if "hivemind" in sys.modules:
        return
    spec = importlib.util.find_spec("hivemind")
    if spec is None or not spec.submodule_search_locations:
        raise TransportError("hivemind is not installed; reinstall swarmnode")
    root = list(spec.submodule_search_locations)[0]
    packages = {}
    for name, sub in (("hivemind", ""), ("hivemind.utils", "utils"), ("hivemind.dht", "dht")):
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(root, sub) if sub else root]
        module.__package__ = name
        sys.modules[name] = packages[name] = module
    utils = packages["hivemind.utils"]
    for sub in _UTILS_EXPORTS:
        exported = importlib.import_module(f"hivemind.utils.{sub}")
        for attr in dir(exported):
            if not attr.startswith("_") and not hasattr(utils, attr):
                setattr(utils, attr, getattr(exported, attr))


class HivemindServer(Transport):
    """A DHT server for the swarm's records; see the module doc. ``private`` is refused: a
    server must be reachable."""

    name = "hivemind"

    def __init__(self, identity: NodeIdentity, swarm: str, bootstrap: Sequence[str] = (),
                 listen: str | None = None, announce: str | None = None):
        super().__init__(identity, swarm, bootstrap, listen, announce)
        self._node: Any = None
        self._addresses: list[str] = []

    async def _start(self) -> None:
        import_dht_without_torch()
        from hivemind.dht.node import DHTNode
        from hivemind.dht.validation import CompositeValidator

        from swarmnode.swarm.transport.hivemind_dht import SwarmRecordValidator, _write_private

        spool = tempfile.mkdtemp(prefix="swarmnode-relay-")
        key_file = os.path.join(spool, "identity.key")
        kwargs: dict[str, Any] = {"host_maddrs": [self.listen], "identity_path": key_file}
        if self.announce:
            kwargs["announce_maddrs"] = [self.announce]
        try:
            _write_private(key_file, self.identity.private_key_protobuf())
            self._node = await DHTNode.create(
                initial_peers=[], client_mode=False,
                record_validator=CompositeValidator([SwarmRecordValidator(self.swarm)]), **kwargs)
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
        from swarmnode.swarm.transport.hivemind_dht import _join

        return self._node is not None and await _join(None, self._node, maddr=maddr)

    def peers(self) -> list[str]:
        """The DHT servers in this node's routing table (DHT clients, such as nodes behind NAT,
        are never listed there)."""
        if self._node is None:
            return []
        return [str(peer) for peer in self._node.protocol.routing_table.peer_id_to_uid]

    def addresses(self) -> list[str]:
        return list(self._addresses)
