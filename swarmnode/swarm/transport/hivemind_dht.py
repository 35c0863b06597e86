"""The ``hivemind`` transport (the default): bundles as records of a hivemind DHT.

Records, version 2 of the layout (``docs/protocol.md`` section 3), one subkey per peer:

* ``<swarm>/v2/bundle/<PeerID>/<round>``, subkey = that PeerID, value = the signed bundle
  bytes, expiring after :data:`BUNDLE_TTL`. One key per peer and round, so a reader fetches
  exactly the peers it chose and nothing else.
* ``<swarm>/v2/announce/<shard>``, subkey = sender PeerID, value = the sender's latest round
  (an int) signed with the node key over key, subkey, round and expiration. A peer announces
  in one shard only, ``shard_of(PeerID)`` of :data:`ANNOUNCE_SHARDS`, so no key is hot: each
  holds about N / :data:`ANNOUNCE_SHARDS` announcements.

A node's cost per round is bounded whatever the swarm's size (issue 13): it fetches at most
``fetch_per_round`` (K) bundles a round of its own, chosen over the announcing peers by
:class:`~swarmnode.swarm.transport.pull.PullPlan`, and it reads :data:`SHARDS_PER_POLL`
announcement shards a poll only while the plan has too few candidates to spend its budget
on. A chosen round made more than
:data:`~swarmnode.swarm.transport.pull.FRESH_SHARE` of the node's round ago is not
fetched: the bundle key of the peer's next round is looked up when that round is due (the
announcement's signed expiry says when it was stored), so what a node gets is fresh
rather than up to a round old. A fetch of an announced round that finds nothing is never
retried; it is counted against the announcer (``missing_payload``).

:class:`SwarmRecordValidator` runs in every node's DHT and refuses any record a peer could
forge or that this swarm's protocol does not need: a bundle record must be a valid bundle
(:func:`~swarmnode.swarm.bundle.open_envelope`, then
:func:`~swarmnode.swarm.bundle.parse_payload`) signed by the subkey's PeerID, for this swarm,
under the key of its sender and round, expiring no later than its signed ``created`` +
:data:`BUNDLE_TTL` (+ :data:`PUBLISH_SLACK`); an announcement must sit in its signer's shard and
carry the subkey owner's signature, which covers its expiry; no record may expire later than
its kind's TTL (+ :data:`MAX_CLOCK_SKEW`) from now, or exceed its kind's size. Records of the
version 1 layout (``<swarm>/heads``, ``<swarm>/rounds/<round>``) are refused as
``old_version``. hivemind runs the validator on what it stores *and* on what it reads, so it
holds no per-signer state; :class:`BoundedStorage` (installed in the DHT process in place of
hivemind's unbounded storage and cache) bounds bytes per signer and in total. Refusals are
counted in the DHT process and read back with :func:`_counters`.

hivemind's DHT runs in a forked process and talks over a pipe. That process and its p2pd run
in a session of their own (:func:`~swarmnode.compat.hivemind.start_dht`): a signal to the
node's process group (Ctrl-C) reaches only the node, which stops them in order, and they end
by themselves once the node is gone. Every call goes through
:meth:`HivemindTransport._call`, which sends from a worker thread (never blocking the event
loop) under a lock (the pipe is not safe for concurrent writers). The node starts its DHT
without initial peers, which always works and gives it an address at once, then joins the
bootstrap peers from inside the DHT process (connect, ping, fill the routing table); hivemind's
own bootstrap at start-up would instead fail the whole start when no peer answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import logging
import os
import shutil
import struct
import tempfile
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import hivemind
from hivemind.dht.node import DHTNode
from hivemind.dht.validation import DHTRecord, RecordValidatorBase
from hivemind.p2p import PeerID
from hivemind.utils import MSGPackSerializer, get_dht_time
from hivemind.utils.multiaddr import Multiaddr

from swarmnode.compat.hivemind import (
    DHTID,
    DHTLocalStorage,
    DictionaryDHTValue,
    connect,
    local_storage,
    ping,
    record_key_id,
    replace_storage,
    routed_peers,
    start_dht,
)
from swarmnode.swarm.bundle import BundleRejected, open_envelope, parse_payload
from swarmnode.swarm.identity import public_key_from_peer_id, verify_signature
from swarmnode.swarm.transport.base import (
    MAX_MESSAGE_BYTES,
    Backoff,
    NodeIdentity,
    Transport,
    TransportError,
)
from swarmnode.swarm.transport.pull import (
    ANNOUNCE_TTL,
    FETCH_PER_ROUND,
    FRESH_SHARE,
    PullPlan,
)

log = logging.getLogger("swarmnode.swarm.transport")

BUNDLE_TTL = 300.0
POLL_INTERVAL = 1.0
DHT_SHUTDOWN_S = 10.0
LAYOUT_VERSION = 2
ANNOUNCE_DOMAIN = b"swarmnode-announce-v2\x00"
# 16 divides 256, so one byte of a PeerID's hash picks a shard without bias.
ANNOUNCE_SHARDS = 16
SHARDS_PER_POLL = 4
_SIGNATURE = 64
_CALL_TIMEOUT = 30.0
_DIAL_TIMEOUT = 5.0
# How far a writer's clock may run ahead of this node's, for record expirations.
MAX_CLOCK_SKEW = 30.0
# Peers before the signed-expiry rule set a bundle record's expiry to "now + TTL" when they
# store it, a moment after the bundle was created; this much later than created + TTL is allowed.
PUBLISH_SLACK = 60.0
MAX_ANNOUNCE_BYTES = 96  # a msgpack int (at most 9 bytes) and the 64-byte signature, with room
MAX_BUNDLE_RECORD_BYTES = MAX_MESSAGE_BYTES + 16  # a bundle in a msgpack bin
STORAGE_BYTES = 24 * 1024 * 1024  # this node's share of the swarm's records
CACHE_BYTES = 8 * 1024 * 1024  # records peers ask this node to cache
SIGNER_BYTES = 1024 * 1024  # one signer's records in either (a few large bundles, hundreds of usual ones)
# Signers held under one key (an announcement shard holds one per peer of the shard): every
# read of a key returns all of them, and every store traverses nodes that return them, so
# this bounds what a crowd of keys makes each read cost. Signers already held may always
# refresh their record.
SUBKEYS_PER_KEY = 1024
ENTRY_OVERHEAD = 512  # bytes a stored record costs beyond its value (keys, expiry, Python objects)
_RECENT_PEERS = 32  # peers fetched lately whose shards a poll reads first
_ANNOUNCED_MEMORY = ANNOUNCE_SHARDS * SUBKEYS_PER_KEY  # every announcement the shards can hold
# A record is replaced only by one expiring this much later: hivemind keeps a heap entry per
# store until it expires, so each record's re-stores are held to 1 / _MIN_REFRESH a second.
_MIN_REFRESH = 0.25
_VERIFIED_CACHE = 65_536  # announcements already checked (a shard is re-read while candidates are few)

# Counters of the process the validator and storage run in (the DHT process), read back by
# ``_counters``: refusals by reason, records evicted to keep within budget.
_COUNTS: Counter[str] = Counter()


def _refuse(reason: str) -> bool:
    _COUNTS["refused_" + reason] += 1
    return False


def bundle_key(swarm: str, peer_id: str, round_no: int) -> str:
    return f"{swarm}/v{LAYOUT_VERSION}/bundle/{peer_id}/{round_no}"


def announce_key(swarm: str, shard: int) -> str:
    return f"{swarm}/v{LAYOUT_VERSION}/announce/{shard}"


def shard_of(peer_id: str) -> int:
    """The one announcement shard of ``peer_id``."""
    return hashlib.sha256(peer_id.encode()).digest()[0] % ANNOUNCE_SHARDS


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


class SwarmRecordValidator(RecordValidatorBase):
    """Accepts only records this swarm's protocol writes, each within its bounds (see the
    module doc); refusals are counted by reason (``far_expiry``, ``too_large``,
    ``bad_signature``, ``bad_envelope``, ``not_a_bundle``, ``foreign_key``, ``wrong_shard``,
    ``old_version``, ``unsigned_expiry``, ``malformed``).

    ``identity`` (the local node's) signs the local node's announcements; a validator without
    one only checks. Stateless but for a memory of announcements already found valid (a
    shard is re-read while candidates are few; its signatures are not checked again).
    """

    def __init__(self, swarm: str, identity: NodeIdentity | None = None):
        self.swarm = swarm
        self._shards = {record_key_id(announce_key(swarm, shard)): shard for shard in range(ANNOUNCE_SHARDS)}
        self._old_heads_id = record_key_id(f"{swarm}/heads")
        self._identity = identity
        self._own_subkey = MSGPackSerializer.dumps(identity.peer_id) if identity is not None else None
        self._verified: OrderedDict[tuple[bytes, bytes, float], None] = OrderedDict()

    def __getstate__(self) -> dict:  # the memory stays behind when the validator goes to the DHT process
        return {**self.__dict__, "_verified": OrderedDict()}

    def validate(self, record: DHTRecord) -> bool:
        try:
            return self._validate(record)
        except Exception:  # any malformed field from a peer is a refusal, never an error
            return _refuse("malformed")

    def _validate(self, record: DHTRecord) -> bool:
        if record.key == self._old_heads_id:
            return _refuse("old_version")
        shard = self._shards.get(record.key)
        announcement = shard is not None
        if len(record.value) > (MAX_ANNOUNCE_BYTES if announcement else MAX_BUNDLE_RECORD_BYTES):
            return _refuse("too_large")
        # Checked before the cache: what was valid stays valid as time passes, except this.
        ttl = ANNOUNCE_TTL if announcement else BUNDLE_TTL
        if record.expiration_time > get_dht_time() + ttl + MAX_CLOCK_SKEW:
            return _refuse("far_expiry")
        if shard is None:
            return self._check_bundle(record)
        seen = (record.subkey, record.value, record.expiration_time)  # small: at most 96 bytes
        if seen in self._verified:
            self._verified.move_to_end(seen)
            return True
        ok = self._check_announcement(record, shard)
        if ok:
            self._verified[seen] = None
            while len(self._verified) > _VERIFIED_CACHE:
                self._verified.popitem(last=False)
        return ok

    def _check_announcement(self, record: DHTRecord, shard: int) -> bool:
        subkey = MSGPackSerializer.loads(record.subkey)
        body, signature = record.value[:-_SIGNATURE], record.value[-_SIGNATURE:]
        if (not isinstance(subkey, str) or len(signature) != _SIGNATURE
                or type(MSGPackSerializer.loads(body)) is not int):
            return _refuse("malformed")
        if shard_of(subkey) != shard:  # one shard a peer, or a key could buy a place in every shard
            return _refuse("wrong_shard")
        if not verify_signature(public_key_from_peer_id(subkey), self._signed_message(record, body), signature):
            return _refuse("bad_signature")
        return True

    def _check_bundle(self, record: DHTRecord) -> bool:
        subkey = MSGPackSerializer.loads(record.subkey)
        value = MSGPackSerializer.loads(record.value)
        if not isinstance(subkey, str) or not isinstance(value, bytes):
            return _refuse("malformed")
        try:
            sender, payload = open_envelope(value)
        except BundleRejected:
            return _refuse("bad_envelope")
        try:
            bundle = parse_payload(payload, "")
        except BundleRejected:
            return _refuse("not_a_bundle")
        if sender != subkey or bundle.swarm != self.swarm:
            return _refuse("foreign_key")
        if record.key != record_key_id(bundle_key(self.swarm, sender, bundle.round)):
            old = record.key == record_key_id(f"{self.swarm}/rounds/{bundle.round}")
            return _refuse("old_version" if old else "foreign_key")
        # The record's expiry is not signed; the bundle's creation time is.
        if record.expiration_time > bundle.created + BUNDLE_TTL + PUBLISH_SLACK:
            return _refuse("unsigned_expiry")
        return True

    def sign_value(self, record: DHTRecord) -> bytes:
        if self._identity is not None and record.key in self._shards and record.subkey == self._own_subkey:
            return record.value + self._identity.sign(self._signed_message(record, record.value))
        return record.value

    def strip_value(self, record: DHTRecord) -> bytes:
        return record.value[:-_SIGNATURE] if record.key in self._shards else record.value

    @staticmethod
    def _signed_message(record: DHTRecord, body: bytes) -> bytes:
        return ANNOUNCE_DOMAIN + record.key + record.subkey + struct.pack(">d", record.expiration_time) + body


class BoundedStorage(DHTLocalStorage):
    """hivemind's local DHT storage within ``budget`` bytes and ``per_signer`` bytes a signer
    (the subkey: every record this swarm stores is signed by its subkey's PeerID).

    Over a signer's bound, that signer's records expiring first leave; over the budget, the
    records expiring first of the signer holding the most bytes leave (the writer's own, if it
    would then hold the most; if it has none, the record is refused), so every signer keeps at
    least an equal share of the room whatever a crowd of keys stores. Only subkeyed
    records are stored (the validator admits no other), and a record is replaced only by one
    expiring at least :data:`_MIN_REFRESH` later, so re-storing one record cannot grow
    hivemind's heaps faster than that. At most ``per_key`` signers are held under one key;
    a new one beyond is refused until some expire. Counted in ``_COUNTS``: ``evicted``,
    ``refused_*``.
    """

    def __init__(self, budget: int, per_signer: int, per_key: int = SUBKEYS_PER_KEY):
        super().__init__()
        self.budget, self.per_signer, self.per_key = budget, per_signer, per_key
        self.total = 0
        self._subkeys: Counter[DHTID] = Counter()  # signers held under each key
        self._held: dict[str, dict[DHTID, tuple[int, float]]] = {}  # signer -> key -> (bytes, expiration)
        self._signer_bytes: Counter[str] = Counter()
        self._heap: list[tuple[int, str]] = []  # (-bytes, signer), stale entries skipped on pop
        self._purged_at = 0.0

    def store(self, key: DHTID, value: Any, expiration_time: float, subkey: Any = None) -> bool:
        if subkey is None:
            return _refuse("not_subkeyed")
        return self.store_subkey(key, subkey, value, expiration_time)

    def store_subkey(self, key: DHTID, subkey: Any, value: bytes, expiration_time: float) -> bool:
        if not isinstance(subkey, str) or not isinstance(value, bytes):
            return _refuse("malformed")
        size = len(value) + len(subkey) + ENTRY_OVERHEAD
        old = self._held.get(subkey, {}).get(key)
        if old is not None and expiration_time < old[1] + _MIN_REFRESH:
            return _refuse("too_frequent")
        if size > self.per_signer:
            return _refuse("too_large")
        if old is None and self._subkeys[key] >= self.per_key:
            return _refuse("key_full")  # the signers already held keep their place
        self._purge_expired()
        old_size = old[0] if old else 0
        while self._signer_bytes[subkey] - old_size + size > self.per_signer:
            if not self._evict_first(subkey, keep=key):
                return _refuse("signer_full")
        while self.total - old_size + size > self.budget:
            victim = self._largest()
            if victim is None or self._signer_bytes[subkey] - old_size + size >= self._signer_bytes[victim]:
                victim = subkey  # the writer would hold the most: it makes room from its own records
            if not self._evict_first(victim, keep=key):
                return _refuse("storage_full")
        if not super().store_subkey(key, subkey, value, expiration_time):
            return False
        self._account(subkey, key, size, expiration_time)
        return True

    def _account(self, signer: str, key: DHTID, size: int, expiration: float | None) -> None:
        """Set (or with ``expiration`` None, drop) what ``signer`` holds under ``key``."""
        held = self._held.setdefault(signer, {})
        old = held.pop(key, None)
        self._subkeys[key] += (expiration is not None) - (old is not None)
        if not self._subkeys[key]:
            del self._subkeys[key]
        delta = (size if expiration is not None else 0) - (old[0] if old else 0)
        if expiration is not None:
            held[key] = (size, expiration)
        if not held:
            del self._held[signer]
        self.total += delta
        self._signer_bytes[signer] += delta
        if self._signer_bytes[signer] <= 0:
            del self._signer_bytes[signer]
        else:
            heapq.heappush(self._heap, (-self._signer_bytes[signer], signer))

    def _largest(self) -> str | None:
        while self._heap:
            neg, signer = self._heap[0]
            if self._signer_bytes.get(signer) == -neg:
                return signer
            heapq.heappop(self._heap)
        return None

    def _evict_first(self, signer: str, keep: DHTID | None) -> bool:
        """Remove ``signer``'s record expiring first (never the one under ``keep``)."""
        held = {k: v for k, v in self._held.get(signer, {}).items() if k != keep}
        if not held:
            return False
        key = min(held, key=lambda k: held[k][1])
        found = super().get(key)
        if found is not None and isinstance(found.value, DictionaryDHTValue):
            del found.value[signer]
        self._account(signer, key, 0, None)
        _COUNTS["evicted"] += 1
        return True

    def _purge_expired(self) -> None:
        """Forget the accounting of records hivemind has let expire (at most once a second)."""
        now = get_dht_time()
        if now - self._purged_at < 1.0:
            return
        self._purged_at = now
        for signer, held in list(self._held.items()):
            for key, (_, expiration) in list(held.items()):
                if expiration < now:
                    self._account(signer, key, 0, None)


# -- coroutines run inside the DHT process (module level so the pipe can pickle them) --------

async def _bound_storage(_dht: Any, node: DHTNode) -> None:
    """Put :class:`BoundedStorage` in place of the DHT protocol's unbounded storage and cache."""
    replace_storage(node, BoundedStorage(STORAGE_BYTES, SIGNER_BYTES), BoundedStorage(CACHE_BYTES, SIGNER_BYTES))


async def _counters(_dht: Any, node: DHTNode) -> dict[str, int]:
    """The DHT process's refusal and eviction counters, and the bytes its storage holds."""
    storage, cache = local_storage(node)
    held = {"stored_bytes": storage.total, "cached_bytes": cache.total}
    return {**_COUNTS, **held}


async def _visible_addresses(_dht: Any, node: DHTNode) -> list[str]:
    return [str(m) for m in await node.get_visible_maddrs()]


async def _shutdown(dht: hivemind.DHT) -> None:
    """Stop a DHT process for sure.

    hivemind's shutdown waits a grace period, then only sends SIGTERM, which a DHT process
    mid-teardown may not act on; left alive, multiprocessing joins it forever when the node
    exits. So: wait, then kill what is still there."""
    await asyncio.to_thread(dht.shutdown)
    await asyncio.to_thread(dht.join, DHT_SHUTDOWN_S)
    if dht.is_alive():
        log.warning("hivemind transport: the DHT process did not stop in %.0f s; killing it", DHT_SHUTDOWN_S)
        dht.kill()
        await asyncio.to_thread(dht.join)


async def _guarded(dht: Any, node: DHTNode, *, coro: Callable[[Any, DHTNode], Awaitable[Any]]) -> tuple[bool, Any]:
    """Run ``coro`` in the DHT process, returning (ok, result or error text) within
    ``_CALL_TIMEOUT``: hivemind would print the traceback of an exception raised there (a
    failed store is routine, not a bug).

    The timeout also keeps the call alive until then. hivemind holds no reference to the task
    it runs a call in, so a call stuck inside hivemind on a future nothing else holds (seen
    in CI right after a node restarted) would be destroyed by the garbage collector
    mid-await, with a GeneratorExit traceback; the timer's reference turns that into an
    ordinary failed call.
    """
    try:
        return True, await asyncio.wait_for(coro(dht, node), _CALL_TIMEOUT)
    except asyncio.TimeoutError:
        return False, f"no answer within {_CALL_TIMEOUT:.0f} s"
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"


async def _store(_dht: Any, node: DHTNode, *, swarm: str, peer_id: str, round_no: int, path: str,
                 created: float) -> None:
    with open(path, "rb") as fh:
        data = fh.read()
    os.unlink(path)
    now = get_dht_time()
    # The bundle first: once a reader sees the announcement, the record it names is already stored.
    # Its expiry is bound to the signed creation time (validators refuse a later one).
    if not await node.store(bundle_key(swarm, peer_id, round_no), data, created + BUNDLE_TTL, subkey=peer_id):
        raise RuntimeError("no DHT node accepted the bundle record")
    if not await node.store(announce_key(swarm, shard_of(peer_id)), round_no, now + ANNOUNCE_TTL, subkey=peer_id):
        raise RuntimeError("no DHT node accepted the announcement")


async def _read_announcements(_dht: Any, node: DHTNode, *, swarm: str,
                              shards: list[int]) -> tuple[dict[str, tuple[int, float]], list[str]]:
    """The announcements in ``shards`` (peer -> (round, seconds since it was stored, by its
    signed expiry)), and the peers connected now."""
    announced: dict[str, tuple[int, float]] = {}
    if shards:
        found = await node.get_many([announce_key(swarm, s) for s in shards],
                                    sufficient_expiration_time=float("inf"))
        now = get_dht_time()
        for result in found.values():
            if result is None or not hasattr(result.value, "items"):
                continue
            for subkey, item in result.value.items():
                if isinstance(subkey, str) and type(item.value) is int:
                    announced[subkey] = (item.value, max(0.0, now - (item.expiration_time - ANNOUNCE_TTL)))
    # A peer counts once it is in the DHT's routing table, not when p2pd merely holds a
    # connection to it: p2pd accepts connections before the DHT on top of it answers (a peer
    # mid-start), and its own libp2p DHT connects peers hivemind's DHT never heard of. Taking
    # such a connection for a join, a node would never ping again and never exchange a record.
    routed = routed_peers(node)
    peers = [str(info.peer_id) for info in await node.p2p.list_peers() if info.peer_id in routed]
    return announced, peers


async def _fetch_bundles(_dht: Any, node: DHTNode, *, swarm: str,
                         wanted: list[tuple[str, int]]) -> list[tuple[str, int, bytes]]:
    """The bundle records of the (peer, round) pairs ``wanted`` that were found."""
    keys = {bundle_key(swarm, peer, r): (peer, r) for peer, r in wanted}
    found = await node.get_many(list(keys), sufficient_expiration_time=float("inf"))
    records = []
    for key, result in found.items():
        peer, round_no = keys[key]
        if result is None or not hasattr(result.value, "items"):
            continue
        records.extend((peer, round_no, item.value) for subkey, item in result.value.items()
                       if subkey == peer and isinstance(item.value, bytes))
    return records


async def _join(_dht: Any, node: DHTNode, *, maddr: str) -> bool:
    try:
        address = Multiaddr(maddr)
        peer = PeerID.from_base58(address["p2p"])
        await asyncio.wait_for(connect(node, peer, [address.decapsulate(Multiaddr(f"/p2p/{peer}"))]),
                               _DIAL_TIMEOUT)
        if not await ping(node, peer):
            return False
    except Exception:
        return False
    # Learn the rest of the swarm from the new neighbour, as hivemind's own bootstrap does; a
    # slow search is cancelled rather than left running as a task nothing references.
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(node.find_nearest_nodes([node.node_id]), _DIAL_TIMEOUT)
    return True


class HivemindTransport(Transport):
    name = "hivemind"

    def __init__(self, identity: NodeIdentity, swarm: str, bootstrap: Sequence[str] = (),
                 listen: str | None = None, announce: str | None = None, *, poll_interval: float = POLL_INTERVAL,
                 private: bool = False, fetch_per_round: int = FETCH_PER_ROUND):
        """``private``: the node cannot accept inbound connections, so it runs as a DHT client
        (stores and reads at public DHT servers, never listed in a routing table) and reports
        no address. ``fetch_per_round``: K, the most peers' bundles fetched per round of this
        node (0: none, for a node that only serves the DHT)."""
        super().__init__(identity, swarm, bootstrap, listen, announce)
        self.poll_interval = poll_interval
        self.private = private
        self._plan = PullPlan(identity.peer_id, fetch_per_round, memory=_ANNOUNCED_MEMORY, reread=True,
                              fresh=FRESH_SHARE)
        self._shards_seen: set[int] = set()  # shards read since start, until all have been
        self._dht: hivemind.DHT | None = None
        self._send_lock = threading.Lock()
        self._poll_task: asyncio.Task | None = None
        self._peers: list[str] = []
        self._addresses: list[str] = []
        self._shard_order: list[int] = []  # the rest of the current shuffled cycle
        self._dht_counters: dict[str, int] = {}  # the DHT process's _counters, as of the last poll
        self._polls = 0
        self._poll_failed = False
        self._warned_old_version = False
        self._spool: str | None = None  # private directory: the key for p2pd, bundles for the DHT process
        self._spooled = 0

    async def _start(self) -> None:
        self._spool = tempfile.mkdtemp(prefix="swarmnode-dht-")
        try:
            await self._launch()
        except BaseException:
            shutil.rmtree(self._spool, ignore_errors=True)
            raise
        self._poll_task = asyncio.create_task(self._poll_loop(), name="hivemind-poll")

    async def _launch(self) -> None:
        """Start the DHT process on the node key and learn its addresses; TransportError if it cannot."""
        assert self._spool is not None
        key_file = os.path.join(self._spool, "identity.key")
        try:
            _write_private(key_file, self.identity.private_key_protobuf())
            kwargs: dict[str, Any] = {"host_maddrs": [self.listen], "identity_path": key_file}
            if self.announce:
                kwargs["announce_maddrs"] = [self.announce]
            if self.private:
                kwargs["client_mode"] = True
            validator = SwarmRecordValidator(self.swarm, self.identity)
            # No caching of what this node reads: every poll reads fresh, and a cache (here, or
            # pushed to the nearest peers) would only hold and spread what a peer wrote.
            self._dht = await asyncio.to_thread(partial(start_dht, record_validators=[validator],
                                                        cache_locally=False, cache_nearest=0, **kwargs))
        except Exception as exc:
            raise TransportError(f"the hivemind DHT could not start on {self.listen}: {exc}") from None
        finally:
            # p2pd has read the key by now (or failed); keep no second copy on disk.
            with contextlib.suppress(OSError):
                os.unlink(key_file)
        try:
            await self._call(_bound_storage)
            self._addresses = await self._call(_visible_addresses)
            own = self._addresses[0].rsplit("/p2p/", 1)[-1] if self._addresses else ""
            if own != self.identity.peer_id:
                raise TransportError(f"p2pd derived PeerID {own!r} from the node key, expected "
                                     f"{self.identity.peer_id}")
        except Exception as exc:
            dht, self._dht = self._dht, None
            await _shutdown(dht)
            if isinstance(exc, TransportError):
                raise
            raise TransportError(f"the hivemind DHT started but reports no address: {exc!r}") from None

    async def _stop(self) -> None:
        if self._poll_task is not None:
            self._poll_task.cancel()
            await asyncio.gather(self._poll_task, return_exceptions=True)
            self._poll_task = None
        if self._dht is not None:
            dht, self._dht = self._dht, None
            await _shutdown(dht)
        if self._spool is not None:
            shutil.rmtree(self._spool, ignore_errors=True)
        self._peers = []

    async def _publish(self, round_no: int, data: bytes) -> None:
        if len(data) > MAX_MESSAGE_BYTES:
            raise ValueError(f"message of {len(data)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")
        # The bundle goes by file: hivemind's DHT process reads its command pipe non-blocking
        # and fails on messages larger than the pipe buffer (EAGAIN in the middle of one).
        assert self._spool is not None
        self._spooled += 1
        path = os.path.join(self._spool, f"bundle-{self._spooled}")
        await asyncio.to_thread(_write_private, path, data)
        await self._call(partial(_store, swarm=self.swarm, peer_id=self.identity.peer_id, round_no=round_no,
                                 path=path, created=float(open_envelope(data)[1]["created"])))
        self._plan.next_round(time.monotonic())

    async def _dial(self, maddr: str) -> bool:
        try:
            return bool(await self._call(partial(_join, maddr=maddr)))
        except Exception as exc:
            log.debug("hivemind transport: joining through %s failed: %s", maddr, exc)
            return False

    def peers(self) -> list[str]:
        """Connected peers in the DHT's routing table, as of the last poll (see :func:`_read_announcements`)."""
        return list(self._peers)

    def addresses(self) -> list[str]:
        return [] if self.private else list(self._addresses)

    def refusals(self) -> dict[str, int]:
        """The DHT process's counters (:func:`_counters`), read every tenth poll."""
        return dict(self._dht_counters)

    async def _call(self, coro: Callable[[Any, DHTNode], Awaitable[Any]]) -> Any:
        """Run ``coro(dht, node)`` in the DHT process and return its result."""
        dht = self._dht
        if dht is None:
            raise RuntimeError("the DHT is not running")

        def send() -> Any:
            with self._send_lock:
                return dht.run_coroutine(partial(_guarded, coro=coro), return_future=True)

        future = await asyncio.to_thread(send)
        # A margin over the DHT process's own limit, so that side reports a hang first.
        ok, result = await asyncio.to_thread(future.result, _CALL_TIMEOUT + 5.0)
        if not ok:
            raise RuntimeError(result)
        return result

    async def _poll_loop(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self._poll_once()
                self._poll_failed = False
            except Exception as exc:
                if self._stopped:  # stop() cancels this task next; its DHT going away is no news
                    return
                dht = self._dht
                if dht is not None and not dht.is_alive():
                    await self._relaunch(dht)
                    continue
                if not self._poll_failed:  # one line per outage, not one per second
                    log.warning("hivemind transport: reading the swarm's records failed: %r", exc)
                self._poll_failed = True
            # A poll that took long (large shards) is followed by as long a pause: the
            # DHT process serves one call at a time, and publishing must not wait behind polls.
            await asyncio.sleep(max(self.poll_interval, time.monotonic() - started))

    async def _relaunch(self, dead: hivemind.DHT) -> None:
        """Replace a DHT process that died; the join loop then finds the swarm again."""
        log.error("hivemind transport: the DHT process exited (code %s); starting a new one", dead.exitcode)
        self._dht, self._peers = None, []
        await _shutdown(dead)
        backoff = Backoff()
        while self._dht is None:
            try:
                await self._launch()
            except TransportError as exc:
                log.error("hivemind transport: %s", exc)
                await asyncio.sleep(backoff.next_delay())

    async def _poll_once(self) -> None:
        plan = self._plan
        # Shards are read only while the budget has too few candidates to go to: the reads a
        # round costs stop growing once the shards hold more peers than K, however many more.
        wanted = plan.wants_announcements(plan.established(self._established, self._peers))
        shards = self._next_shards() if wanted else []
        announced, self._peers = await self._call(partial(_read_announcements, swarm=self.swarm, shards=shards))
        self._polls += 1
        if self._polls % 10 == 1:
            self._dht_counters = await self._call(_counters)
            self._warn_old_version()
        self._shards_seen.update(shards)
        plan.census_done = len(self._shards_seen) == ANNOUNCE_SHARDS
        now = time.monotonic()
        plan.note_announced({p: r for p, (r, _) in announced.items()}, now,
                            made={p: now - age for p, (_, age) in announced.items()})
        chosen = plan.choose(plan.established(self._established, self._peers))
        if not chosen:
            return
        records = await self._call(partial(_fetch_bundles, swarm=self.swarm, wanted=chosen))
        found = set()
        for peer, _round, data in records:
            found.add(peer)
            self._deliver(data)
            plan.note_delivered(peer)
        for peer, round_no in chosen:
            # A round announced but not held counts against its peer; one awaited is only not made yet.
            if peer not in found and not plan.missed(peer, round_no) and self._reject_handler is not None:
                self._reject_handler(peer, "missing_payload")

    def _next_shards(self) -> list[int]:
        """Up to :data:`SHARDS_PER_POLL` shards: first those of peers fetched lately (their next
        round is the likeliest news), then the next of a shuffled cycle over all shards."""
        rng = self._plan.rng
        recent = [shard_of(p) for p in self._plan.recent(_RECENT_PEERS)]
        shards = list(dict.fromkeys(rng.sample(recent, len(recent))))[:SHARDS_PER_POLL // 2]
        while len(shards) < min(SHARDS_PER_POLL, ANNOUNCE_SHARDS):
            if not self._shard_order:
                self._shard_order = rng.sample(range(ANNOUNCE_SHARDS), ANNOUNCE_SHARDS)
            shard = self._shard_order.pop()
            if shard not in shards:
                shards.append(shard)
        return shards

    def _warn_old_version(self) -> None:
        if self._dht_counters.get("refused_old_version") and not self._warned_old_version:
            self._warned_old_version = True
            log.warning("hivemind transport: peers of an older swarmnode (DHT layout v1) write to this swarm; "
                        "they and this node (layout v%d) cannot exchange bundles until they upgrade",
                        LAYOUT_VERSION)
