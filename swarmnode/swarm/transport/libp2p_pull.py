"""The ``libp2p`` transport, protocol version 3: announcements pushed and sampled, bundles pulled.

py-libp2p runs on trio, the node on asyncio. The host lives in its own thread running
``trio.run``; the asyncio side reaches it with ``trio.from_thread`` (always from a worker
thread, so the event loop never waits on trio), and what peers push comes back with
``loop.call_soon_threadsafe``. :meth:`start` returns once the host listens, or raises
:class:`TransportError` with the host's startup error. :meth:`stop` cancels everything
inside ``trio.run`` and joins the thread.

What goes where (``docs/protocol.md`` section 4), all request/response streams:

* ``/swarmnode/announce/3.0.0``: on publish a node pushes its signed
  :class:`~swarmnode.swarm.transport.announce.Announcement` (round, size, sha256 digest, the
  PeerIDs that serve the bundle) to up to :data:`PUSH_FANOUT` connected peers. A receiver
  keeps the newest one each peer pushed itself (:class:`~swarmnode.swarm.transport.announce.FirstHand`).
* ``/swarmnode/sample/3.0.0``: while a node has fewer candidates than it could pull, it asks
  its connected peers in turn, every :data:`SAMPLE_EVERY` seconds at most (doubling up to
  :data:`SAMPLE_EVERY_MAX` while answers bring no one new), for a sample of what
  was pushed to that peer (at most 16 announcements, each signed by its author). So what a
  node reads of announcements per round is bounded by its connections and its own asking,
  never by the swarm's size: no announcement reaches every node (issue 13).
* ``/swarmnode/bundle/2.0.0`` serves bundles: request ``{"author": PeerID, "round": R}``,
  answer the bundle bytes or nothing. A node serves its own last :data:`OWN_ROUNDS` rounds
  and, if public, what private nodes left with it.
* ``/swarmnode/hold/2.0.0``: a private node (behind NAT: no one dials it, and two of them
  never connect) pushes each bundle to up to :data:`HOLDERS` connected public peers, which
  keep it (:data:`HELD_ROUNDS` rounds an author, :data:`HELD_BYTES` in all) and serve it;
  its announcement lists them.

A node fetches at most ``fetch_per_round`` (K) bundles per round of its own, chosen over the
announcers by :class:`~swarmnode.swarm.transport.pull.PullPlan`: its bytes and verification
work per round stay flat however many peers announce. Only rounds heard of within the last
:data:`~swarmnode.swarm.transport.pull.FRESH_SHARE` of the node's round (at least 20 s) are
drawn, and a sample passes on only what was pushed in the last
:data:`~swarmnode.swarm.transport.announce.SHARE_TTL` seconds, so a pulled bundle is fresh
whenever in its round a node draws it. A pulled bundle must be no longer
than announced (else ``too_large``, read no further), hash to the announced digest (else
``digest_mismatch``) and be signed by the announcer (else the bundle reason); a pull that
finds nothing is ``missing_payload``; all counted against the announcer. An announcement
that does not check out (malformed, another swarm's, a bad signature, a push of someone
else's) is ``bad_announcement``, counted against the peer that sent it.

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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr

from swarmnode.compat.libp2p import allow_redial, batch_window_updates
from swarmnode.swarm.bundle import BundleRejected, canonical_json, open_envelope
from swarmnode.swarm.transport.announce import (
    MAX_ANNOUNCEMENT_BYTES,
    MAX_SAMPLE_BYTES,
    Announcement,
    FirstHand,
    is_count,
    is_peer_id,
    parse_push,
    parse_sample,
)
from swarmnode.swarm.transport.base import (
    MAX_MESSAGE_BYTES,
    NodeIdentity,
    Transport,
    TransportError,
    expand_unspecified,
    peer_id_of,
    relay_rejection,
)
from swarmnode.swarm.transport.pull import FETCH_PER_ROUND, FRESH_SHARE, PullPlan

log = logging.getLogger("swarmnode.swarm.transport")

PROTOCOL_VERSION = 3
_STARTUP_TIMEOUT = 30.0
_DIAL_TIMEOUT = 5.0
_STREAM_TIMEOUT = 10.0      # one request/response, from opening the stream to the last byte
_STOP_TIMEOUT = 10.0
_PEER_REFRESH = 0.5
PULL_INTERVAL = 1.0
PEER_TARGET = 8
PEERS_PROTOCOL = TProtocol("/swarmnode/peers/1.0.0")
BUNDLE_PROTOCOL = TProtocol("/swarmnode/bundle/2.0.0")
HOLD_PROTOCOL = TProtocol("/swarmnode/hold/2.0.0")
ANNOUNCE_PROTOCOL = TProtocol("/swarmnode/announce/3.0.0")
SAMPLE_PROTOCOL = TProtocol("/swarmnode/sample/3.0.0")
# What releases before protocol 3 spoke (gossipsub carried their announcements or bundles).
OLD_PROTOCOLS = ("/meshsub/1.0.0", "/meshsub/1.1.0", "/meshsub/1.2.0")
PUSH_FANOUT = 8             # peers a node pushes each announcement to
PUSH_EVERY = 1.0            # seconds: a peer's pushes closer together than this are dropped unread
SAMPLE_EVERY = 2.0          # seconds between a node's sample requests, at least
SAMPLE_EVERY_MAX = 8.0      # ... doubling up to this while samples bring no new announcer
_EXCHANGE_EVERY = 10.0
_EXCHANGE_FIRST = 2.0
_EXCHANGE_ASK = 3           # peers asked per exchange
_EXCHANGE_MAX_ADDRS = 64    # addresses sent or read per answer
_EXCHANGE_MAX_BYTES = 32 * 1024
MAX_REQUEST_BYTES = 512
HOLDERS = 2                 # public peers a private node leaves each bundle with
# Rounds a node serves of its own and holds for a private author: a pull can come up to
# SHARE_TTL + _PLAN_TTL (80 s) after the announcement, over 5 rounds of the benchmark's 15 s.
OWN_ROUNDS = 8
HELD_ROUNDS = 8
HELD_BYTES = 8 * 1024 * 1024
_HELD_ACK = b"held"
_ANNOUNCED_MEMORY = 4096    # announcers whose latest announcement the PullPlan and FirstHand keep
_PLAN_TTL = 60.0            # seconds the PullPlan keeps an announcement


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
    return (author, round_no) if is_peer_id(author) and is_count(round_no) else None


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
        self.served = BundleStore(OWN_ROUNDS, OWN_ROUNDS * MAX_MESSAGE_BYTES)
        self.held = BundleStore(HELD_ROUNDS, HELD_BYTES)
        self._plan = PullPlan(identity.peer_id, fetch_per_round, memory=_ANNOUNCED_MEMORY, ttl=_PLAN_TTL,
                              fresh=FRESH_SHARE, awaits=False)
        self._first_hand = FirstHand(_ANNOUNCED_MEMORY)  # host thread only
        self._last_push: dict[str, float] = {}  # host thread: pusher -> monotonic time of the last push read
        self._last_sample = float("-inf")
        self._sample_every = SAMPLE_EVERY
        self._sample_order: list[str] = []  # peers to ask next, a shuffled cycle over the connected ones
        self._hold_filter: Callable[[bytes], bool] | None = None
        self._blocked: dict[str, float] = {}  # PeerID -> monotonic time it is ignored until
        self._thread: threading.Thread | None = None
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
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
        self.served.put(self.identity.peer_id, round_no, data)
        # Holders first: once a peer reads the announcement, every holder it names has the bundle.
        holders = await self._in_host(self._leave_with_holders, data) if self.private else []
        announcement = Announcement(self.identity.peer_id, self.swarm, round_no, len(data),
                                    hashlib.sha256(data).hexdigest(), (self.identity.peer_id, *holders))
        wire = canonical_json(announcement.signed(self.identity))
        # Pushed in the background: a slow peer must not hold up the round.
        await asyncio.to_thread(trio.from_thread.run_sync, self._nursery.start_soon, self._push, wire,
                                trio_token=self._token)
        self._plan.next_round(time.monotonic())
        self._sample_every = SAMPLE_EVERY  # a new round: the peers have likely announced theirs too

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
        """Ignore ``peer_id``'s pushes, sample requests, holds and announcements for
        ``seconds``, and close its connection. Callable from any thread (a relay's hold filter
        bans from the host thread)."""
        now = time.monotonic()
        self._blocked = {p: until for p, until in self._blocked.items() if until > now}
        self._blocked[peer_id] = now + seconds
        nursery = self._nursery
        if self._token is None or nursery is None:
            return
        try:
            close = partial(nursery.start_soon, self._host.disconnect, ID.from_base58(peer_id))
            if threading.current_thread() is self._thread:
                close()
            else:
                trio.from_thread.run_sync(close, trio_token=self._token)
        except (trio.RunFinishedError, ValueError, RuntimeError) as exc:
            log.debug("libp2p transport: cannot disconnect %s: %s", peer_id, exc)

    def _is_blocked(self, peer_id: str, now: float) -> bool:
        """Whether :meth:`block` still holds for ``peer_id`` at monotonic time ``now``; any thread."""
        return self._blocked.get(peer_id, 0.0) > now

    def addresses(self) -> list[str]:
        return list(self._addresses)

    def _note(self, announcements: list[Announcement]) -> int:
        """Announcements that checked out (pushed or sampled): the PullPlan keeps each author's
        newest. Returns how many were newer than what it held."""
        plan, now = self._plan, time.monotonic()
        newer = {}
        for announcement in announcements:
            author, held = announcement.author, plan.announced.get(announcement.author)
            if (author != self.identity.peer_id and not self._is_blocked(author, now)
                    and (held is None or held.round < announcement.round)):
                newer[author] = announcement
        if newer:
            plan.note_announced({author: a.round for author, a in newer.items()}, now, newer)
        return len(newer)

    async def _pull_loop(self) -> None:
        while True:
            try:
                await self._pull_once()
            except Exception as exc:  # the host stopping under a pull; the next round tries again
                log.debug("libp2p transport: a pull failed: %r", exc)
            await asyncio.sleep(PULL_INTERVAL)

    async def _pull_once(self) -> None:
        """Sample announcements if the budget lacks candidates; pull what the plan allows now;
        deliver what checks out, report what does not."""
        plan, now = self._plan, time.monotonic()
        plan.tick(now)
        established = plan.established(self._established, self._peers)
        if self._peers and now - self._last_sample >= self._sample_every and plan.wants_announcements(established):
            self._last_sample = now
            await self._sample(self._next_sample_peer())
        chosen = plan.choose(established)
        if not chosen:
            return
        results = await self._fetch([(peer, plan.detail(peer)) for peer, _ in chosen])
        for (peer, _round), pulled in zip(chosen, results):
            if pulled.data is not None:
                self._deliver(pulled.data, peer)
                plan.note_delivered(peer)
            elif self._reject_handler is not None:
                self._reject_handler(peer, pulled.reason or "missing_payload")

    def _next_sample_peer(self) -> str:
        """The next connected peer of a shuffled cycle: a peer that had nothing to tell is not
        asked again before the others, who may hold what it lacks (first-hand news lasts
        SHARE_TTL)."""
        connected = set(self._peers)
        self._sample_order = [p for p in self._sample_order if p in connected]
        if not self._sample_order:
            self._sample_order = random.sample(self._peers, len(self._peers))
        return self._sample_order.pop()

    async def _sample(self, peer: str) -> None:
        """Ask ``peer`` for a sample of the announcements pushed to it; a bad entry is counted against it."""
        raw = await self._in_host(_exchange, self._host, ID.from_base58(peer), SAMPLE_PROTOCOL, b"", MAX_SAMPLE_BYTES)
        if not raw:  # no answer (a time-out, an older peer, or one that ignores us): nothing to judge
            return
        announcements, bad = parse_sample(raw, self.swarm)
        if bad and self._reject_handler is not None:
            self._reject_handler(peer, "bad_announcement")
        # A small swarm has no one new to tell: ask ever less often until someone is.
        news = self._note(announcements)
        self._sample_every = SAMPLE_EVERY if news else min(2 * self._sample_every, SAMPLE_EVERY_MAX)

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
            host.set_stream_handler(PEERS_PROTOCOL, partial(_answer_peers, host))
            host.set_stream_handler(BUNDLE_PROTOCOL, partial(_serve, self._answer_bundle, MAX_REQUEST_BYTES))
            host.set_stream_handler(ANNOUNCE_PROTOCOL, partial(_serve, self._take_announcement, MAX_ANNOUNCEMENT_BYTES))
            host.set_stream_handler(SAMPLE_PROTOCOL, partial(_serve, self._answer_sample, 0))
            if not self.private:  # a private node never holds for others
                host.set_stream_handler(HOLD_PROTOCOL, partial(_serve, self._take_hold, MAX_MESSAGE_BYTES))
            async with host.run([listen]):
                self._host = host
                self._addresses = self._own_addresses(host)
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    self._ready.set_result(None)
                    nursery.start_soon(self._refresh_peers, host)
                    nursery.start_soon(self._exchange_peers, host)

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

    async def _push(self, wire: bytes) -> None:
        """Push a signed announcement to up to :data:`PUSH_FANOUT` random connected peers; a
        push that fails is not retried."""
        host = self._host
        peers = host.get_connected_peers()
        async with trio.open_nursery() as nursery:
            for peer in random.sample(peers, min(PUSH_FANOUT, len(peers))):
                nursery.start_soon(_exchange, host, peer, ANNOUNCE_PROTOCOL, wire, 0)

    async def _take_announcement(self, pusher: str, request: bytes) -> bytes:
        """ANNOUNCE_PROTOCOL: keep a peer's own announcement, at most one every PUSH_EVERY
        seconds (closer ones are dropped unread); hand it to the PullPlan."""
        now = time.monotonic()
        if self._is_blocked(pusher, now) or now - self._last_push.get(pusher, float("-inf")) < PUSH_EVERY:
            return b""
        if len(self._last_push) >= _ANNOUNCED_MEMORY:
            self._last_push = {p: t for p, t in self._last_push.items() if t >= now - PUSH_EVERY}
        self._last_push[pusher] = now
        parsed = parse_push(request, self.swarm)
        if parsed is None or parsed[0].author != pusher:
            self._reject_threadsafe(pusher, "bad_announcement")
            return b""
        announcement, wire = parsed
        loop = self._loop
        if self._first_hand.put(announcement, wire, now) and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._note, [announcement])
        return b""

    async def _answer_sample(self, asker: str, _request: bytes) -> bytes:
        """SAMPLE_PROTOCOL: a sample of what peers pushed to this node lately (JSON list, maybe empty)."""
        if self._is_blocked(asker, time.monotonic()):
            return b""
        return canonical_json(self._first_hand.sample(time.monotonic(), exclude=(asker,)))

    async def _refresh_peers(self, host: Any) -> None:
        while True:
            self._peers = [str(p) for p in host.get_connected_peers()]
            self._warn_old_version(host)
            await trio.sleep(_PEER_REFRESH)

    def _warn_old_version(self, host: Any) -> None:
        if self._warned_old_version:
            return
        for peer in host.get_connected_peers():
            try:
                spoken = set(host.get_peerstore().get_protocols(peer))
            except Exception:  # PeerStoreError: identify has not told us yet
                continue
            if spoken.intersection(OLD_PROTOCOLS) and ANNOUNCE_PROTOCOL not in spoken:
                self._warned_old_version = True
                log.warning("libp2p transport: peer %s runs an older swarmnode (gossipsub, protocol v1 or v2); it and "
                            "this node (v%d, announcements pushed and sampled) exchange no bundles until it upgrades",
                            peer, PROTOCOL_VERSION)
                return

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
        if self._is_blocked(pusher, time.monotonic()):
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
    return round_no if is_count(round_no) else None


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
