"""The ``hivemind`` transport (the default): bundles as records of a hivemind DHT.

Keys, as RL Swarm's GenRL backend does it, one subkey per peer:

* ``<swarm>/rounds/<round>``, subkey = sender PeerID, value = the signed bundle bytes,
  expiring after :data:`BUNDLE_TTL`.
* ``<swarm>/heads``, subkey = sender PeerID, value = the sender's latest round (an int)
  signed with the node key over key, subkey, round and expiration. Readers poll this small
  record to learn which round keys hold something new: rounds are per-node counters, so a
  reader cannot guess them from its own.

:class:`SwarmRecordValidator` runs in every node's DHT and refuses any record a peer could
forge: a rounds record must be a bundle (checked with :func:`swarmnode.swarm.bundle.open_envelope`)
signed by the subkey's PeerID, for this swarm and this key's round; a heads record must carry
the subkey owner's signature. Nothing else is stored: this DHT exists for swarmnode only.

hivemind's DHT runs in a forked process and talks over a pipe. Every call goes through
:meth:`HivemindTransport._call`, which sends from a worker thread (never blocking the event
loop) under a lock (the pipe is not safe for concurrent writers). The node starts its DHT
without initial peers, which always works and gives it an address at once, then joins the
bootstrap peers from inside the DHT process (connect, ping, fill the routing table); hivemind's
own bootstrap at start-up would instead fail the whole start when no peer answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import struct
import tempfile
import threading
from functools import partial
from typing import Any, Awaitable, Callable, Sequence

import hivemind
from hivemind.dht.node import DHTNode
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import DHTRecord, RecordValidatorBase
from hivemind.p2p import PeerID
from hivemind.utils import MSGPackSerializer, get_dht_time
from hivemind.utils.multiaddr import Multiaddr

from swarmnode.swarm.bundle import BundleRejected, open_envelope
from swarmnode.swarm.identity import public_key_from_peer_id, verify_signature
from swarmnode.swarm.transport.base import MAX_MESSAGE_BYTES, Backoff, NodeIdentity, Transport, TransportError

log = logging.getLogger("swarmnode.swarm.transport")

BUNDLE_TTL = 300.0
HEAD_TTL = 120.0
POLL_INTERVAL = 1.0
DHT_SHUTDOWN_S = 10.0
HEAD_DOMAIN = b"swarmnode-head-v1\x00"
_SIGNATURE = 64
_CALL_TIMEOUT = 30.0
_DIAL_TIMEOUT = 5.0
_MISSING_RECORD_TRIES = 5


def rounds_key(swarm: str, round_no: int) -> str:
    return f"{swarm}/rounds/{round_no}"


def heads_key(swarm: str) -> str:
    return f"{swarm}/heads"


def _key_id(key: str) -> bytes:
    return DHTID.generate(source=key).to_bytes()


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


class SwarmRecordValidator(RecordValidatorBase):
    """Accepts only records a peer can write: its own bundles and its own head (see module doc).

    ``identity`` (the local node's) signs the local node's heads records; a validator without
    one only checks.
    """

    def __init__(self, swarm: str, identity: NodeIdentity | None = None):
        self.swarm = swarm
        self._heads_id = _key_id(heads_key(swarm))
        self._identity = identity
        self._own_subkey = MSGPackSerializer.dumps(identity.peer_id) if identity is not None else None

    def validate(self, record: DHTRecord) -> bool:
        try:
            return self._validate(record)
        except Exception:  # any malformed field from a peer is a refusal, never an error
            return False

    def _validate(self, record: DHTRecord) -> bool:
        subkey = MSGPackSerializer.loads(record.subkey)
        if not isinstance(subkey, str):
            return False
        if record.key == self._heads_id:
            body, signature = record.value[:-_SIGNATURE], record.value[-_SIGNATURE:]
            if len(signature) != _SIGNATURE or type(MSGPackSerializer.loads(body)) is not int:
                return False
            return verify_signature(public_key_from_peer_id(subkey), self._head_message(record, body), signature)
        value = MSGPackSerializer.loads(record.value)
        if not isinstance(value, bytes):
            return False
        try:
            sender, payload = open_envelope(value)
        except BundleRejected:
            return False
        round_no = payload.get("round")
        return (sender == subkey and payload.get("swarm") == self.swarm and type(round_no) is int
                and record.key == _key_id(rounds_key(self.swarm, round_no)))

    def sign_value(self, record: DHTRecord) -> bytes:
        if self._identity is not None and record.key == self._heads_id and record.subkey == self._own_subkey:
            return record.value + self._identity.sign(self._head_message(record, record.value))
        return record.value

    def strip_value(self, record: DHTRecord) -> bytes:
        return record.value[:-_SIGNATURE] if record.key == self._heads_id else record.value

    @staticmethod
    def _head_message(record: DHTRecord, body: bytes) -> bytes:
        return HEAD_DOMAIN + record.key + record.subkey + struct.pack(">d", record.expiration_time) + body


# -- coroutines run inside the DHT process (module level so the pipe can pickle them) --------

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


async def _watch_parent(_dht: Any, node: DHTNode, *, parent: int) -> None:
    """Make the DHT process (and its p2pd) end with the node, even when the node is killed.

    hivemind's DHT is a forked process that outlives a node killed by a signal (out of
    memory, ``kill -9``), keeping its port and p2pd busy; this check ends it instead.
    """

    async def watch() -> None:
        while os.getppid() == parent:
            await asyncio.sleep(1.0)
        try:
            await asyncio.wait_for(node.shutdown(), 5.0)
        finally:
            os._exit(0)

    _WATCHERS.add(asyncio.create_task(watch()))


_WATCHERS: set[asyncio.Task] = set()  # strong references, or the loop may drop the task


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


async def _store(_dht: Any, node: DHTNode, *, swarm: str, peer_id: str, round_no: int, path: str) -> None:
    with open(path, "rb") as fh:
        data = fh.read()
    os.unlink(path)
    now = get_dht_time()
    # The bundle first: once a reader sees the head, the record it points to is already stored.
    if not await node.store(rounds_key(swarm, round_no), data, now + BUNDLE_TTL, subkey=peer_id):
        raise RuntimeError("no DHT node accepted the bundle record")
    if not await node.store(heads_key(swarm), round_no, now + HEAD_TTL, subkey=peer_id):
        raise RuntimeError("no DHT node accepted the head record")


async def _poll_heads(_dht: Any, node: DHTNode, *, swarm: str) -> tuple[dict[str, int], list[str]]:
    found = await node.get(heads_key(swarm), latest=True)
    heads: dict[str, int] = {}
    if found is not None and hasattr(found.value, "items"):
        for subkey, item in found.value.items():
            if isinstance(subkey, str) and type(item.value) is int:
                heads[subkey] = item.value
    # A peer counts once it is in the DHT's routing table, not when p2pd merely holds a
    # connection to it: p2pd accepts connections before the DHT on top of it answers (a peer
    # mid-start), and its own libp2p DHT connects peers hivemind's DHT never heard of. Taking
    # such a connection for a join, a node would never ping again and never exchange a record.
    routed = node.protocol.routing_table.peer_id_to_uid
    peers = [str(info.peer_id) for info in await node.p2p.list_peers() if info.peer_id in routed]
    return heads, peers


async def _fetch_rounds(_dht: Any, node: DHTNode, *, swarm: str, rounds: list[int]) -> list[tuple[int, str, bytes]]:
    keys = {rounds_key(swarm, r): r for r in rounds}
    found = await node.get_many(list(keys), sufficient_expiration_time=float("inf"))
    records = []
    for key, result in found.items():
        if result is None or not hasattr(result.value, "items"):
            continue
        for subkey, item in result.value.items():
            if isinstance(subkey, str) and isinstance(item.value, bytes):
                records.append((keys[key], subkey, item.value))
    return records


async def _join(_dht: Any, node: DHTNode, *, maddr: str) -> bool:
    try:
        address = Multiaddr(maddr)
        peer = PeerID.from_base58(address["p2p"])
        await asyncio.wait_for(node.p2p._client.connect(peer, [address.decapsulate(Multiaddr(f"/p2p/{peer}"))]),
                               _DIAL_TIMEOUT)
        if await node.protocol.call_ping(peer) is None:
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
                 private: bool = False):
        """``private``: the node cannot accept inbound connections, so it runs as a DHT client
        (stores and reads at public DHT servers, never listed in a routing table) and reports
        no address."""
        super().__init__(identity, swarm, bootstrap, listen, announce)
        self.poll_interval = poll_interval
        self.private = private
        self._dht: hivemind.DHT | None = None
        self._send_lock = threading.Lock()
        self._poll_task: asyncio.Task | None = None
        self._peers: list[str] = []
        self._addresses: list[str] = []
        self._heads_done: dict[str, int] = {}   # peer -> latest round whose record was fetched
        self._heads_tries: dict[tuple[str, int], int] = {}
        self._poll_failed = False
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
            self._dht = await asyncio.to_thread(partial(hivemind.DHT, start=True, record_validators=[validator],
                                                        **kwargs))
        except Exception as exc:
            raise TransportError(f"the hivemind DHT could not start on {self.listen}: {exc}") from None
        finally:
            # p2pd has read the key by now (or failed); keep no second copy on disk.
            with contextlib.suppress(OSError):
                os.unlink(key_file)
        try:
            await self._call(partial(_watch_parent, parent=os.getpid()))
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
                                 path=path))

    async def _dial(self, maddr: str) -> bool:
        try:
            return bool(await self._call(partial(_join, maddr=maddr)))
        except Exception as exc:
            log.debug("hivemind transport: joining through %s failed: %s", maddr, exc)
            return False

    def peers(self) -> list[str]:
        """Connected peers in the DHT's routing table, as of the last poll (see :func:`_poll_heads`)."""
        return list(self._peers)

    def addresses(self) -> list[str]:
        return [] if self.private else list(self._addresses)

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
            try:
                await self._poll_once()
                self._poll_failed = False
            except Exception as exc:
                dht = self._dht
                if dht is not None and not dht.is_alive() and not self._stopped:
                    await self._relaunch(dht)
                    continue
                if not self._poll_failed:  # one line per outage, not one per second
                    log.warning("hivemind transport: reading the swarm's records failed: %r", exc)
                self._poll_failed = True
            await asyncio.sleep(self.poll_interval)

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
        heads, self._peers = await self._call(partial(_poll_heads, swarm=self.swarm))
        fresh = {peer: r for peer, r in heads.items()
                 if peer != self.identity.peer_id and self._heads_done.get(peer) != r}
        if not fresh:
            return
        # The round before a new head too: a peer may have published twice since the last poll.
        rounds = sorted({r for head in fresh.values() for r in (head - 1, head)})
        records = await self._call(partial(_fetch_rounds, swarm=self.swarm, rounds=rounds))
        got = set()
        for round_no, sender, data in records:
            got.add((sender, round_no))
            if sender != self.identity.peer_id:
                self._deliver(data)
        for peer, r in fresh.items():
            tries = self._heads_tries.pop((peer, r), 0) + 1
            if (peer, r) in got or tries >= _MISSING_RECORD_TRIES:
                self._heads_done[peer] = r
            else:  # the head arrived before its record reached the nodes we asked; ask again
                self._heads_tries[(peer, r)] = tries
