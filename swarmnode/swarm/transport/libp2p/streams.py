"""The libp2p streams of protocol 3: one request, one answer, in the host's trio thread.

Every protocol is a stream that carries one request and one answer, each read up to a
bound and within :data:`STREAM_TIMEOUT`: :func:`exchange` is the asking end, :func:`serve`
the answering end of a stream handler. The client ends of the peer exchange, pushes, holds
and pulls are here too; what they decide (whom to ask, what to accept) comes from the
I/O-free modules :mod:`~swarmnode.swarm.transport.libp2p.spread`,
:mod:`~swarmnode.swarm.transport.libp2p.holding` and
:mod:`~swarmnode.swarm.transport.libp2p.peer_exchange`. Nothing here raises into the host: a peer
that does anything wrong (too much, too slow, a reset) ends its stream only.

In a private swarm every request and answer of the bundle, hold and announcement protocols
is sealed here, the one place they are, by
:class:`~swarmnode.swarm.transport.libp2p.sealed.StreamSeal`: a stream whose request or
answer does not open is dropped and counted (refused as ``wrong_key``, ``too_large``).
The peer exchange stays plain: it carries addresses, which a connection shows anyway.
"""

from __future__ import annotations

import contextlib
import logging
import random
from typing import Any, Awaitable, Callable

import multiaddr
import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from swarmnode.swarm.transport.libp2p.announce import Announcement
from swarmnode.swarm.transport.libp2p.holding import (
    BUNDLE_PROTOCOL,
    HELD_ACK,
    HOLD_PROTOCOL,
    Pulled,
    bundle_request,
    pulled_rejection,
)
from swarmnode.swarm.transport.libp2p.peer_exchange import (
    EXCHANGE_MAX_BYTES,
    PEERS_PROTOCOL,
    answer_order,
    encode_answer,
    parse_peer_answer,
)
from swarmnode.swarm.transport.libp2p.sealed import ANSWER, PLAIN, REQUEST, StreamSeal
from swarmnode.swarm.transport.libp2p.spread import ANNOUNCE_PROTOCOL, PullDials, sources_to_ask

log = logging.getLogger("swarmnode.swarm.transport")

STREAM_TIMEOUT = 10.0       # one request/response, from opening the stream to the last byte
ANNOUNCED_ADDRESS_TTL = 600  # seconds the peerstore keeps a source's address learned from an announcement


async def read_bounded(stream: Any, limit: int) -> bytes:
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


async def exchange(host: Any, peer: ID, protocol: str, request: bytes, limit: int,
                   seal: StreamSeal = PLAIN) -> bytes | None:
    """Open a ``protocol`` stream to ``peer``, send ``request``, and read the answer (see
    :func:`read_bounded`: longer than ``limit`` means too long), sealed and opened by
    ``seal``; None on any failure or time-out, or an answer that does not open. Never raises."""
    try:
        with trio.fail_after(STREAM_TIMEOUT):
            stream = await host.new_stream(peer, [TProtocol(protocol)])
            try:
                request = seal.close(protocol, REQUEST, request)
                if request:
                    await stream.write(request)
                await stream.close_write()
                answer = await read_bounded(stream, seal.limit(protocol, limit))
            finally:
                with contextlib.suppress(Exception):
                    await stream.close()
    except Exception as exc:
        log.debug("libp2p transport: %s with %s failed: %r", protocol, peer, exc)
        return None
    return seal.open(protocol, ANSWER, answer, limit)


async def serve(answer: Callable[[str, bytes], Awaitable[bytes]], limit: int, protocol: str, seal: StreamSeal,
                stream: Any) -> None:
    """Stream handler of ``protocol``: read a request of at most ``limit`` bytes (once opened
    by ``seal``), write ``answer(asker, request)`` (sealed), close. Anything a peer does wrong
    (too much, too slow, a reset, a request that does not open) ends the stream, never the host."""
    try:
        with trio.fail_after(STREAM_TIMEOUT):
            raw = await read_bounded(stream, seal.limit(protocol, limit))
            request = seal.open(protocol, REQUEST, raw, limit) if len(raw) <= seal.limit(protocol, limit) else None
            if request is None:
                await stream.reset()
                return
            reply = seal.close(protocol, ANSWER, await answer(str(stream.muxed_conn.peer_id), request))
            if reply:
                await stream.write(reply)
            await stream.close()
    except Exception as exc:
        log.debug("libp2p transport: serving %s failed: %r", stream, exc)
        with contextlib.suppress(Exception):
            await stream.reset()


def dialable(host: Any, peer: ID) -> list[str]:
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


async def ask_peers(host: Any, peer: ID) -> list[str]:
    """The multiaddrs ``peer`` reports for its peers; [] on any failure or malformed answer."""
    return parse_peer_answer(await exchange(host, peer, PEERS_PROTOCOL, b"", EXCHANGE_MAX_BYTES) or b"")


async def answer_peers(host: Any, rng: random.Random, stream: Any) -> None:
    """Stream handler of the peer exchange: the addresses of this node's other peers in random
    order (:func:`~swarmnode.swarm.transport.libp2p.peer_exchange.answer_order`), then close."""
    try:
        peers = answer_order(host.get_connected_peers(), stream.muxed_conn.peer_id, rng)
        await stream.write(encode_answer([a for p in peers for a in dialable(host, p)]))
        await stream.close()
    except Exception as exc:
        log.debug("libp2p transport: answering a peer exchange failed: %r", exc)
        with contextlib.suppress(Exception):
            await stream.reset()


async def push_announcement(host: Any, wire: bytes, peers: list[ID], seal: StreamSeal) -> None:
    """Push a signed announcement to each of ``peers``, at once; a push that fails is not retried."""
    async with trio.open_nursery() as nursery:
        for peer in peers:
            # trio_typing's stale trio stubs (a libp2p dependency) allow 4 arguments; trio takes any
            nursery.start_soon(exchange, host, peer, ANNOUNCE_PROTOCOL, wire, 0, seal)  # pyright: ignore[reportArgumentType]


async def leave_with_holders(host: Any, data: bytes, holders: list[ID], seal: StreamSeal) -> list[str]:
    """Push bundle ``data`` to each of ``holders``, at once; the PeerIDs of the ones that took it."""
    took: list[str] = []

    async def push(peer: ID) -> None:
        if await exchange(host, peer, HOLD_PROTOCOL, data, len(HELD_ACK), seal) == HELD_ACK:
            took.append(str(peer))

    async with trio.open_nursery() as nursery:
        for peer in holders:
            nursery.start_soon(push, peer)
    return took


async def pull_bundle(host: Any, own_peer_id: str, author: str, announcement: Announcement,
                      dials: PullDials, seal: StreamSeal) -> Pulled:
    """Ask the announcement's sources in turn (:func:`~swarmnode.swarm.transport.libp2p.spread.sources_to_ask`:
    connected or dialable, or dialed by the addresses the announcement gives), until one
    serves ``author``'s announced bundle; a source not connected when asked is told to ``dials``."""
    connected = set(host.get_connected_peers())

    def reachable(source: str) -> bool:
        peer = ID.from_base58(source)
        return peer in connected or bool(dialable(host, peer))

    request = bundle_request(author, announcement.round)
    reason = None
    for source, addrs in sources_to_ask(own_peer_id, author, announcement, reachable)[0]:
        peer = ID.from_base58(source)
        if addrs:
            learn_addresses(host, peer, addrs)
        if peer not in host.get_connected_peers():
            dials.dialing(source)
        data = await exchange(host, peer, BUNDLE_PROTOCOL, request, announcement.size, seal)
        if not data:
            continue
        reason = pulled_rejection(author, announcement, data)
        if reason is None:
            return Pulled(data)
    return Pulled(None, reason)


def learn_addresses(host: Any, peer: ID, addrs: tuple[str, ...]) -> None:
    """Put ``peer``'s announced addresses (checked by
    :func:`~swarmnode.swarm.transport.libp2p.announce.is_source_address`) in the peerstore, for
    :data:`ANNOUNCED_ADDRESS_TTL` seconds, so that opening a stream to it dials it."""
    try:
        host.get_peerstore().add_addrs(peer, [multiaddr.Multiaddr(a) for a in addrs], ANNOUNCED_ADDRESS_TTL)
    except Exception as exc:  # a multiaddr py-libp2p cannot use: the stream then fails as for any unreachable peer
        log.debug("libp2p transport: cannot use the announced addresses %s of %s: %r", addrs, peer, exc)


async def pull_bundles(host: Any, own_peer_id: str, wanted: list[tuple[str, Announcement]],
                       dials: PullDials, seal: StreamSeal) -> list[Pulled]:
    """One :class:`Pulled` per (author, announcement), pulled concurrently; then the
    connections they opened only to pull are closed (:class:`~swarmnode.swarm.transport.libp2p.spread.PullDials`),
    which gives their inbound slots back at the sources."""
    results = [Pulled(None)] * len(wanted)

    async def pull(i: int, author: str, announcement: Announcement) -> None:
        results[i] = await pull_bundle(host, own_peer_id, author, announcement, dials, seal)

    async with trio.open_nursery() as nursery:
        for i, (author, announcement) in enumerate(wanted):
            nursery.start_soon(pull, i, author, announcement)
    for source in dials.to_close({str(p) for p in host.get_connected_peers()}):
        try:
            await host.disconnect(ID.from_base58(source))
        except Exception as exc:  # a connection already going: nothing left to close
            log.debug("libp2p transport: closing the pull's connection to %s failed: %r", source, exc)
    return results
