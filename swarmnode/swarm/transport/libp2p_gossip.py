"""The ``libp2p`` transport: a py-libp2p host and gossipsub on ``swarmnode/<swarm>/bundles/1``.

py-libp2p runs on trio, the node on asyncio. The host lives in its own thread running
``trio.run``; the asyncio side reaches it with ``trio.from_thread`` (always from a worker
thread, so the event loop never waits on trio), and received messages come back with
``loop.call_soon_threadsafe``. :meth:`start` returns once the host listens and is
subscribed, or raises :class:`TransportError` with the host's startup error. :meth:`stop`
cancels everything inside ``trio.run`` and joins the thread.

Peers find each other beyond the bootstrap node with a small peer exchange,
``/swarmnode/peers/1.0.0``: a node that has fewer than :data:`PEER_TARGET` connections asks a
few connected peers for the addresses of theirs (JSON list of multiaddrs, capped) and dials
the ones it lacks. gossipsub alone would relay through the bootstrap node but never connect
the others to each other.

Messages are signed by the host key (strict signing: unsigned or badly signed messages are
dropped by pubsub). The host key is the node's identity, so the gossip author's PeerID is
the node's PeerID, and a topic validator stops relaying anything that is not a bundle
signed by that same author.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import random
import threading
from functools import partial
from typing import Any, Callable, Sequence

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, PROTOCOL_ID_V12, GossipSub
from libp2p.pubsub.pubsub import Pubsub

from swarmnode.compat.libp2p import allow_redial, run_service, stop_seen_cache
from swarmnode.swarm.transport.base import (MAX_MESSAGE_BYTES, NodeIdentity, Transport, TransportError, expand_unspecified,
                                      peer_id_of, relay_rejection)

log = logging.getLogger("swarmnode.swarm.transport")

_STARTUP_TIMEOUT = 30.0
_DIAL_TIMEOUT = 5.0
_STOP_TIMEOUT = 10.0
_PEER_REFRESH = 0.5
PEER_TARGET = 8
PEERS_PROTOCOL = TProtocol("/swarmnode/peers/1.0.0")
_EXCHANGE_EVERY = 10.0
_EXCHANGE_FIRST = 2.0
_EXCHANGE_ASK = 3           # peers asked per exchange
_EXCHANGE_MAX_ADDRS = 64    # addresses sent or read per answer
_EXCHANGE_MAX_BYTES = 32 * 1024


def topic_name(swarm: str) -> str:
    return f"swarmnode/{swarm}/bundles/1"


class Libp2pTransport(Transport):
    name = "libp2p"

    def __init__(self, identity: NodeIdentity, swarm: str, bootstrap: Sequence[str] = (),
                 listen: str | None = None, announce: str | None = None, *, private: bool = False):
        """``private``: the node cannot accept inbound connections; it advertises no address
        (identify and the peer exchange pass on nothing for it) and is reached through the
        gossip mesh of the peers it dialed."""
        super().__init__(identity, swarm, bootstrap, listen, announce)
        self.private = private
        self.topic = topic_name(swarm)
        self._thread: threading.Thread | None = None
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._pubsub: Pubsub | None = None
        self._host: Any = None
        self._nursery: trio.Nursery | None = None
        self._peers: list[str] = []
        self._addresses: list[str] = []

    # -- asyncio side ----------------------------------------------------------------------

    async def _start(self) -> None:
        try:
            listen = multiaddr.Multiaddr(self.listen)
            announce = [multiaddr.Multiaddr(self.announce)] if self.announce else None
            if self.private:
                announce = []  # a static empty list: get_addrs() advertises nothing
        except Exception as exc:
            raise TransportError(f"bad --listen/--announce multiaddr: {exc}") from None
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

    async def _stop(self) -> None:
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

    async def _publish(self, round_no: int, data: bytes) -> None:
        if len(data) > MAX_MESSAGE_BYTES:
            raise ValueError(f"message of {len(data)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")
        pubsub = self._pubsub
        assert pubsub is not None
        await asyncio.to_thread(trio.from_thread.run, pubsub.publish, self.topic, data, trio_token=self._token)

    async def _dial(self, maddr: str) -> bool:
        try:
            return await asyncio.to_thread(trio.from_thread.run, self._trio_dial, maddr, trio_token=self._token)
        except BaseException as exc:  # RunFinishedError, or Cancelled while the host stops
            if isinstance(exc, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
                raise
            return False

    def peers(self) -> list[str]:
        return list(self._peers)

    def block(self, peer_id: str, seconds: float) -> None:
        if self._token is None or self._nursery is None:
            return
        try:
            trio.from_thread.run_sync(self._nursery.start_soon, _blacklist_for, self._pubsub,
                                      ID.from_base58(peer_id), seconds, trio_token=self._token)
        except (trio.RunFinishedError, ValueError) as exc:
            log.debug("libp2p transport: cannot block %s: %s", peer_id, exc)

    def addresses(self) -> list[str]:
        return list(self._addresses)

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
            # Heartbeat every second (the libp2p spec's default) so meshes form quickly.
            gossipsub = GossipSub(protocols=[PROTOCOL_ID_V12, PROTOCOL_ID_V11, PROTOCOL_ID], degree=6,
                                  degree_low=4, degree_high=12, heartbeat_interval=1)
            pubsub = Pubsub(host, gossipsub, strict_signing=True, max_inbound_rpc_size=2 * MAX_MESSAGE_BYTES)
            pubsub.set_topic_validator(self.topic, partial(_relay_check, self._reject_threadsafe),
                                       is_async_validator=False)
            host.set_stream_handler(PEERS_PROTOCOL, partial(_answer_peers, host))
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
            if message.from_id == own_id:
                continue
            self._deliver_threadsafe(bytes(message.data), str(ID(message.from_id)))

    async def _refresh_peers(self, host: Any) -> None:
        while True:
            self._peers = [str(p) for p in host.get_connected_peers()]
            await trio.sleep(_PEER_REFRESH)

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


async def _blacklist_for(pubsub: Any, peer: ID, seconds: float) -> None:
    """pubsub drops a blacklisted peer's messages and connections before any check."""
    pubsub.add_to_blacklist(peer)
    try:
        await trio.sleep(seconds)
    finally:
        pubsub.remove_from_blacklist(peer)


def _relay_check(on_reject: Callable[[str, str], None], forwarder: ID, message: Any) -> bool:
    """Topic validator: relay only bundles whose signer is the gossip message's author.

    pubsub has verified the message's signature (strict signing) before it calls this, so a
    drop is reported to ``on_reject`` under that signed origin."""
    try:
        author = str(ID(message.from_id))
    except Exception:
        return False
    reason = relay_rejection(author, bytes(message.data))
    if reason is not None:
        on_reject(author, reason)
    return reason is None


def _dialable(host: Any, peer: ID) -> list[str]:
    """A peer's listen addresses as its node learned them (identify), with /p2p/, wildcards dropped."""
    out = []
    for addr in host.get_peerstore().addrs(peer)[:2]:
        text = str(addr)
        if "/0.0.0.0/" in text or "/::/" in text:
            continue
        out.append(text if "/p2p/" in text else f"{text}/p2p/{peer}")
    return out


async def _answer_peers(host: Any, stream: Any) -> None:
    """Stream handler of PEERS_PROTOCOL: the addresses of our other peers, then close."""
    try:
        asker = stream.muxed_conn.peer_id
        addrs = [a for p in host.get_connected_peers() if p != asker for a in _dialable(host, p)]
        await stream.write(json.dumps(addrs[:_EXCHANGE_MAX_ADDRS]).encode("utf-8"))
        await stream.close()
    except Exception as exc:
        log.debug("libp2p transport: answering a peer exchange failed: %r", exc)
        with contextlib.suppress(Exception):
            await stream.reset()


async def _ask_peers(host: Any, peer: ID) -> list[str]:
    """The multiaddrs ``peer`` reports for its peers; [] on any failure or malformed answer."""
    try:
        with trio.fail_after(_DIAL_TIMEOUT):
            stream = await host.new_stream(peer, [PEERS_PROTOCOL])
            chunks, size = [], 0
            while size <= _EXCHANGE_MAX_BYTES:
                try:
                    chunk = await stream.read(_EXCHANGE_MAX_BYTES)
                except EOFError:  # py-libp2p's StreamEOF: the answer is complete
                    break
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            await stream.close()
    except Exception as exc:
        log.debug("libp2p transport: peer exchange with %s failed: %r", peer, exc)
        return []
    return parse_peer_answer(b"".join(chunks))


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
