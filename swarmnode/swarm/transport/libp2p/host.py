"""The host thread's side of the ``libp2p`` transport: the py-libp2p host it runs, the streams it answers.

:class:`Libp2pHost` is the half of
:class:`~swarmnode.swarm.transport.libp2p.transport.Libp2pTransport` that runs in the host's trio
thread (:class:`~swarmnode.swarm.transport.libp2p.trio_bridge.TrioThread`): it starts the host and
its stream handlers (a peer's push, sample request, ask by name, bundle request, hold), keeps the
list of connected peers, runs the peer exchange, dials, and leaves a private node's bundles with
holders. What it hands the asyncio side goes through the event loop
(``loop.call_soon_threadsafe``); nothing here touches the pull plan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from functools import partial
from typing import Any, Callable, Sequence

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr

from swarmnode.compat.libp2p import InboundSlots, allow_redial, keep_own_keys, release_inbound_slots
from swarmnode.swarm.address import peer_id_of
from swarmnode.swarm.bundle import canonical_json
from swarmnode.swarm.transport.base import MAX_MESSAGE_BYTES, NodeIdentity, TransportError, expand_unspecified
from swarmnode.swarm.transport.libp2p.announce import MAX_ANNOUNCEMENT_BYTES, Announcement, parse_push
from swarmnode.swarm.transport.libp2p.holding import (
    BUNDLE_PROTOCOL,
    HELD_ACK,
    HOLD_PROTOCOL,
    MAX_REQUEST_BYTES,
    BundleStore,
    choose_holders,
    hold_rejection,
    parse_request,
)
from swarmnode.swarm.transport.libp2p.named import (
    MAX_NAMED_REQUEST_BYTES,
    NAMED_PROTOCOL,
    named_answer,
    parse_named_request,
)
from swarmnode.swarm.transport.libp2p.peer_exchange import EXCHANGE_EVERY, EXCHANGE_FIRST, PEERS_PROTOCOL, ExchangeRound
from swarmnode.swarm.transport.libp2p.sealed import StreamSeal
from swarmnode.swarm.transport.libp2p.slots import PER_ADDRESS, Activity, to_close
from swarmnode.swarm.transport.libp2p.spread import (
    ANNOUNCE_PROTOCOL,
    PROTOCOL_VERSION,
    SAMPLE_PROTOCOL,
    FirstHand,
    PullDials,
    PushPacer,
    other_release,
    push_targets,
)
from swarmnode.swarm.transport.libp2p.streams import (
    answer_peers,
    ask_peers,
    dialable,
    leave_with_holders,
    push_announcement,
    serve,
)
from swarmnode.swarm.transport.libp2p.trio_bridge import TrioThread

log = logging.getLogger("swarmnode.swarm.transport")

DIAL_TIMEOUT = 5.0
PEER_REFRESH = 0.5
# How long a host's connections and listeners may take to close when it ends.
CLOSE_TIMEOUT = 3.0
SLOT_CHECK_S = 1.0  # seconds between looks at the inbound slots (libp2p.slots)


async def _close_network(host: Any) -> None:
    """Close every connection and listener of ``host``, shielded and bounded. py-libp2p's own
    shutdown runs inside the cancelled scope and never gets this far, and a host that ended on
    an error left its sockets open: its peers kept writing to connections nobody read, and
    failed every stream to the node when it came back."""
    # trio_typing's stale stubs (installed with py-libp2p) lack trio's own shield argument
    with trio.move_on_after(CLOSE_TIMEOUT, shield=True):  # pyright: ignore[reportCallIssue]
        await host.get_network().close()


class Libp2pHost:
    """The host-thread methods of the transport (a mixin of ``Libp2pTransport``, which sets
    every attribute below in its ``__init__``). Each runs in the host's trio thread."""

    identity: NodeIdentity
    swarm: str
    bootstrap: Sequence[str]
    announce: str | None
    private: bool
    served: BundleStore
    held: BundleStore
    _counts: Counter[str]
    _seal: StreamSeal
    _own_announcement: dict[str, Any] | None
    _host_rng: random.Random
    _first_hand: FirstHand
    _pacer: PushPacer
    _pull_dials: PullDials
    _activity: Activity
    _hold_filter: Callable[[bytes], bool] | None
    _bridge: TrioThread
    _host: Any
    _peers: list[str]
    _addresses: list[str]
    _warned_releases: set[str]
    _loop: asyncio.AbstractEventLoop | None
    _is_blocked: Callable[[str, float], bool]
    _reject_threadsafe: Callable[[str, str], None]
    _heard: Callable[[list[Announcement]], int]

    async def _host_main(self, listen: multiaddr.Multiaddr, announce: list[multiaddr.Multiaddr] | None) -> None:
        try:
            key_pair = create_new_key_pair(self.identity.seed)
            host = new_host(key_pair=key_pair, announce_addrs=announce)
            # Else a host accepts 250 inbound connections in its whole life; and a cap per address.
            slots = release_inbound_slots(host, PER_ADDRESS, lambda reason: self._counts.update([reason]))
            keep_own_keys(host)  # else the host fails once it has met 1,000 peers
            self._pull_dials = PullDials()  # a host started again has none of the last one's connections
            own_id = host.get_id()
            if str(own_id) != self.identity.peer_id:
                raise TransportError(f"libp2p derived PeerID {own_id} from the node key, expected "
                                     f"{self.identity.peer_id}")
            answers = {BUNDLE_PROTOCOL: (self._answer_bundle, MAX_REQUEST_BYTES),
                       ANNOUNCE_PROTOCOL: (self._take_announcement, MAX_ANNOUNCEMENT_BYTES),
                       SAMPLE_PROTOCOL: (self._answer_sample, 0),
                       NAMED_PROTOCOL: (self._answer_named, MAX_NAMED_REQUEST_BYTES)}
            if not self.private:  # a private node never holds for others
                answers[HOLD_PROTOCOL] = (self._take_hold, MAX_MESSAGE_BYTES)
            handlers = {PEERS_PROTOCOL: partial(answer_peers, host, self._host_rng),
                        **{protocol: partial(serve, answer, limit, protocol, self._seal)
                           for protocol, (answer, limit) in answers.items()}}
            for protocol, handler in handlers.items():
                host.set_stream_handler(TProtocol(protocol), partial(self._from_peer, handler))
            async with host.run([listen]):
                self._host = host
                self._addresses = self._own_addresses(host)
                try:
                    async with trio.open_nursery() as nursery:
                        self._bridge.ready(nursery)
                        nursery.start_soon(self._refresh_peers, host)
                        nursery.start_soon(self._exchange_peers, host)
                        nursery.start_soon(self._keep_slots_free, host, slots)
                finally:
                    await _close_network(host)
        finally:
            self._peers = []

    async def _from_peer(self, handler: Callable[[Any], Any], stream: Any) -> None:
        """A stream a peer opened: its connection is in use (libp2p.slots.Activity); then ``handler``."""
        with contextlib.suppress(Exception):  # a stream whose connection is already gone
            self._activity.seen(str(stream.muxed_conn.peer_id), time.monotonic())
        await handler(stream)

    async def _keep_slots_free(self, host: Any, slots: InboundSlots) -> None:
        """Every :data:`SLOT_CHECK_S`, close the idle inbound connections
        :func:`~swarmnode.swarm.transport.libp2p.slots.to_close` names, so newcomers find a slot."""
        while True:
            for peer in to_close(slots.held(), self._activity, slots.free(), time.monotonic()):
                self._counts["inbound_idle"] += 1
                with trio.move_on_after(CLOSE_TIMEOUT):
                    try:
                        await host.disconnect(ID.from_base58(peer))
                    except Exception as exc:  # a connection already going
                        log.debug("libp2p transport: closing the idle connection of %s failed: %r", peer, exc)
            await trio.sleep(SLOT_CHECK_S)

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
        now = time.monotonic()
        targets = push_targets(self._host.get_connected_peers(), self._host_rng,
                               lambda p: self._activity.active(str(p), now))
        await push_announcement(self._host, wire, targets, self._seal)

    async def _take_announcement(self, pusher: str, request: bytes) -> bytes:
        """ANNOUNCE_PROTOCOL: keep a peer's own announcement, at most one every PUSH_EVERY
        seconds (closer ones are dropped unread); hand it to the pull plan."""
        now = time.monotonic()
        if self._is_blocked(pusher, now):
            return b""
        if not self._pacer.admit(pusher, now):
            self._counts["push_too_soon"] += 1
            return b""
        parsed = parse_push(request, self.swarm)
        if parsed is None or parsed[0].author != pusher:
            self._reject_threadsafe(pusher, "bad_announcement")
            return b""
        announcement, wire = parsed
        loop = self._loop
        if self._first_hand.put(announcement, wire, now) and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._heard, [announcement])
        return b""

    async def _answer_sample(self, asker: str, _request: bytes) -> bytes:
        """SAMPLE_PROTOCOL: a sample of what peers pushed to this node lately (JSON list, maybe empty)."""
        if self._is_blocked(asker, time.monotonic()):
            return b""
        return canonical_json(self._first_hand.sample(time.monotonic(), exclude=(asker,)))

    async def _answer_named(self, asker: str, request: bytes) -> bytes:
        """NAMED_PROTOCOL: the latest announcement of each author named that this node holds
        (its own, or one pushed to it lately), if newer than the round named; a request that
        is not a list of (PeerID, round) pairs is refused unanswered."""
        now = time.monotonic()
        if self._is_blocked(asker, now):
            return b""
        wanted = parse_named_request(request)
        if wanted is None:
            self._counts["named_request"] += 1
            return b""
        return canonical_json(named_answer(wanted, self.identity.peer_id, self._own_announcement,
                                           lambda author: self._first_hand.latest(author, now)))

    async def _refresh_peers(self, host: Any) -> None:
        while True:
            self._peers = [str(p) for p in host.get_connected_peers()]
            self._warn_other_release(host)
            await trio.sleep(PEER_REFRESH)

    def _warn_other_release(self, host: Any) -> None:
        """Log once for a peer of an older release and once for a peer of a newer one, when
        its announcements and this node's cannot cross (libp2p.spread.other_release)."""
        if len(self._warned_releases) == 2:
            return
        for peer in host.get_connected_peers():
            try:
                spoken = set(host.get_peerstore().get_protocols(peer))
            except Exception:  # PeerStoreError: identify has not told us yet
                continue
            release = other_release(spoken)
            if release is None or release in self._warned_releases:
                continue
            self._warned_releases.add(release)
            if release == "older":
                log.warning("libp2p transport: peer %s runs an older swarmnode (gossipsub, protocol v1 or v2); it and "
                            "this node (v%d, announcements pushed and sampled) exchange no bundles until it upgrades",
                            peer, PROTOCOL_VERSION)
            else:
                log.warning("libp2p transport: peer %s runs a newer swarmnode (%s; this node speaks v%d): it and this "
                            "node exchange no bundles until this node upgrades swarmnode", peer,
                            ", ".join(sorted(p for p in spoken if p.startswith("/swarmnode/announce/"))),
                            PROTOCOL_VERSION)

    async def _exchange_peers(self, host: Any) -> None:
        """Every few seconds, one :class:`~swarmnode.swarm.transport.libp2p.peer_exchange.ExchangeRound`:
        ask the peers it names for theirs, dial the ones it finds worth it."""
        bootstrap = {p for m in self.bootstrap if (p := peer_id_of(m))}  # dialed by the join loop only
        await trio.sleep(EXCHANGE_FIRST)
        while True:
            turn = ExchangeRound(self.identity.peer_id, host.get_connected_peers(), self._host_rng, bootstrap)
            for peer in turn.ask:
                for maddr in await ask_peers(host, peer):
                    if turn.enough():
                        break
                    if turn.worth_dialing(maddr) and await self._trio_dial(maddr):
                        turn.dialed(maddr)
            await trio.sleep(EXCHANGE_EVERY)

    async def _trio_dial(self, maddr: str) -> bool:
        try:
            info = info_from_p2p_addr(multiaddr.Multiaddr(maddr))
            # The swarm's negative cache would refuse a peer that failed before for minutes;
            # our own backoff already paces these dials.
            allow_redial(self._host, info.peer_id)
            with trio.fail_after(DIAL_TIMEOUT):
                await self._host.connect(info)
        except Exception as exc:
            log.debug("libp2p transport: dialing %s failed: %r", maddr, exc)
            return False
        self._pull_dials.kept(str(info.peer_id))  # joined or met in the peer exchange: never closed for a pull
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
        # Whether there is room for the pusher comes first: a crowd of new keys beyond its
        # share costs no decompression and no signature check.
        reason = self.held.refused_outright(pusher, len(data))
        if reason is not None:
            self._counts["hold_" + reason] += 1
            return b""
        round_no, reason = hold_rejection(pusher, data)
        if reason is not None or round_no is None:  # hold_rejection gives a round exactly when no reason
            self._reject_threadsafe(pusher, reason or "malformed")
            return b""
        if self._hold_filter is not None and not self._hold_filter(data):
            return b""
        reason = self.held.put(pusher, round_no, data)
        if reason is not None:
            self._counts["hold_" + reason] += 1
            return b""
        return HELD_ACK

    async def _leave_with_holders(self, data: bytes) -> dict[str, list[str]]:
        """Push ``data`` to the holders :func:`~swarmnode.swarm.transport.libp2p.holding.choose_holders`
        picks among the connected peers it can dial (all a private node has dialed carry
        addresses); the ones that took it, each with its addresses."""
        host = self._host
        public = {str(p): p for p in host.get_connected_peers() if dialable(host, p)}
        chosen = choose_holders(public, {p for p in map(peer_id_of, self.bootstrap) if p})
        took = await leave_with_holders(host, data, [public[p] for p in chosen], self._seal)
        return {p: dialable(host, public[p]) for p in took}
