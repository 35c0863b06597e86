"""The ``libp2p`` transport, protocol version 2: announcements over gossipsub, bundles pulled.

py-libp2p runs on trio, the node on asyncio. The host lives in its own thread running
``trio.run``; the asyncio side reaches it with ``trio.from_thread`` (always from a worker
thread, so the event loop never waits on trio), and received messages come back with
``loop.call_soon_threadsafe``. :meth:`start` returns once the host listens and is
subscribed, or raises :class:`TransportError` with the host's startup error. :meth:`stop`
cancels everything inside ``trio.run`` and joins the thread.

What goes where (``docs/protocol.md`` section 4):

* gossipsub topic ``swarmnode/<swarm>/announce/2`` carries :class:`Announcement` s only:
  round, size, sha256 digest and the PeerIDs that serve the bundle, at most
  :data:`MAX_ANNOUNCEMENT_BYTES`. Messages are signed by the host key (strict signing), so
  the gossip author is the announcing node; a topic validator drops anything else and
  reports it (``bad_announcement``) under that author.
* ``/swarmnode/bundle/2.0.0`` serves bundles: request ``{"author": PeerID, "round": R}``,
  answer the bundle bytes or nothing. A node serves its own last :data:`OWN_ROUNDS` rounds
  and, if public, what private nodes left with it.
* ``/swarmnode/hold/2.0.0``: a private node (behind NAT: no one dials it, and two of them
  never connect) pushes each bundle to up to :data:`HOLDERS` connected public peers, which
  keep it (:data:`HELD_ROUNDS` rounds an author, :data:`HELD_BYTES` in all) and serve it;
  its announcement lists them.

A node fetches at most ``fetch_per_round`` (K) bundles per round of its own, chosen over the
announcers by :class:`~swarmnode.swarm.transport.pull.PullPlan`: its bytes and verification
work per round stay flat however many peers announce (issue 13). A pulled bundle must be no
longer than announced (else ``too_large``, read no further), hash to the announced digest
(else ``digest_mismatch``) and be signed by the announcer (else the bundle reason); a pull
that finds nothing is ``missing_payload``; all counted against the announcer.

Peers find each other beyond the bootstrap node with a small peer exchange,
``/swarmnode/peers/1.0.0``: a node that has fewer than :data:`PEER_TARGET` connections asks a
few connected peers for the addresses of theirs (JSON list of multiaddrs, capped) and dials
the ones it lacks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import json
import logging
import random
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial
from typing import Any, Awaitable, Callable, Sequence

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11
from libp2p.pubsub.pubsub import Pubsub

from swarmnode.compat.libp2p import (BackoffGossipSub, LeanPubsub, allow_redial, batch_window_updates,
                                     run_service, stop_seen_cache, subscribers)
from swarmnode.swarm.bundle import BundleRejected, canonical_json, open_envelope
from swarmnode.swarm.identity import public_key_from_peer_id
from swarmnode.swarm.transport.base import (MAX_MESSAGE_BYTES, NodeIdentity, Transport, TransportError, expand_unspecified,
                                      peer_id_of, relay_rejection)
from swarmnode.swarm.transport.pull import FETCH_PER_ROUND, PullPlan

log = logging.getLogger("swarmnode.swarm.transport")

PROTOCOL_VERSION = 2
_STARTUP_TIMEOUT = 30.0
_DIAL_TIMEOUT = 5.0
_STREAM_TIMEOUT = 10.0      # one request/response, from opening the stream to the last byte
_STOP_TIMEOUT = 10.0
_PEER_REFRESH = 0.5
PULL_INTERVAL = 1.0
PEER_TARGET = 8
# No gossipsub v1.2: py-libp2p sends its IDONTWANT to every mesh peer for every message,
# whatever its size, and an announcement is smaller than the duplicate it spares.
GOSSIP_PROTOCOLS = [PROTOCOL_ID_V11, PROTOCOL_ID]
PEERS_PROTOCOL = TProtocol("/swarmnode/peers/1.0.0")
BUNDLE_PROTOCOL = TProtocol("/swarmnode/bundle/2.0.0")
HOLD_PROTOCOL = TProtocol("/swarmnode/hold/2.0.0")
_EXCHANGE_EVERY = 10.0
_EXCHANGE_FIRST = 2.0
_EXCHANGE_ASK = 3           # peers asked per exchange
_EXCHANGE_MAX_ADDRS = 64    # addresses sent or read per answer
_EXCHANGE_MAX_BYTES = 32 * 1024
MAX_ANNOUNCEMENT_BYTES = 1024
MAX_REQUEST_BYTES = 512
MAX_HOLDERS = 4             # PeerIDs an announcement may list
HOLDERS = 2                 # public peers a private node leaves each bundle with
OWN_ROUNDS = 4              # rounds of its own a node serves
HELD_ROUNDS = 2             # rounds a public node holds for each private author
HELD_BYTES = 8 * 1024 * 1024
_HELD_ACK = b"held"
_ANNOUNCED_MEMORY = 4096    # announcers whose latest announcement the PullPlan keeps
_MAX_PEER_ID = 64         # characters; an Ed25519 PeerID has 52
# An RPC batches announcements and gossipsub's control messages (IHAVE lists of message ids).
_MAX_RPC_BYTES = 64 * 1024


def topic_name(swarm: str) -> str:
    return f"swarmnode/{swarm}/announce/{PROTOCOL_VERSION}"


def old_topic_name(swarm: str) -> str:
    """Version 1's topic, where older nodes gossip full bundles; this version only watches it."""
    return f"swarmnode/{swarm}/bundles/1"


@dataclass(frozen=True)
class Announcement:
    """One node's news: its bundle of ``round`` (``size`` bytes, sha256 ``digest``) is served by ``holders``."""

    round: int
    size: int
    digest: str
    holders: tuple[str, ...]

    def encode(self) -> bytes:
        return canonical_json({"round": self.round, "size": self.size, "digest": self.digest,
                               "holders": list(self.holders)})


def parse_announcement(raw: bytes) -> Announcement | None:
    """The announcement ``raw`` encodes, or None for anything else: over
    :data:`MAX_ANNOUNCEMENT_BYTES`, not canonical JSON, other or missing fields, a size over
    ``MAX_MESSAGE_BYTES``, a digest that is not 64 lowercase hex digits, no holder or more
    than :data:`MAX_HOLDERS`, a holder that is not a PeerID. Never raises."""
    if len(raw) > MAX_ANNOUNCEMENT_BYTES:
        return None
    try:
        fields = json.loads(raw)
        if not isinstance(fields, dict) or set(fields) != {"round", "size", "digest", "holders"}:
            return None
        announcement = Announcement(fields["round"], fields["size"], fields["digest"], tuple(fields["holders"]))
        if announcement.encode() != raw:  # one encoding per announcement: no padding, no look-alikes
            return None
    except (ValueError, TypeError, RecursionError):
        return None
    ok = (_is_count(announcement.round) and _is_count(announcement.size)
          and 0 < announcement.size <= MAX_MESSAGE_BYTES
          and isinstance(announcement.digest, str) and len(announcement.digest) == 64
          and all(c in "0123456789abcdef" for c in announcement.digest)
          and 0 < len(announcement.holders) <= MAX_HOLDERS and all(map(_is_peer_id, announcement.holders)))
    return announcement if ok else None


def parse_request(raw: bytes) -> tuple[str, int] | None:
    """(author, round) of a bundle request, or None for anything malformed. Never raises."""
    if len(raw) > MAX_REQUEST_BYTES:
        return None
    try:
        fields = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(fields, dict) or set(fields) != {"author", "round"}:
        return None
    author, round_no = fields["author"], fields["round"]
    return (author, round_no) if _is_peer_id(author) and _is_count(round_no) else None


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _is_peer_id(value: Any) -> bool:
    """An Ed25519 PeerID, the only kind a swarmnode node key has."""
    if not isinstance(value, str) or not 0 < len(value) <= _MAX_PEER_ID:
        return False
    try:
        public_key_from_peer_id(value)
    except ValueError:
        return False
    return True


class BundleStore:
    """Bundles a node serves, by (author, round): at most ``per_author`` rounds an author and
    ``max_bytes`` in all, oldest out. Thread-safe: written on the asyncio loop and in the host
    thread, read in the host thread."""

    def __init__(self, per_author: int, max_bytes: int):
        self.per_author = per_author
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, author: str, round_no: int, data: bytes) -> None:
        with self._lock:
            self._drop((author, round_no))
            self._items[(author, round_no)] = data
            self._bytes += len(data)
            rounds = [key for key in self._items if key[0] == author]
            for key in rounds[:max(0, len(rounds) - self.per_author)]:
                self._drop(key)
            while self._bytes > self.max_bytes:
                self._drop(next(iter(self._items)))

    def get(self, author: str, round_no: int) -> bytes | None:
        with self._lock:
            return self._items.get((author, round_no))

    def __len__(self) -> int:
        return len(self._items)

    def _drop(self, key: tuple[str, int]) -> None:
        data = self._items.pop(key, None)
        if data is not None:
            self._bytes -= len(data)


@dataclass
class Pulled:
    """What one pull got: the bundle (None when no source served one that checked out) and
    why the last rejected answer failed (``digest_mismatch``, ``too_large`` or a bundle reason), if one did."""

    data: bytes | None
    reason: str | None = None


class Libp2pTransport(Transport):
    name = "libp2p"

    def __init__(self, identity: NodeIdentity, swarm: str, bootstrap: Sequence[str] = (),
                 listen: str | None = None, announce: str | None = None, *, private: bool = False,
                 fetch_per_round: int = FETCH_PER_ROUND):
        """``private``: the node cannot accept inbound connections; it advertises no address
        (identify and the peer exchange pass on nothing for it), leaves its bundles with
        public peers it dialed, and holds none for others. ``fetch_per_round``: K, the most
        peers' bundles pulled per round of this node (0: none, for a node that only serves)."""
        super().__init__(identity, swarm, bootstrap, listen, announce)
        self.private = private
        self.topic = topic_name(swarm)
        self.served = BundleStore(OWN_ROUNDS, OWN_ROUNDS * MAX_MESSAGE_BYTES)
        self.held = BundleStore(HELD_ROUNDS, HELD_BYTES)
        self._plan = PullPlan(identity.peer_id, fetch_per_round, memory=_ANNOUNCED_MEMORY)
        self._hold_filter: Callable[[bytes], bool] | None = None
        self._blocked: dict[str, float] = {}  # PeerID -> monotonic time its holds are refused until
        self._thread: threading.Thread | None = None
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._pubsub: Pubsub | None = None
        self._host: Any = None
        self._nursery: trio.Nursery | None = None
        self._pull_task: asyncio.Task | None = None
        self._peers: list[str] = []
        self._addresses: list[str] = []
        self._warned_old_version = False

    def set_hold_filter(self, admit: Callable[[bytes], bool]) -> None:
        """Ask ``admit(data)`` before holding a bundle a private peer pushed (signed by that
        peer, checked before); False refuses it. It runs in the host thread: it must be
        thread-safe and quick (a relay's rate limits and counts)."""
        self._hold_filter = admit

    # -- asyncio side ----------------------------------------------------------------------

    async def _start(self) -> None:
        try:
            listen = multiaddr.Multiaddr(self.listen)
            announce = [multiaddr.Multiaddr(self.announce)] if self.announce else None
            if self.private:
                announce = []  # a static empty list: get_addrs() advertises nothing
        except Exception as exc:
            raise TransportError(f"bad --listen/--announce multiaddr: {exc}") from None
        batch_window_updates()
        self._thread = threading.Thread(target=self._thread_main, args=(listen, announce),
                                        name="swarmnode-libp2p", daemon=True)
        self._thread.start()
        try:
            await asyncio.wait_for(asyncio.wrap_future(self._ready), _STARTUP_TIMEOUT)
        except Exception as exc:
            await self._stop()
            if isinstance(exc, asyncio.TimeoutError):
                raise TransportError(f"the libp2p host did not start within {_STARTUP_TIMEOUT:.0f} s") from None
            raise TransportError(f"the libp2p host could not listen on {self.listen}: {exc}") from None
        self._pull_task = asyncio.create_task(self._pull_loop(), name="libp2p-pull")

    async def _stop(self) -> None:
        if self._pull_task is not None:
            self._pull_task.cancel()
            await asyncio.gather(self._pull_task, return_exceptions=True)
            self._pull_task = None
        thread = self._thread
        if thread is None:
            return
        if self._token is not None and self._cancel is not None:
            try:
                await asyncio.to_thread(trio.from_thread.run_sync, self._cancel.cancel, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        await asyncio.to_thread(thread.join, _STOP_TIMEOUT)
        if thread.is_alive():
            log.warning("libp2p transport: the host thread did not stop within %.0f s", _STOP_TIMEOUT)
        self._thread = None
        self._peers = []

    async def _in_host(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """``await fn(*args)`` in the host thread, from a worker thread; raises what it raises."""
        return await asyncio.to_thread(trio.from_thread.run, fn, *args, trio_token=self._token)

    async def _publish(self, round_no: int, data: bytes) -> None:
        if len(data) > MAX_MESSAGE_BYTES:
            raise ValueError(f"message of {len(data)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")
        pubsub = self._pubsub
        assert pubsub is not None
        self.served.put(self.identity.peer_id, round_no, data)
        # Holders first: once a peer reads the announcement, every holder it names has the bundle.
        holders = await self._in_host(self._leave_with_holders, data) if self.private else []
        announcement = Announcement(round_no, len(data), hashlib.sha256(data).hexdigest(),
                                    (self.identity.peer_id, *holders))
        await self._in_host(pubsub.publish, self.topic, announcement.encode())
        self._plan.next_round(time.monotonic())
        self._plan.census_done = True  # gossip brings every announcement: a round has seen each announcer

    async def _dial(self, maddr: str) -> bool:
        try:
            return await self._in_host(self._trio_dial, maddr)
        except BaseException as exc:  # RunFinishedError, or Cancelled while the host stops
            if isinstance(exc, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
                raise
            return False

    def peers(self) -> list[str]:
        return list(self._peers)

    def block(self, peer_id: str, seconds: float) -> None:
        now = time.monotonic()
        self._blocked = {p: until for p, until in self._blocked.items() if until > now}
        self._blocked[peer_id] = now + seconds
        if self._token is None or self._nursery is None:
            return
        try:
            trio.from_thread.run_sync(self._nursery.start_soon, _blacklist_for, self._pubsub,
                                      ID.from_base58(peer_id), seconds, trio_token=self._token)
        except (trio.RunFinishedError, ValueError) as exc:
            log.debug("libp2p transport: cannot block %s: %s", peer_id, exc)

    def addresses(self) -> list[str]:
        return list(self._addresses)

    def _note_announcement(self, author: str, announcement: Announcement) -> None:
        """An announcement gossip delivered (validated, signed by ``author``); on the asyncio loop."""
        self._plan.note_announced({author: announcement.round}, time.monotonic(), {author: announcement})

    async def _pull_loop(self) -> None:
        while True:
            try:
                await self._pull_once()
            except Exception as exc:  # the host stopping under a pull; the next round tries again
                log.debug("libp2p transport: a pull failed: %r", exc)
            await asyncio.sleep(PULL_INTERVAL)

    async def _pull_once(self) -> None:
        """Pull what the plan allows now; deliver what checks out, report what does not."""
        plan = self._plan
        chosen = plan.choose(plan.established(self._established, self._peers))
        if not chosen:
            return
        results = await self._fetch([(peer, plan.detail(peer)) for peer, _ in chosen])
        for (peer, _round), pulled in zip(chosen, results):
            if pulled.data is not None:
                self._deliver(pulled.data, peer)
                plan.note_delivered(peer)
            elif self._reject_handler is not None:
                self._reject_handler(peer, pulled.reason or "missing_payload")

    async def _fetch(self, wanted: list[tuple[str, Announcement]]) -> list[Pulled]:
        """One :class:`Pulled` per (author, announcement), pulled concurrently in the host thread."""
        return await self._in_host(self._trio_fetch_all, wanted)

    # -- trio side (the host thread) -------------------------------------------------------

    def _thread_main(self, listen: multiaddr.Multiaddr, announce: list[multiaddr.Multiaddr] | None) -> None:
        try:
            trio.run(self._trio_main, listen, announce)
        except BaseException as exc:  # surface startup errors to start(); later ones are logged
            if not self._ready.done():
                self._ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            else:
                log.error("libp2p transport: the host stopped: %s", exc)
        finally:
            self._peers = []

    async def _trio_main(self, listen: multiaddr.Multiaddr, announce: list[multiaddr.Multiaddr] | None) -> None:
        with trio.CancelScope() as cancel:
            self._cancel = cancel
            self._token = trio.lowlevel.current_trio_token()
            key_pair = create_new_key_pair(self.identity.seed)
            host = new_host(key_pair=key_pair, announce_addrs=announce)
            own_id = host.get_id()
            if str(own_id) != self.identity.peer_id:
                raise TransportError(f"libp2p derived PeerID {own_id} from the node key, expected "
                                     f"{self.identity.peer_id}")
            # Heartbeat every second (the libp2p spec's default) so meshes form quickly. Mesh
            # degree 3 (2 to 5), not the spec's 6 (4 to 12): a node gets each announcement from
            # about as many mesh peers as it keeps, the one cost that grows with the swarm; on
            # 64 nodes a third fewer bytes at the same delivery (docs/scale.md), and lazy
            # gossip (IHAVE, every heartbeat) repairs a missed message.
            # No adaptive gossip: py-libp2p's (0.8) rates a healthy swarm "moderate" and then
            # beats every 60 s, so meshes were mended and misses gossiped once a minute. A peer
            # may forward 100 announcements a second, not py-libp2p's 10, which 900 nodes with
            # 90 s rounds reach; the validator and the PullPlan already bound what they cost.
            gossipsub = BackoffGossipSub(protocols=GOSSIP_PROTOCOLS, degree=3, degree_low=2, degree_high=5,
                                         heartbeat_interval=1, adaptive_gossip_enabled=False,
                                         max_messages_per_topic_per_second=100)
            pubsub = LeanPubsub(host, gossipsub, strict_signing=True, max_inbound_rpc_size=_MAX_RPC_BYTES)
            pubsub.set_topic_validator(self.topic, partial(_announcement_check, self._reject_threadsafe),
                                       is_async_validator=False)
            host.set_stream_handler(PEERS_PROTOCOL, partial(_answer_peers, host))
            host.set_stream_handler(BUNDLE_PROTOCOL, partial(_serve, self._answer_bundle, MAX_REQUEST_BYTES))
            if not self.private:  # a private node never holds for others
                host.set_stream_handler(HOLD_PROTOCOL, partial(_serve, self._take_hold, MAX_MESSAGE_BYTES))
            try:
                async with host.run([listen]), run_service(pubsub), run_service(gossipsub):
                    await pubsub.wait_until_ready()
                    subscription = await pubsub.subscribe(self.topic)
                    self._host, self._pubsub = host, pubsub
                    self._addresses = self._own_addresses(host)
                    self._ready.set_result(None)
                    async with trio.open_nursery() as nursery:
                        self._nursery = nursery
                        nursery.start_soon(self._receive, subscription, own_id.to_bytes())
                        nursery.start_soon(self._refresh_peers, host)
                        nursery.start_soon(self._exchange_peers, host)
            finally:
                stop_seen_cache(pubsub)

    def _own_addresses(self, host: Any) -> list[str]:
        if self.private:
            return []
        suffix = f"/p2p/{self.identity.peer_id}"
        out = [self.announce + suffix] if self.announce else []
        for addr in host.get_addrs():
            text = str(addr)
            if not text.endswith(suffix):
                text += suffix
            out.extend(expand_unspecified(text))
        return list(dict.fromkeys(out))

    async def _receive(self, subscription: Any, own_id: bytes) -> None:
        while True:
            message = await subscription.get()
            announcement = parse_announcement(bytes(message.data))  # the validator let only these through
            loop = self._loop
            if message.from_id == own_id or announcement is None or loop is None or loop.is_closed():
                continue
            loop.call_soon_threadsafe(self._note_announcement, str(ID(message.from_id)), announcement)

    async def _refresh_peers(self, host: Any) -> None:
        while True:
            self._peers = [str(p) for p in host.get_connected_peers()]
            self._warn_old_version()
            await trio.sleep(_PEER_REFRESH)

    def _warn_old_version(self) -> None:
        if self._warned_old_version or self._pubsub is None:
            return
        old = subscribers(self._pubsub, old_topic_name(self.swarm))
        if old:
            self._warned_old_version = True
            log.warning("libp2p transport: peer %s runs an older swarmnode (protocol v1, full bundles on %s); "
                        "it and this node (v%d, announcements on %s) exchange no bundles until it upgrades",
                        sorted(old)[0], old_topic_name(self.swarm), PROTOCOL_VERSION, self.topic)

    async def _exchange_peers(self, host: Any) -> None:
        """Ask a few peers for theirs while below PEER_TARGET; dial the ones not connected yet."""
        await trio.sleep(_EXCHANGE_FIRST)
        while True:
            connected = host.get_connected_peers()
            if 0 < len(connected) < PEER_TARGET:
                known = {str(p) for p in connected} | {self.identity.peer_id}
                for peer in random.sample(connected, min(_EXCHANGE_ASK, len(connected))):
                    for maddr in await _ask_peers(host, peer):
                        if len(known) > PEER_TARGET:
                            break
                        if peer_id_of(maddr) not in known and await self._trio_dial(maddr):
                            known.add(peer_id_of(maddr) or "")
            await trio.sleep(_EXCHANGE_EVERY)

    async def _trio_dial(self, maddr: str) -> bool:
        try:
            info = info_from_p2p_addr(multiaddr.Multiaddr(maddr))
            # The swarm's negative cache would refuse a peer that failed before for minutes;
            # our own backoff already paces these dials.
            allow_redial(self._host, info.peer_id)
            with trio.fail_after(_DIAL_TIMEOUT):
                await self._host.connect(info)
        except Exception as exc:
            log.debug("libp2p transport: dialing %s failed: %r", maddr, exc)
            return False
        return True

    async def _answer_bundle(self, _asker: str, request: bytes) -> bytes:
        """BUNDLE_PROTOCOL: the bundle asked for if this node serves it, else nothing."""
        wanted = parse_request(request)
        if wanted is None:
            return b""
        return self.served.get(*wanted) or self.held.get(*wanted) or b""

    async def _take_hold(self, pusher: str, data: bytes) -> bytes:
        """HOLD_PROTOCOL (public nodes): keep a bundle signed by the pusher; acknowledge it."""
        if self._blocked.get(pusher, 0.0) > time.monotonic():
            return b""
        reason = relay_rejection(pusher, data)
        if reason is None:
            round_no = _round_of(data)
            if round_no is None:
                reason = "malformed"
        if reason is not None:
            self._reject_threadsafe(pusher, reason)
            return b""
        if self._hold_filter is not None and not self._hold_filter(data):
            return b""
        self.held.put(pusher, round_no, data)
        return _HELD_ACK

    async def _leave_with_holders(self, data: bytes) -> list[str]:
        """Push ``data`` to up to :data:`HOLDERS` connected public peers; the ones that took it."""
        host = self._host
        bootstrap = {peer_id_of(m) for m in self.bootstrap}
        connected = host.get_connected_peers()
        # Peers this private node dialed (all it has) carry addresses; bootstrap peers first.
        public = sorted((p for p in connected if _dialable(host, p)), key=lambda p: str(p) not in bootstrap)
        took: list[str] = []

        async def push(peer: ID) -> None:
            if await _exchange(host, peer, HOLD_PROTOCOL, data, len(_HELD_ACK)) == _HELD_ACK:
                took.append(str(peer))

        async with trio.open_nursery() as nursery:
            for peer in public[:HOLDERS]:
                nursery.start_soon(push, peer)
        return took

    async def _trio_fetch_all(self, wanted: list[tuple[str, Announcement]]) -> list[Pulled]:
        results = [Pulled(None)] * len(wanted)

        async def fetch(i: int, author: str, announcement: Announcement) -> None:
            results[i] = await self._trio_fetch(author, announcement)

        async with trio.open_nursery() as nursery:
            for i, (author, announcement) in enumerate(wanted):
                nursery.start_soon(fetch, i, author, announcement)
        return results

    async def _trio_fetch(self, author: str, announcement: Announcement) -> Pulled:
        """Ask the author, then each holder, that is connected or dialable, until one serves a
        bundle with the announced digest, signed by the author."""
        host = self._host
        connected = set(host.get_connected_peers())
        request = canonical_json({"author": author, "round": announcement.round})
        reason = None
        for holder in dict.fromkeys((author, *announcement.holders)):
            if holder == self.identity.peer_id:
                continue
            peer = ID.from_base58(holder)
            if peer not in connected and not _dialable(host, peer):
                continue
            data = await _exchange(host, peer, BUNDLE_PROTOCOL, request, announcement.size)
            if not data:
                continue
            if len(data) > announcement.size:
                reason = "too_large"
                continue
            if hashlib.sha256(data).hexdigest() != announcement.digest:
                reason = "digest_mismatch"
                continue
            reason = relay_rejection(author, data)
            if reason is None:
                return Pulled(data)
        return Pulled(None, reason)


def _round_of(data: bytes) -> int | None:
    """The signed round of a bundle envelope, None when it has none."""
    try:
        round_no = open_envelope(data)[1].get("round")
    except BundleRejected:
        return None
    return round_no if _is_count(round_no) else None


async def _blacklist_for(pubsub: Any, peer: ID, seconds: float) -> None:
    """pubsub drops a blacklisted peer's messages and connections before any check."""
    pubsub.add_to_blacklist(peer)
    try:
        await trio.sleep(seconds)
    finally:
        pubsub.remove_from_blacklist(peer)


def _announcement_check(on_reject: Callable[[str, str], None], forwarder: ID, message: Any) -> bool:
    """Topic validator: relay only well-formed announcements (:func:`parse_announcement`).

    pubsub has verified the message's signature (strict signing) before it calls this, so a
    drop is reported to ``on_reject`` under that signed origin."""
    try:
        author = str(ID(message.from_id))
    except Exception:
        return False
    if parse_announcement(bytes(message.data)) is None:
        on_reject(author, "bad_announcement")
        return False
    return True


def _dialable(host: Any, peer: ID) -> list[str]:
    """A peer's listen addresses as its node learned them (identify), with /p2p/, wildcards dropped."""
    try:
        addrs = host.get_peerstore().addrs(peer)[:2]
    except Exception:  # PeerStoreError: a peer the node never learned an address of
        return []
    out = []
    for addr in addrs:
        text = str(addr)
        if "/0.0.0.0/" in text or "/::/" in text:
            continue
        out.append(text if "/p2p/" in text else f"{text}/p2p/{peer}")
    return out


async def _read_bounded(stream: Any, limit: int) -> bytes:
    """Everything ``stream`` sends until it closes, at most ``limit`` + 1 bytes: an answer
    longer than ``limit`` is one the peer sent too much of, and it is read no further."""
    chunks, size = [], 0
    while size <= limit:
        try:
            chunk = await stream.read(limit + 1 - size)
        except EOFError:  # py-libp2p's StreamEOF: the other side is done
            break
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


async def _exchange(host: Any, peer: ID, protocol: TProtocol, request: bytes, limit: int) -> bytes | None:
    """Open a ``protocol`` stream to ``peer``, send ``request``, and read the answer (see
    :func:`_read_bounded`: longer than ``limit`` means too long); None on any failure or
    time-out. Never raises."""
    try:
        with trio.fail_after(_STREAM_TIMEOUT):
            stream = await host.new_stream(peer, [protocol])
            try:
                if request:
                    await stream.write(request)
                await stream.close_write()
                answer = await _read_bounded(stream, limit)
            finally:
                with contextlib.suppress(Exception):
                    await stream.close()
    except Exception as exc:
        log.debug("libp2p transport: %s with %s failed: %r", protocol, peer, exc)
        return None
    return answer


async def _serve(answer: Callable[[str, bytes], Awaitable[bytes]], limit: int, stream: Any) -> None:
    """Stream handler: read a request of at most ``limit`` bytes, write ``answer(asker, request)``,
    close. Anything a peer does wrong (too much, too slow, a reset) ends the stream, never the host."""
    try:
        with trio.fail_after(_STREAM_TIMEOUT):
            request = await _read_bounded(stream, limit)
            if len(request) > limit:
                await stream.reset()
                return
            reply = await answer(str(stream.muxed_conn.peer_id), request)
            if reply:
                await stream.write(reply)
            await stream.close()
    except Exception as exc:
        log.debug("libp2p transport: serving %s failed: %r", stream, exc)
        with contextlib.suppress(Exception):
            await stream.reset()


async def _answer_peers(host: Any, stream: Any) -> None:
    """Stream handler of PEERS_PROTOCOL: the addresses of our other peers in random order, then
    close. In the order they connected, every joiner would dial the same first few: hubs
    connected to all, whose meshes are full, so nodes that reach only hubs starve."""
    try:
        asker = stream.muxed_conn.peer_id
        peers = [p for p in host.get_connected_peers() if p != asker]
        addrs = [a for p in random.sample(peers, len(peers)) for a in _dialable(host, p)]
        await stream.write(json.dumps(addrs[:_EXCHANGE_MAX_ADDRS]).encode("utf-8"))
        await stream.close()
    except Exception as exc:
        log.debug("libp2p transport: answering a peer exchange failed: %r", exc)
        with contextlib.suppress(Exception):
            await stream.reset()


async def _ask_peers(host: Any, peer: ID) -> list[str]:
    """The multiaddrs ``peer`` reports for its peers; [] on any failure or malformed answer."""
    return parse_peer_answer(await _exchange(host, peer, PEERS_PROTOCOL, b"", _EXCHANGE_MAX_BYTES) or b"")


def parse_peer_answer(raw: bytes) -> list[str]:
    """The usable multiaddrs of a peer-exchange answer; [] for anything malformed or oversized."""
    if len(raw) > _EXCHANGE_MAX_BYTES:
        return []
    try:
        answer = json.loads(raw)
    except (ValueError, RecursionError):
        return []
    if not isinstance(answer, list):
        return []
    return [a for a in answer[:_EXCHANGE_MAX_ADDRS]
            if isinstance(a, str) and len(a) < 512 and a.startswith("/") and peer_id_of(a)]
