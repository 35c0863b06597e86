"""hivemind internals that the hivemind transport relies on, each behind one function.

Only the hivemind transport's modules that run hivemind (in ``swarmnode.swarm.transport.hivemind``:
``transport``, ``server``, ``records``, ``storage`` and ``dht_process``) may import this module:
it imports hivemind, which cannot share a process with py-libp2p (see :mod:`swarmnode.compat`).
The functions taking a ``DHTNode`` run inside hivemind's DHT process (``DHT.run_coroutine``).
Every contract was checked on the releases in :data:`CHECKED_ON` by ``tests/test_compat.py``
and the transport contract tests (``nearest_replicas``, ``store_subkey_at`` and ``table_nearest`` by
``tests/test_hivemind_announce.py``); ``pyproject.toml`` admits exactly :data:`CHECKED_RANGE`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import os
import signal
import threading
import time
from collections.abc import Collection, Sequence
from typing import Any

from hivemind.dht.node import DHTNode
from hivemind.dht.routing import DHTID
from hivemind.dht.storage import DHTLocalStorage, DictionaryDHTValue
from hivemind.dht.validation import DHTRecord
from hivemind.p2p import P2P, PeerID
from hivemind.utils.multiaddr import Multiaddr

__all__ = ["CHECKED_ON", "CHECKED_RANGE", "DHTID", "DHTLocalStorage", "DictionaryDHTValue", "compact_expirations",
           "connect", "guard_routing_table", "local_storage", "nearest_replicas", "node_p2p", "ping", "record_key_id",
           "replace_storage", "routed_peers", "start_dht", "store_subkey_at", "table_nearest"]

# The hivemind releases pyproject.toml admits, and the ones these contracts were run on.
CHECKED_RANGE = ">=1.1.11,<1.2"
CHECKED_ON = ("1.1.12",)


def start_dht(**kwargs: Any) -> Any:
    """``hivemind.DHT(start=True, **kwargs)``, its process and p2pd in a session of their own
    that ends with this process.

    A signal to this process's group (Ctrl-C in a terminal, ``timeout``, ``kill -- -PGID``)
    then reaches only this process, which stops the DHT in order; otherwise p2pd would exit
    at once and every DHT call fail while the node still runs. Once this process is gone
    (killed, even by SIGKILL to its group), the DHT process sends SIGTERM to its own group,
    itself and p2pd, within a second; from its first moment, so a node killed mid-start
    leaves nothing running either.

    Contract (checked on 1.1.12): ``hivemind.DHT`` is a forked ``multiprocessing.Process``
    whose ``run()`` runs in the child and starts p2pd there, as its child, in its process
    group. p2pd cannot be shielded in place: the DHT process spawns it through uvloop, which
    resets the signal mask and handlers of the child (a blocked or ignored SIGINT does not
    reach p2pd), and p2pd exits on SIGINT and SIGTERM. hivemind leaves SIGTERM in the DHT
    process as the fork found it.
    """
    from hivemind import (
        DHT,  # not at import: the relay imports this module with a torch-less hivemind
    )

    parent = os.getpid()

    class SessionDHT(DHT):
        def run(self) -> None:
            os.setsid()
            # The fork inherits the node's asyncio handler, with which SIGTERM (hivemind's own
            # fallback, and _end_with's) would be swallowed here.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            threading.Thread(target=_end_with, args=(parent,), name="end-with-node", daemon=True).start()
            super().run()

    return SessionDHT(start=True, **kwargs)


def _end_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os.killpg(0, signal.SIGTERM)


def record_key_id(key: str) -> bytes:
    """The bytes a record validator sees as ``DHTRecord.key`` for records stored under ``key``.

    Contract (checked on 1.1.12): ``DHTNode.store(key, ...)`` addresses the record by
    ``DHTID.generate(source=key)`` and hands validators its ``to_bytes()``.
    """
    return DHTID.generate(source=key).to_bytes()


async def connect(node: DHTNode, peer: PeerID, addresses: Sequence[Multiaddr]) -> None:
    """Have ``node``'s p2pd open a connection to ``peer`` at ``addresses`` (without /p2p/), or raise.

    Contract (checked on 1.1.12): ``node.p2p._client`` is the p2pd control client, whose
    ``connect(peer_id, maddrs)`` dials and raises when no address answers. hivemind's public
    API connects only to the initial peers given at start-up.
    """
    # P2P.create sets _client; the None its __init__ leaves is all a type checker sees
    await node_p2p(node)._client.connect(peer, list(addresses))  # pyright: ignore[reportAttributeAccessIssue]


def node_p2p(node: DHTNode) -> P2P:
    """The ``P2P`` (hivemind's p2pd) that ``node`` talks through.

    Contract (checked on 1.1.12): ``DHTNode.create`` sets ``node.p2p``; as it does so outside
    ``__init__``, the class declares no such attribute for a type checker.
    """
    return node.p2p  # pyright: ignore[reportAttributeAccessIssue]  # set by DHTNode.create, see above


async def ping(node: DHTNode, peer: PeerID) -> bool:
    """True when ``peer``'s DHT answered a ping; it then joins ``node``'s routing table.

    Contract (checked on 1.1.12): ``node.protocol.call_ping(peer)`` returns the peer's DHTID,
    or None when it did not answer (errors are logged and swallowed), and schedules adding an
    answering peer to the routing table as a task of the DHT's loop (done moments later).
    """
    return await node.protocol.call_ping(peer) is not None


async def nearest_replicas(node: DHTNode, key: str) -> list[tuple[int, PeerID]]:
    """The peers a store of ``key`` lands at now, nearest first, with their distance to the
    key: ``node``'s own PeerID among them when it is one. A traversal, costing what a store's
    costs (each node visited answers with the value it holds).

    Contract (checked on 1.1.12): ``DHTNode.store`` addresses ``key`` as
    ``DHTID.generate(source=key)`` and stores at the ``node.num_replicas`` nearest nodes
    ``node.find_nearest_nodes([id], k_nearest=...)`` returns (``{id: {DHTID: PeerID}}``,
    nearest first, the node itself included unless ``exclude_self``); ``id.xor_distance(other)``
    is an int.
    """
    key_id = DHTID.generate(source=key)
    found = await node.find_nearest_nodes([key_id], k_nearest=node.num_replicas)
    return [(_distance(key_id, n), p) for n, p in found[key_id].items()]


def table_nearest(node: DHTNode, key: str) -> list[tuple[int, PeerID]]:
    """(distance to the key, peer) of the ``node.num_replicas`` peers nearest ``key`` that
    ``node``'s routing table holds, ``node`` itself among them when nearer; no request.

    Contract (checked on 1.1.12): ``node.protocol.routing_table.get_nearest_neighbors(id, k,
    exclude=node.node_id)`` returns up to ``k`` (DHTID, PeerID) pairs of the table, nearest
    first, not the node itself; a peer that failed a request is dropped from the table.
    """
    key_id = DHTID.generate(source=key)
    k = node.num_replicas
    near = node.protocol.routing_table.get_nearest_neighbors(key_id, k, exclude=node.node_id)
    ranked = sorted([*near, (node.node_id, node.peer_id)], key=lambda entry: _distance(key_id, entry[0]))
    return [(_distance(key_id, n), p) for n, p in ranked[:k]]


def _distance(a: DHTID, b: DHTID) -> int:
    distance = a.xor_distance(b)
    assert isinstance(distance, int), "xor_distance of one DHTID is an int (a list only for a sequence of them)"
    return distance


async def store_subkey_at(node: DHTNode, peers: Sequence[PeerID], key: str, subkey: Any, value: Any,
                          expiration: float) -> set[PeerID]:
    """Store ``value`` under ``key``'s ``subkey`` until ``expiration`` at exactly ``peers`` (at
    once, no traversal: nothing but an acknowledgement comes back), ``node`` itself when
    among them; returns the peers that stored it. A peer that refused, failed or did not
    answer within the DHT's ``wait_timeout`` is not among them.

    Contract (checked on 1.1.12), as ``DHTNode.store_many`` stores: the record is
    ``DHTRecord(id.to_bytes(), serializer.dumps(subkey), serializer.dumps(value),
    expiration)`` with ``id = DHTID.generate(source=key)``, its value replaced by
    ``protocol.record_validator.sign_value(record)``; ``protocol.call_store(peer, keys=[id],
    values=[signed], expiration_time=[expiration], subkeys=[subkey])`` serializes the subkey
    itself and returns ``[ok]``, or None when the peer did not answer (dropping it from the
    routing table, so the next traversal does not count on it); the node's own copy goes to
    ``protocol.storage.store(id, signed, expiration, subkey=subkey)`` once
    ``record_validator.validate(record)`` accepted it.
    """
    protocol = node.protocol
    key_id = DHTID.generate(source=key)
    record = DHTRecord(key_id.to_bytes(), protocol.serializer.dumps(subkey), protocol.serializer.dumps(value),
                       expiration)
    validator = protocol.record_validator
    if validator is not None:
        record = dataclasses.replace(record, value=validator.sign_value(record))

    async def store_at(peer: PeerID) -> bool:
        if peer == node.peer_id:
            if validator is not None and not validator.validate(record):
                return False
            return bool(protocol.storage.store(key_id, record.value, expiration, subkey=subkey))
        ok = await protocol.call_store(peer, keys=[key_id], values=[record.value], expiration_time=[expiration],
                                       subkeys=[subkey])
        return bool(ok and ok[0])

    results = await asyncio.gather(*(store_at(p) for p in peers), return_exceptions=True)
    return {p for p, ok in zip(peers, results) if ok is True}


def routed_peers(node: DHTNode) -> Collection[PeerID]:
    """The peers in ``node``'s DHT routing table (``peer in routed_peers(node)``, or iterate), a live view.

    Contract (checked on 1.1.12): ``node.protocol.routing_table.peer_id_to_uid`` maps every
    peer in the buckets, replacements included, to its DHTID.
    """
    return node.protocol.routing_table.peer_id_to_uid


def replace_storage(node: DHTNode, storage: DHTLocalStorage, cache: DHTLocalStorage) -> None:
    """Have ``node`` keep the records it stores in ``storage`` and those it caches in ``cache``.

    hivemind offers no option for bounding them. Contract (checked on 1.1.12):
    ``node.protocol.storage`` and ``node.protocol.cache`` are plain attributes that
    ``DHTProtocol`` reads on every store and find; a ``DHTLocalStorage`` subclass receives
    every write through ``store`` / ``store_subkey(key, subkey, value, expiration_time)``,
    its ``get(key)`` returns a ``ValueWithExpiration`` whose ``value`` is a
    ``DictionaryDHTValue`` for subkeyed records, and deleting a subkey from that value
    removes the record.
    """
    node.protocol.storage = storage
    node.protocol.cache = cache


def local_storage(node: DHTNode) -> tuple[Any, Any]:
    """``node``'s (storage, cache), as :func:`replace_storage` set them."""
    return node.protocol.storage, node.protocol.cache


def compact_expirations(storage: Any) -> int:
    """Drop the stale entries of a hivemind ``TimedStorage``'s expiration heap (a
    ``DHTLocalStorage`` or a ``DictionaryDHTValue``) when they outnumber the live ones;
    returns how many went.

    hivemind pushes a heap entry on every store, refreshes and refused older values
    included, and removes a deleted key's entry only when it reaches the top at its
    expiry, so a record re-stored or evicted many times within its lifetime grows the heap
    by one entry each time. Contract (checked on 1.1.12): ``storage.expiration_heap`` is a
    ``heapq`` list of ``HeapEntry``, ``storage.key_to_heap`` maps each live key to its one
    current entry, and an entry not in ``key_to_heap`` is skipped when popped.
    """
    heap, live = storage.expiration_heap, storage.key_to_heap
    if len(heap) <= 2 * len(live) + 64:
        return 0
    stale = len(heap) - len(live)
    heap[:] = list(live.values())
    heapq.heapify(heap)
    return stale


def guard_routing_table(node: DHTNode) -> None:
    """Have ``node`` hold each peer at one node id, and stop sending its stored records to
    every DHT node it meets for the first time.

    A node id is whatever a caller writes in its request, and hivemind adds each one it has
    not seen to the routing table under the caller's PeerID. A stranger claiming a new id in
    every ping, near the keys it wants, then fills the table with ids that all lead to it,
    and every lookup of those keys, the node's own and those of peers that ask it for
    neighbours, stores and reads its records there: one peer takes the keys' replicas and
    can drop or delay them. Here a peer's new id replaces the one it held, so a peer takes
    one place in the table, as many as the PeerIDs (and connections) it brings.

    The copy on meeting: on every request it answers or gets an answer to, hivemind's DHT
    checks whether the other side's node id is new to its routing table; if so, it sends that
    node, in one ``call_store`` built at once, every record it holds that the newcomer is
    nearer to than its own neighbours (all of them while it has none). A peer claiming a new
    id in every ping makes a node serialise its storage again each time and hold it until
    sent. This project's records are stored again by their owners every round and read from
    any of the nearest nodes, so nothing depends on that copy.

    Contract (checked on 1.1.12): ``DHTProtocol`` calls ``self.update_routing_table(node_id,
    peer_id, responded)`` (an attribute, looked up per call) for every request; besides that
    copy it resolves a missing ``node_id`` from the routing table, adds a responding node with
    ``routing_table.add_or_update_node`` (which returns a node to ping when its bucket is
    full; pinged with ``call_ping``) and deletes a node that did not respond;
    ``routing_table.get(peer_id=...)`` is the id last added for that peer, and deleting an id
    drops it from its bucket and from both lookups.
    """
    protocol = node.protocol

    async def update_routing_table(node_id: DHTID | None, peer_id: PeerID, responded: bool = True) -> None:
        table = protocol.routing_table
        held = table.get(peer_id=peer_id)
        assert held is None or isinstance(held, DHTID), "get(peer_id=...) looks up a DHTID"
        node_id = node_id if node_id is not None else held
        if responded:
            assert node_id is not None, "hivemind passes the node id of every peer that responded"
            if held is not None and held != node_id and held in table:
                del table[held]
            to_ping = table.add_or_update_node(node_id, peer_id)
            if to_ping is not None:
                asyncio.create_task(protocol.call_ping(to_ping[1]))
        elif node_id is not None and node_id in table:
            del table[node_id]

    protocol.update_routing_table = update_routing_table
