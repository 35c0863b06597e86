"""What runs inside hivemind's DHT process for the ``hivemind`` transport.

hivemind's DHT runs in a forked process and takes calls over a pipe: ``DHT.run_coroutine``
runs ``coro(dht, node)`` there. These are those coroutines, at module level so the pipe can
pickle them, each wrapped in :func:`guarded` by the transport. Bundles go to the DHT process
by file (:func:`write_private`, read back by :func:`store_round`): it reads its command pipe
non-blocking and fails on messages larger than the pipe buffer. The relay's DHT server
(:mod:`~swarmnode.swarm.transport.hivemind.server`) runs :func:`join` on its own event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from typing import Any, Awaitable, Callable

from hivemind.dht.node import DHTNode
from hivemind.p2p import PeerID
from hivemind.utils import ValueWithExpiration, get_dht_time
from hivemind.utils.multiaddr import Multiaddr

from swarmnode.compat.hivemind import (
    connect,
    guard_routing_table,
    local_storage,
    nearest_replicas,
    node_p2p,
    ping,
    replace_storage,
    routed_peers,
    store_subkey_at,
    table_nearest,
)
from swarmnode.swarm.transport.counters import AnnounceStores, TransportCounters
from swarmnode.swarm.transport.hivemind.announce import ShardReplicas
from swarmnode.swarm.transport.hivemind.layout import (
    announce_expiry,
    announce_key,
    announcement_age,
    bundle_expiry,
    bundle_key,
    shard_of,
)
from swarmnode.swarm.transport.hivemind.reads import (
    FETCH_TO_FIRST_COPY,
    READ_TO_FIRST_COPY,
    get_workers,
    sufficient_expiration,
)
from swarmnode.swarm.transport.hivemind.records import COUNTS, READING, SwarmRecordValidator
from swarmnode.swarm.transport.hivemind.storage import bounded_storage

CALL_TIMEOUT = 30.0
DIAL_TIMEOUT = 5.0
# The replicas of the shard this DHT process announces into, by announcement key: a node
# announces into its own shard only, so this holds one entry.
SHARD_REPLICAS: dict[str, ShardReplicas[PeerID]] = {}


def write_private(path: str, data: bytes) -> None:
    """Write ``data`` to a new file at ``path`` only this user can read (it must not exist)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


async def bound_storage(_dht: Any, node: DHTNode, *, checker: SwarmRecordValidator) -> None:
    """Bound what ``node`` holds and sends of the swarm's records (see :func:`bound_node`)."""
    bound_node(node, checker)


def bound_node(node: DHTNode, checker: SwarmRecordValidator) -> None:
    """Put :func:`~swarmnode.swarm.transport.hivemind.storage.bounded_storage` (checking what
    it keeps with ``checker``, the swarm's validator) in place of the DHT protocol's unbounded
    storage and cache; hold each peer at one node id in its routing table, and stop its
    copying of everything it holds to each node id it has not met
    (:func:`~swarmnode.compat.hivemind.guard_routing_table`)."""
    replace_storage(node, *bounded_storage(checker))
    guard_routing_table(node)


async def counters(_dht: Any, node: DHTNode) -> TransportCounters:
    """The DHT process's refusal and eviction counters, what its storage holds, and how its
    announcements were stored (:func:`announce_stores`)."""
    return dataclasses.replace(storage_counters(node), announce_stores=announce_stores())


def announce_stores() -> AnnounceStores:
    """:meth:`~swarmnode.swarm.transport.hivemind.announce.ShardReplicas.stores` of this
    process, over its shards (one once it has announced; zeros before)."""
    return sum((replicas.stores() for replicas in SHARD_REPLICAS.values()), AnnounceStores())


def storage_counters(node: DHTNode) -> TransportCounters:
    """``COUNTS`` of this process, the bytes ``node``'s storage and cache hold, and the
    storage's bytes and signers by standing (newcomers, established), bundles' and
    announcements' apart."""
    storage, cache = local_storage(node)
    return TransportCounters(refused=dict(COUNTS.refused), evicted=COUNTS.evicted,
                             stored_bytes={"stored": storage.total, "cached": cache.total},
                             room=storage.room.stats(), announce_room=storage.announcements.stats())


async def visible_addresses(_dht: Any, node: DHTNode) -> list[str]:
    return [str(m) for m in await node.get_visible_maddrs()]


async def guarded(dht: Any, node: DHTNode, *, coro: Callable[[Any, DHTNode], Awaitable[Any]]) -> tuple[bool, Any]:
    """Run ``coro`` in the DHT process, returning (ok, result or error text) within
    ``CALL_TIMEOUT``: hivemind would print the traceback of an exception raised there (a
    failed store is routine, not a bug).

    The timeout also keeps the call alive until then. hivemind holds no reference to the task
    it runs a call in, so a call stuck inside hivemind on a future nothing else holds (seen
    in CI right after a node restarted) would be destroyed by the garbage collector
    mid-await, with a GeneratorExit traceback; the timer's reference turns that into an
    ordinary failed call.
    """
    try:
        return True, await asyncio.wait_for(coro(dht, node), CALL_TIMEOUT)
    except asyncio.TimeoutError:
        return False, f"no answer within {CALL_TIMEOUT:.0f} s"
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"


async def store_round(_dht: Any, node: DHTNode, *, swarm: str, peer_id: str, round_no: int, path: str,
                      created: float) -> None:
    """Store the bundle in file ``path`` (removed once read) as ``peer_id``'s ``round_no``,
    made at ``created``, then announce that round; RuntimeError if no DHT node took either.
    ``swarm`` here and in the reads: what the record keys are made of, the swarm's name or a
    private swarm's keyed name (``SwarmRecordValidator.space``).

    The bundle record's key is new every round: a traversal finds its replicas. The
    announcement goes straight to the shard's replicas its last traversal found, or by a
    traversal, as :class:`~swarmnode.swarm.transport.hivemind.announce.ShardReplicas` rules."""
    with open(path, "rb") as fh:
        data = fh.read()
    os.unlink(path)
    now = get_dht_time()
    # The bundle first: once a reader sees the announcement, the record it names is already stored.
    # Its expiry is bound to the signed creation time (validators refuse a later one). Stored
    # as DHTNode.store stores (a traversal, then a StoreRequest to each replica), but counting
    # every replica's answer: DHTNode.store reports the answer of the replica that answered
    # last, so one node that refuses the record (of another swarm, or outside a private one)
    # would make a record its replicas hold look refused.
    key = bundle_key(swarm, peer_id, round_no)
    replicas = [peer for _, peer in await nearest_replicas(node, key)]
    if not await store_subkey_at(node, replicas, key, peer_id, data, bundle_expiry(created)):
        raise RuntimeError("no DHT node accepted the bundle record")
    await announce(node, announce_key(swarm, shard_of(peer_id)), peer_id, round_no, announce_expiry(now))


async def announce(node: DHTNode, key: str, peer_id: str, round_no: int, expiration: float) -> None:
    """Store ``peer_id``'s announcement of ``round_no`` under ``key`` (its shard), straight at
    the replicas remembered for it or by a traversal; RuntimeError if no DHT node took it."""
    replicas = SHARD_REPLICAS.setdefault(key, ShardReplicas())
    targets = replicas.targets(table_nearest(node, key))
    held: set[PeerID] = set()
    if targets is not None:
        held = await store_subkey_at(node, list(targets), key, peer_id, round_no, expiration)
        if replicas.direct_done(held):
            return
    # A traversal: find the replicas as hivemind's store does (every node visited answers
    # with the shard), then store at them. Those that took the direct store already hold
    # this record (and would refuse it again as too frequent).
    found = await nearest_replicas(node, key)
    accepted = held | await store_subkey_at(node, [p for _, p in found if p not in held], key, peer_id, round_no,
                                            expiration)
    replicas.traversed(found, accepted)
    if not accepted:
        raise RuntimeError("no DHT node accepted the announcement")


async def read_announcements(_dht: Any, node: DHTNode, *, swarm: str, shards: list[int]
                             ) -> tuple[dict[str, tuple[int, float]], dict[int, int], list[str]]:
    """The announcements in ``shards`` (peer -> (round, seconds since it was stored, by its
    signed expiry)), the shards whose read found a copy with the subkeys it held, and the
    peers connected now."""
    announced: dict[str, tuple[int, float]] = {}
    answered: dict[int, int] = {}
    READING.set(True)  # this task only: the lookups check every record whole
    if shards:
        enough = sufficient_expiration(READ_TO_FIRST_COPY, get_dht_time())
        keys = {announce_key(swarm, s): s for s in shards}
        found = await node.get_many(list(keys), sufficient_expiration_time=enough,
                                    num_workers=get_workers(len(keys), READ_TO_FIRST_COPY))
        now = get_dht_time()
        for key, result in found.items():
            if not isinstance(result, ValueWithExpiration) or not hasattr(result.value, "items"):  # None: not found
                continue
            answered[keys[key]] = len(result.value)
            for subkey, item in result.value.items():
                if isinstance(subkey, str) and type(item.value) is int:
                    announced[subkey] = (item.value, announcement_age(item.expiration_time, now))
    # A peer counts once it is in the DHT's routing table, not when p2pd merely holds a
    # connection to it: p2pd accepts connections before the DHT on top of it answers (a peer
    # mid-start), and its own libp2p DHT connects peers hivemind's DHT never heard of. Taking
    # such a connection for a join, a node would never ping again and never exchange a record.
    routed = routed_peers(node)
    peers = [str(info.peer_id) for info in await node_p2p(node).list_peers() if info.peer_id in routed]
    return announced, answered, peers


async def fetch_bundles(_dht: Any, node: DHTNode, *, swarm: str,
                        wanted: list[tuple[str, int]]) -> list[tuple[str, int, bytes]]:
    """The bundle records of the (peer, round) pairs ``wanted`` that were found."""
    keys = {bundle_key(swarm, peer, r): (peer, r) for peer, r in wanted}
    READING.set(True)  # this task only: the lookups check every record whole
    found = await node.get_many(list(keys),
                                sufficient_expiration_time=sufficient_expiration(FETCH_TO_FIRST_COPY, get_dht_time()),
                                num_workers=get_workers(len(keys), FETCH_TO_FIRST_COPY))
    records = []
    for key, result in found.items():
        peer, round_no = keys[key]
        if not isinstance(result, ValueWithExpiration) or not hasattr(result.value, "items"):  # None: not found
            continue
        records.extend((peer, round_no, item.value) for subkey, item in result.value.items()
                       if subkey == peer and isinstance(item.value, bytes))
    return records


async def join(_dht: Any, node: DHTNode, *, maddr: str) -> bool:
    """Connect ``node`` to the peer at ``maddr`` (ending in /p2p/<PeerID>) and ping its DHT;
    True once it answered. Never raises."""
    try:
        address = Multiaddr(maddr)
        peer = PeerID.from_base58(address["p2p"])
        await asyncio.wait_for(connect(node, peer, [address.decapsulate(Multiaddr(f"/p2p/{peer}"))]),
                               DIAL_TIMEOUT)
        if not await ping(node, peer):
            return False
    except Exception:
        return False
    # Learn the rest of the swarm from the new neighbour, as hivemind's own bootstrap does; a
    # slow search is cancelled rather than left running as a task nothing references.
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(node.find_nearest_nodes([node.node_id]), DIAL_TIMEOUT)
    return True
