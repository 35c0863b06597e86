"""The ``libp2p`` transport, protocol version 3: announcements pushed and sampled, bundles pulled.

What goes where (``docs/protocol.md`` section 4), all request/response streams
(:mod:`~swarmnode.swarm.transport.libp2p.streams`):

* ``/swarmnode/announce/3.0.0``: on publish a node pushes its signed
  :class:`~swarmnode.swarm.transport.libp2p.announce.Announcement` (round, size, sha256 digest, the
  PeerIDs that serve the bundle) to a few connected peers; a receiver keeps the newest one
  each peer pushed itself. ``/swarmnode/sample/3.0.0``: while a node has fewer candidates
  than it could pull, it asks its connected peers in turn for a sample of what was pushed to
  them. The rules: :mod:`~swarmnode.swarm.transport.libp2p.spread`. ``/swarmnode/latest/3.0.0``:
  a node asks a peer for anything newer of the authors it pulls from, by name, once their
  next round is near (:mod:`~swarmnode.swarm.transport.libp2p.named`).
* ``/swarmnode/bundle/2.0.0`` serves bundles, ``/swarmnode/hold/2.0.0`` lets a private node
  (behind NAT) leave each bundle with public peers that serve it for it. The rules, and the
  checks of a pulled bundle: :mod:`~swarmnode.swarm.transport.libp2p.holding`.
* ``/swarmnode/peers/1.0.0``, the peer exchange: a node with few connections asks its peers
  for the addresses of theirs. The rules: :mod:`~swarmnode.swarm.transport.libp2p.peer_exchange`.

A node pulls at most ``fetch_per_round`` (K) bundles per round of its own, chosen over the
announcers by :class:`~swarmnode.swarm.transport.pull.PullPlan`: its bytes and verification
work per round stay flat however many peers announce. Whatever a peer sends that does not
check out is counted against it: an announcement (malformed, another swarm's, a bad
signature, a push of someone else's) as ``bad_announcement`` against the peer that sent it,
a pulled bundle (see :func:`~swarmnode.swarm.transport.libp2p.holding.pulled_rejection`, or
``missing_payload``) against its announcer.

py-libp2p runs on trio, the node on asyncio: the host lives in a
:class:`~swarmnode.swarm.transport.libp2p.trio_bridge.TrioThread`, and what runs there is
:class:`~swarmnode.swarm.transport.libp2p.host.Libp2pHost`'s half of the class. :meth:`start` returns once the
host listens, or raises :class:`TransportError` with the host's startup error; :meth:`stop`
cancels everything in the host thread and joins it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
from collections import Counter
from typing import Any, Callable, Sequence

import multiaddr
import trio
from libp2p.peer.id import ID

from swarmnode.backoff import Backoff
from swarmnode.compat.libp2p import batch_window_updates
from swarmnode.swarm.bundle import canonical_json
from swarmnode.swarm.sealing import Sealer
from swarmnode.swarm.transport.base import MAX_MESSAGE_BYTES, NodeIdentity, Transport, TransportError
from swarmnode.swarm.transport.counters import TransportCounters
from swarmnode.swarm.transport.libp2p.announce import MAX_SAMPLE_BYTES, Announcement, parse_sample, source_addresses
from swarmnode.swarm.transport.libp2p.holding import (
    HELD_BYTES,
    HELD_ROUNDS,
    HELD_SIGNER_BYTES,
    OWN_ROUNDS,
    BundleStore,
    Pulled,
)
from swarmnode.swarm.transport.libp2p.host import Libp2pHost
from swarmnode.swarm.transport.libp2p.named import NAMED_PROTOCOL, named_request
from swarmnode.swarm.transport.libp2p.sealed import StreamSeal
from swarmnode.swarm.transport.libp2p.slots import Activity
from swarmnode.swarm.transport.libp2p.spread import SAMPLE_PROTOCOL, FirstHand, Libp2pPull, PullDials, PushPacer
from swarmnode.swarm.transport.libp2p.streams import exchange, pull_bundles
from swarmnode.swarm.transport.libp2p.trio_bridge import TrioThread
from swarmnode.swarm.transport.pull import FETCH_PER_ROUND

log = logging.getLogger("swarmnode.swarm.transport")

STARTUP_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
PULL_INTERVAL = 1.0
# A host that ends on an error is started again after a pause (swarmnode.backoff.Backoff) that doubles
# from 1 s up to this; a host that ran this long since its last start counts as healthy (the
# pause starts over).
REVIVE_MAX_PAUSE = 60.0


class Libp2pTransport(Libp2pHost, Transport):
    name = "libp2p"

    def __init__(self, identity: NodeIdentity, swarm: str, bootstrap: Sequence[str] = (),
                 listen: str | None = None, announce: str | None = None, *, private: bool = False,
                 fetch_per_round: int = FETCH_PER_ROUND, sealer: Sealer | None = None):
        """``private``: the node cannot accept inbound connections; it advertises no address
        (identify and the peer exchange pass on nothing for it), leaves its bundles with
        public peers it dialed, and holds none for others. ``fetch_per_round``: K, the most
        peers' bundles pulled per round of this node (0: none, for a node that only serves).
        ``sealer``: a private swarm's; its streams are sealed
        (:class:`~swarmnode.swarm.transport.libp2p.sealed.StreamSeal`)."""
        super().__init__(identity, swarm, bootstrap, listen, announce)
        self.private = private
        self.served = BundleStore(OWN_ROUNDS, OWN_ROUNDS * MAX_MESSAGE_BYTES, newcomer_share=1.0)
        self.held = BundleStore(HELD_ROUNDS, HELD_BYTES, per_signer=HELD_SIGNER_BYTES)
        self._counts: Counter[str] = Counter()  # refusals by reason in the host thread, for counters()
        self._loop_counts: Counter[str] = Counter()  # ... and on the asyncio loop
        self._seal = StreamSeal(sealer, self._counts)  # used in the host thread only
        self._own_announcement: dict[str, Any] | None = None  # the latest this node signed, for asks by name
        self._pull = Libp2pPull(identity.peer_id, fetch_per_round, rng=random.Random())  # asyncio loop only
        self._host_rng = random.Random()  # host thread only, as are the next three
        self._first_hand = FirstHand(rng=self._host_rng)
        self._pacer = PushPacer()
        self._pull_dials = PullDials()
        self._activity = Activity()
        self._hold_filter: Callable[[bytes], bool] | None = None
        self._blocked: dict[str, float] = {}  # PeerID -> monotonic time it is ignored until
        self._bridge = TrioThread("swarmnode-libp2p", "libp2p transport: the host")
        self._host_args: tuple[multiaddr.Multiaddr, list[multiaddr.Multiaddr] | None] | None = None
        self._host_started = 0.0
        self._restarting = asyncio.Lock()  # _restart_host's; the pull loop revives no host while it is held
        self._revive_backoff = Backoff(1.0, REVIVE_MAX_PAUSE)
        self._host: Any = None
        self._pull_task: asyncio.Task | None = None
        self._peers: list[str] = []
        self._addresses: list[str] = []
        self._warned_releases: set[str] = set()  # 'older', 'newer': each logged once

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
        self._host_args = (listen, announce)
        try:
            await self._start_host()
        except TransportError:
            await self._stop()
            raise
        self._pull_task = asyncio.create_task(self._pull_loop(), name="libp2p-pull")

    async def _start_host(self) -> None:
        assert self._host_args is not None, "start() sets the host's addresses before the host starts"
        listen, announce = self._host_args
        try:
            await self._bridge.start(lambda: self._host_main(listen, announce), STARTUP_TIMEOUT)
        except Exception as exc:
            if isinstance(exc, asyncio.TimeoutError):
                raise TransportError(f"the libp2p host did not start within {STARTUP_TIMEOUT:.0f} s") from None
            raise TransportError(f"the libp2p host could not listen on {self.listen}: {exc}") from None
        self._host_started = time.monotonic()

    async def _revive(self) -> None:
        """The host ended on an error (the bridge logged it): start a new one on the same
        addresses, with the same stores and pull plan, after a pause that doubles with every
        failure in a row, so a node out of its network keeps training and comes back to it."""
        if time.monotonic() - self._host_started >= REVIVE_MAX_PAUSE:  # it ran healthy since its last start
            self._revive_backoff.reset()
        pause = self._revive_backoff.next_delay()
        log.warning("libp2p transport: starting the host again in %.0f s", pause)
        await asyncio.sleep(pause)
        if not self._bridge.running():  # else _become_private started one meanwhile
            await self._restart_host()

    async def _become_private(self) -> None:
        """The host starts again advertising no address and without the hold protocol (a
        private node holds nothing for others); its stores and pull plan stay. A host that
        fails to start is revived by the pull loop."""
        self.private = True
        assert self._host_args is not None, "the join loop runs only after start()"
        self._host_args = (self._host_args[0], [])
        await self._restart_host()

    async def _restart_host(self) -> None:
        """Stop the host and start a new one on :attr:`_host_args`, one restart at a time."""
        async with self._restarting:
            await self._bridge.stop(STOP_TIMEOUT)
            self._peers = []
            try:
                await self._start_host()
            except TransportError as exc:
                await self._bridge.stop(STOP_TIMEOUT)
                log.warning("libp2p transport: %s", exc)
                return
        log.info("libp2p transport: the host runs again, listening on %s", ", ".join(self.addresses()) or "nothing")

    async def _stop(self) -> None:
        if self._pull_task is not None:
            self._pull_task.cancel()
            await asyncio.gather(self._pull_task, return_exceptions=True)
            self._pull_task = None
        if not await self._bridge.stop(STOP_TIMEOUT):
            log.warning("libp2p transport: the host thread did not stop within %.0f s", STOP_TIMEOUT)
        self._peers = []

    async def _publish(self, round_no: int, data: bytes) -> None:
        if len(data) > MAX_MESSAGE_BYTES:
            raise ValueError(f"message of {len(data)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")
        self.served.put(self.identity.peer_id, round_no, data)
        try:
            # Holders first: once a peer reads the announcement, every holder it names has the bundle.
            holders = await self._bridge.run(self._leave_with_holders, data) if self.private else {}
            # Where its sources listen, so that a peer that never met them can dial them.
            addresses = source_addresses({self.identity.peer_id: self._addresses, **holders})
            announcement = Announcement(self.identity.peer_id, self.swarm, round_no, len(data),
                                        hashlib.sha256(data).hexdigest(), (self.identity.peer_id, *holders), addresses)
            self._own_announcement = announcement.signed(self.identity)
            wire = canonical_json(self._own_announcement)
            # Pushed in the background: a slow peer must not hold up the round.
            await asyncio.to_thread(self._bridge.start_soon, self._push, wire)
        finally:
            self._pull.next_round(time.monotonic())  # the round was made, announced or not: its K fetches begin

    async def _dial(self, maddr: str) -> bool:
        try:
            return await self._bridge.run(self._trio_dial, maddr)
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
        host = self._host
        if host is None:  # not started
            return
        try:
            self._bridge.start_soon(host.disconnect, ID.from_base58(peer_id))
        except (trio.RunFinishedError, ValueError, RuntimeError) as exc:
            log.debug("libp2p transport: cannot disconnect %s: %s", peer_id, exc)

    def _is_blocked(self, peer_id: str, now: float) -> bool:
        """Whether :meth:`block` still holds for ``peer_id`` at monotonic time ``now``; any thread."""
        return self._blocked.get(peer_id, 0.0) > now

    def addresses(self) -> list[str]:
        return list(self._addresses)

    def counters(self) -> TransportCounters:
        """What the host dropped or refused by reason (pushes read too soon, holds without
        room), held bundles evicted to make room, and what the held store holds, by the
        authors' standing with it."""
        held = self.held
        return TransportCounters(refused=dict(self._counts + self._loop_counts), evicted=held.evicted,
                                 stored_bytes={"held": held.room.total}, room=held.room.stats())

    def _heard(self, announcements: list[Announcement]) -> int:
        """Announcements pushed to this node that checked out, on the event loop."""
        now = time.monotonic()
        return self._pull.heard(announcements, now, lambda p: self._is_blocked(p, now), pushed=True)

    async def _pull_loop(self) -> None:
        while True:
            if not self._bridge.running() and not self._restarting.locked():
                await self._revive()
                continue
            try:
                await self._pull_once()
            except Exception as exc:  # the host stopping under a pull; the next round tries again
                log.debug("libp2p transport: a pull failed: %r", exc)
            await asyncio.sleep(PULL_INTERVAL)

    async def _pull_once(self) -> None:
        """Sample announcements if the budget lacks candidates; pull what the plan allows now;
        deliver what checks out, report what does not."""
        plan = self._pull.plan
        established = plan.established(self._established, self._peers)
        sample_from = self._pull.sample_peer(time.monotonic(), self._peers, established)
        if sample_from is not None:
            await self._sample(sample_from)
        asks = self._pull.named_asks(time.monotonic(), self._peers, established)
        if asks:
            await asyncio.gather(*(self._ask_named(peer, wanted) for peer, wanted in asks.items()))
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

    async def _sample(self, peer: str) -> None:
        """Ask ``peer`` for a sample of the announcements pushed to it; a bad entry is counted against it."""
        raw = await self._bridge.run(exchange, self._host, ID.from_base58(peer), SAMPLE_PROTOCOL, b"", MAX_SAMPLE_BYTES,
                                     self._seal)
        if not raw:  # no answer (a time-out, an older peer, or one that ignores us): nothing to judge
            return
        announcements, bad = parse_sample(raw, self.swarm)
        if bad and self._reject_handler is not None:
            self._reject_handler(peer, "bad_announcement")
        now = time.monotonic()
        self._pull.sampled(announcements, now, lambda p: self._is_blocked(p, now))

    async def _ask_named(self, peer: str, wanted: list[tuple[str, int]]) -> None:
        """Ask ``peer`` for anything newer of the (author, round) pairs ``wanted``; an answer
        with anything else (junk, a forgery, another author's) is counted against it."""
        raw = await self._bridge.run(exchange, self._host, ID.from_base58(peer), NAMED_PROTOCOL,
                                     named_request(wanted), MAX_SAMPLE_BYTES, self._seal)
        if not raw:  # no answer: nothing to judge
            return
        announcements, bad = parse_sample(raw, self.swarm, {author for author, _ in wanted})
        if bad:
            self._loop_counts["named_answer"] += 1
            if self._reject_handler is not None:
                self._reject_handler(peer, "bad_announcement")
        now = time.monotonic()
        self._pull.heard(announcements, now, lambda p: self._is_blocked(p, now))

    async def _fetch(self, wanted: list[tuple[str, Announcement]]) -> list[Pulled]:
        """One :class:`Pulled` per (author, announcement), pulled concurrently in the host thread."""
        return await self._bridge.run(pull_bundles, self._host, self.identity.peer_id, wanted, self._pull_dials,
                                     self._seal)
