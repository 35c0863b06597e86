"""The transport interface: how a node's signed bundles reach the other nodes of its swarm.

A transport moves opaque bytes. It authenticates nothing the node relies on: every message
it hands over still goes through :class:`swarmnode.swarm.bundle.BundleVerifier`. What it promises:

* :meth:`Transport.start` returns within seconds whether or not a bootstrap peer answers. A
  node that reaches none logs one warning, keeps running alone and retries in the background
  with exponential backoff; it joins as soon as one answers, and rejoins the same way if it
  later loses every peer.
* :meth:`Transport.publish` never raises into the round: failures are logged and counted.
* The handler runs on the asyncio loop that called ``start``, once per distinct message
  from another peer; never for the node's own messages.
* :meth:`Transport.stop` is idempotent and leaves no thread, process or socket behind.
* With :meth:`Transport.use_lan`, the join loop also dials the nodes of its swarm that
  :class:`~swarmnode.swarm.transport.lan.LanDiscovery` finds on the local network, through the
  same ``_dial`` (whose handshake holds an address to its PeerID). A node with no bootstrap
  list of its own whose reachability is ``auto`` (``follow``) takes the first way in a LAN
  neighbour advertises as its bootstrap list, and goes private when ``follow`` says so
  (:meth:`Transport._become_private`): the transport's reachability is decided again then,
  once, instead of only before it starts, because what decides it (the neighbour's NAT) can be
  known only after.

hivemind and py-libp2p cannot be imported into one process, so this module imports neither;
:func:`swarmnode.swarm.transport.create_transport` imports only the implementation asked for.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from swarmnode.swarm.address import peer_id_of
from swarmnode.swarm.bundle import BundleRejected, open_envelope
from swarmnode.swarm.transport.counters import TransportCounters
from swarmnode.swarm.transport.joining import JoinLoop, bootstrap_in_reach

if TYPE_CHECKING:
    from swarmnode.swarm.lanrecord import WayIn
    from swarmnode.swarm.transport.lan import LanDiscovery

LAN_DIALS = 4  # dials of LAN-found peers in flight: each holds worker threads (hivemind's DHT calls) for seconds

log = logging.getLogger("swarmnode.swarm.transport")

MessageHandler = Callable[[bytes], None]
# (authenticated author PeerID, reason code): a message the transport itself dropped.
RejectHandler = Callable[[str, str], None]
# (a LAN neighbour's way in, whether that neighbour is behind NAT) -> whether this node is private.
FollowLan = Callable[[Sequence[str], bool], bool]

DEFAULT_LISTEN = "/ip4/0.0.0.0/tcp/0"
# Enough for BundleLimits.max_bytes (256 KiB) plus framing.
MAX_MESSAGE_BYTES = 320 * 1024
_RECENT_DIGESTS = 4096


class NodeIdentity(Protocol):
    """What a transport needs of :class:`swarmnode.swarm.identity.Identity`."""

    peer_id: str
    public_key: bytes

    @property
    def seed(self) -> bytes: ...

    def sign(self, data: bytes) -> bytes: ...

    def private_key_protobuf(self) -> bytes: ...


@dataclass
class TransportStats:
    """Counters for metrics and the dashboard; written on the asyncio loop only."""

    published: int = 0
    publish_errors: int = 0
    delivered: int = 0
    duplicates: int = 0
    handler_errors: int = 0
    join_attempts: int = 0


def relay_rejection(author: str, data: bytes) -> str | None:
    """Why a relay must not pass ``data`` on from PeerID ``author`` (a bundle reason code:
    ``too_large``, the envelope's reasons, ``peer_id_mismatch`` for a bundle signed by
    another key), or None when it is a well-formed bundle envelope signed by ``author``.

    Cheap (no payload parsing) and it never raises.
    """
    if len(data) > MAX_MESSAGE_BYTES:
        return "too_large"
    try:
        sender, _ = open_envelope(data)
    except BundleRejected as exc:
        return exc.reason
    return None if sender == author else "peer_id_mismatch"


def local_ipv4_addresses() -> list[str]:
    """This host's IPv4 addresses, loopback first, for expanding a ``0.0.0.0`` listen address."""
    found = ["127.0.0.1"]
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        # A UDP "connect" sends nothing; it only picks the interface a route would use.
        probe.connect(("192.0.2.1", 9))
        found.append(probe.getsockname()[0])
    except OSError:
        pass
    finally:
        probe.close()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.append(str(info[4][0]))
    except OSError:
        pass
    return list(dict.fromkeys(a for a in found if not a.startswith("0.")))


def expand_unspecified(maddr: str) -> list[str]:
    """``/ip4/0.0.0.0/...`` as one dialable multiaddr per local IPv4 address; others unchanged."""
    if maddr.startswith("/ip4/0.0.0.0/"):
        rest = maddr[len("/ip4/0.0.0.0"):]
        return [f"/ip4/{ip}{rest}" for ip in local_ipv4_addresses()]
    return [maddr]


class Transport(ABC):
    """One node's link to its swarm. Subclasses implement the ``_``-prefixed hooks."""

    name: ClassVar[str]
    # False for transports whose peers find each other without bootstrap addresses.
    uses_bootstrap: ClassVar[bool] = True
    private: bool = False  # behind NAT: advertises no address (each transport's __init__ sets it)

    def __init__(self, identity: NodeIdentity, swarm: str, bootstrap: Sequence[str] = (),
                 listen: str | None = None, announce: str | None = None):
        """``bootstrap``: multiaddrs ending in ``/p2p/<PeerID>``; ``listen``: where to accept
        connections (None: a free TCP port on all interfaces); ``announce``: the address other
        peers should dial, when it differs from what the node sees (NAT, port forwarding)."""
        self.identity = identity
        self.swarm = swarm
        self.bootstrap = [b for b in bootstrap if peer_id_of(b) != identity.peer_id]
        self.listen = listen or DEFAULT_LISTEN
        self.announce = announce
        self.stats = TransportStats()
        self._handler: MessageHandler | None = None
        self._reject_handler: RejectHandler | None = None
        self._established: Callable[[str], bool] | None = None
        self._recent: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._join_task: asyncio.Task | None = None
        self.lan: LanDiscovery | None = None
        self._follow: FollowLan | None = None
        self._lan_dials: set[asyncio.Task] = set()  # at most LAN_DIALS
        self._started = False
        self._stopped = False

    # -- the interface ---------------------------------------------------------------------

    def set_handler(self, handler: MessageHandler) -> None:
        """Call ``handler(data)`` on the asyncio loop for each new message from another peer."""
        self._handler = handler

    def set_reject_handler(self, handler: RejectHandler) -> None:
        """Call ``handler(author, reason)`` on the asyncio loop for each message the transport
        drops itself (a relay check) whose author it authenticated, so it is counted like the
        bundles the node rejects."""
        self._reject_handler = handler

    def set_established(self, established: Callable[[str], bool]) -> None:
        """Which peers have a record at this node (its :class:`~swarmnode.swarm.standing.Standing`),
        for a transport that chooses whom to fetch: newcomers share a minority of the fetches.
        Without it such a transport takes the peers it has received from or routes to."""
        self._established = established

    def use_lan(self, discovery: LanDiscovery, follow: FollowLan | None = None) -> None:
        """Advertise this node on the local network and join the peers of its swarm found there
        (call before :meth:`start`; a transport without bootstrap peers ignores it).

        ``follow``, for a node with no bootstrap list whose reachability is ``auto``
        (:func:`swarmnode.swarm.reachability.follow_lan`): given the way in a neighbour
        advertises and whether it is behind NAT, whether this node is private. The node then
        takes that way in as its bootstrap list (see the module doc)."""
        self.lan = discovery
        self._follow = follow if not self.bootstrap else None

    def lan_peers(self) -> set[str]:
        """PeerIDs of peers found on the local network that a handshake vouched for: this node
        reached them at an address found there, or they are connected now."""
        return self.lan.verified(self.peers()) if self.lan is not None else set()

    def lan_counts(self) -> dict[str, int]:
        """The LAN discovery's counters (:meth:`~swarmnode.swarm.lanrecord.LanPeers.counts`);
        empty when it is off or could not start."""
        return self.lan.counts() if self.lan is not None else {}

    async def start(self) -> None:
        """Open the transport; returns once it listens, whether or not any peer answers.

        Raises only for local problems the user must fix (a port in use, a bad listen
        address), as :class:`TransportError`.
        """
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
        await self._start()
        self._started = True
        if self.uses_bootstrap:
            self._join_task = asyncio.create_task(self._keep_joined(), name=f"{self.name}-join")

    async def stop(self) -> None:
        """Close everything the transport opened; safe to call twice, and a no-op before ``start``."""
        if self._stopped or not self._started:
            return
        self._stopped = True
        if self._join_task is not None:
            self._join_task.cancel()
            await asyncio.gather(self._join_task, return_exceptions=True)
        for task in list(self._lan_dials):
            task.cancel()
        await asyncio.gather(*self._lan_dials, return_exceptions=True)
        if self.lan is not None:
            await self.lan.stop()
        await self._stop()

    def block(self, peer_id: str, seconds: float) -> None:
        """Drop everything from ``peer_id`` for ``seconds`` inside the transport, where it can, so
        a banned flooder costs no signature checks; thread-safe. Pull-based transports, where a
        peer cannot push, need nothing here."""

    def counters(self) -> TransportCounters | None:
        """What the transport refused, evicted and holds below the bundle checks, as of now
        (``hivemind``: its DHT's record validator and storage budget, and how its
        announcements were stored; ``libp2p``: its host's refusals and held store); None for
        a transport that keeps none, or none yet."""
        return None

    def refusals(self) -> dict[str, int]:
        """What the transport refused below the bundle checks, by reason, as of now (of
        :meth:`counters`); empty when it keeps none."""
        counters = self.counters()
        return dict(counters.refused) if counters is not None else {}

    async def publish(self, round_no: int, data: bytes) -> None:
        """Offer ``data`` (this node's bundle for ``round_no``) to the swarm; never raises."""
        if not self._started or self._stopped:
            log.warning("%s transport: publish of round %d skipped: the transport is not running",
                        self.name, round_no)
            self.stats.publish_errors += 1
            return
        self._remember(data)  # a transport that reads its own records back must not deliver them
        try:
            await self._publish(round_no, bytes(data))
        except Exception as exc:  # the round must go on whatever the network does
            self.stats.publish_errors += 1
            log.warning("%s transport: publishing round %d failed: %r", self.name, round_no, exc)
        else:
            self.stats.published += 1

    async def _become_private(self) -> None:
        """Stop advertising any address from now on (the transport restarts what it must). A
        failure is logged; the transport recovers from it as from any other."""
        self.private = True

    @abstractmethod
    def peers(self) -> list[str]:
        """PeerIDs of the peers this node is connected to now."""

    @abstractmethod
    def addresses(self) -> list[str]:
        """This node's dialable multiaddrs, each ending in ``/p2p/<PeerID>`` (usable as --bootstrap)."""

    # -- hooks -----------------------------------------------------------------------------

    @abstractmethod
    async def _start(self) -> None:
        """Start listening; raise TransportError for local problems."""

    @abstractmethod
    async def _stop(self) -> None:
        """Release everything ``_start`` opened."""

    @abstractmethod
    async def _publish(self, round_no: int, data: bytes) -> None:
        """Send ``data``; may raise, :meth:`publish` logs it."""

    @abstractmethod
    async def _dial(self, maddr: str) -> bool:
        """Try to connect to one bootstrap peer; True when it answered. Must not raise."""

    # -- shared machinery ------------------------------------------------------------------

    def _deliver(self, data: bytes, author: str | None = None) -> None:
        """Hand one received message to the handler; call on the asyncio loop only.

        ``author``: the sender the transport authenticated, if it did (on libp2p, the
        announcer whose signed bundle a pull fetched). A repeat of a message already delivered
        is then a replay by its author, reported to the reject handler; without an author (a
        record read twice) it is not."""
        if not self._remember(data):
            self.stats.duplicates += 1
            if author is not None and self._reject_handler is not None:
                self._reject_handler(author, "replay")
            return
        self.stats.delivered += 1
        if self._handler is None:
            return
        try:
            self._handler(data)
        except Exception:  # a handler bug must not kill the receive path
            self.stats.handler_errors += 1
            log.exception("%s transport: the message handler failed", self.name)

    def _deliver_threadsafe(self, data: bytes, author: str | None = None) -> None:
        """:meth:`_deliver` from any thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._deliver, data, author)

    def _reject_threadsafe(self, author: str, reason: str) -> None:
        """Report a message dropped inside the transport, from any thread."""
        loop, handler = self._loop, self._reject_handler
        if handler is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(handler, author, reason)

    def _remember(self, data: bytes) -> bool:
        """Record ``data`` as seen; False if it was seen recently."""
        digest = hashlib.sha256(data).digest()
        if digest in self._recent:
            self._recent.move_to_end(digest)
            return False
        self._recent[digest] = None
        while len(self._recent) > _RECENT_DIGESTS:
            self._recent.popitem(last=False)
        return True

    async def _dial_found(self, lan: LanDiscovery, maddr: str) -> None:
        ok = await self._dial(maddr)
        lan.dialed(maddr, ok)
        if ok:
            log.info("%s transport: joined %s, found on the local network", self.name, maddr)

    async def _take_way_in(self, lan: LanDiscovery, way: WayIn) -> None:
        """Join through a LAN neighbour's way in; go private if ``follow`` says so; advertise
        what changed."""
        assert self._follow is not None
        self.bootstrap = [a for a in way.addresses if peer_id_of(a) != self.identity.peer_id]
        private = self._follow(self.bootstrap, way.behind_nat)
        log.info("%s transport: joining the wider swarm through the way in a node on the local network "
                 "advertises (%s)%s", self.name, ", ".join(self.bootstrap),
                 "; this node is taken for one behind NAT" if private and not self.private else "")
        if private and not self.private:
            try:
                await self._become_private()
            except Exception:  # the transport's own recovery takes over; the join loop goes on
                log.exception("%s transport: restarting as a node behind NAT failed", self.name)
        await lan.advertise(self.addresses(), self.bootstrap)

    async def _keep_joined(self) -> None:
        """Dial the bootstrap peers until one answers; again whenever no bootstrap peer is
        connected (:class:`~swarmnode.swarm.transport.joining.JoinLoop`). Beside them, each
        peer found on the LAN that is not connected, when its dial is due
        (:meth:`~swarmnode.swarm.lanrecord.LanPeers.to_dial`), once the LAN discovery started
        here (zeroconf's start takes a second or two: not in :meth:`start`'s way)."""
        if self.lan is not None:
            await self.lan.start(self.addresses(), self.bootstrap)
        lan = self.lan if self.lan is not None and self.lan.running else None
        if not self.bootstrap:
            if lan is None:
                log.warning("%s transport: no bootstrap peers configured: this node trains alone until a peer "
                            "dials it at %s (give peers --bootstrap <address> or an invite from `swarmnode "
                            "invite`, or set --bootstrap/--bootstrap-file)",
                            self.name, ", ".join(self.addresses()[:2]) or "its listen address")
                return
            log.info("%s transport: no bootstrap peers configured: looking for nodes of swarm '%s' on the "
                     "local network (mDNS)", self.name, self.swarm)
        loop = JoinLoop(self.bootstrap)
        warned = False
        while True:
            if lan is not None:
                lan.changed.clear()
            peers = self.peers()
            way = lan.table.take_way_in(peers) if lan is not None and self._follow is not None else None
            if way is not None:
                assert lan is not None
                await self._take_way_in(lan, way)
                loop, peers = JoinLoop(self.bootstrap), self.peers()
            dial = loop.to_dial(bootstrap_in_reach(peers, self.bootstrap)) if self.bootstrap else []
            for maddr in lan.to_dial(peers, LAN_DIALS - len(self._lan_dials)) if lan is not None else []:
                assert lan is not None
                # Each on its own: a dial nobody answers must not hold up the next peer found.
                task = asyncio.create_task(self._dial_found(lan, maddr), name=f"{self.name}-lan-dial")
                self._lan_dials.add(task)
                task.add_done_callback(self._lan_dials.discard)
            if dial:
                self.stats.join_attempts += 1
            results = await asyncio.gather(*(self._dial(m) for m in dial))
            answered = [m for m, ok in zip(dial, results) if ok]
            if answered:
                log.info("%s transport: joined swarm '%s' through %s", self.name, self.swarm, answered[0])
                warned = False
            elif dial and not warned and not self.peers():
                log.warning("%s transport: none of the %d bootstrap peer(s) answered (%s); training solo and "
                            "retrying in the background with backoff up to %.0f s", self.name,
                            len(self.bootstrap), ", ".join(self.bootstrap[:3]), loop.backoff.cap)
                warned = True
            delay = loop.wait(bool(dial), bool(answered))
            if lan is None:
                await asyncio.sleep(delay)
                continue
            # A peer found on the LAN is dialed at once rather than at the next look.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(lan.changed.wait(), delay)


class TransportError(RuntimeError):
    """The transport cannot start for a reason the user must fix; ``str()`` says what to do."""
