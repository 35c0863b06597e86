"""Finding the nodes of one's swarm on the local network: mDNS / DNS-SD through python-zeroconf.

:class:`LanDiscovery` advertises this node (:mod:`swarmnode.swarm.lanrecord` says what its TXT
record holds) and browses for the others; the join loop of
:class:`~swarmnode.swarm.transport.base.Transport` dials what it finds as it dials bootstrap
peers, so a found address is held to its PeerID by the transport's own handshake. It works
with either transport and imports neither.

Zeroconf runs its own thread with its own event loop; its browser calls back on another
thread. The callbacks only hand a service name to the node's loop (``call_soon_threadsafe``),
where one lookup at a time reads the names in random order (from zeroconf's cache, where the
announcement left the TXT record, else by asking): the names held are bounded, so a flood of
services costs a counter, not memory or threads, and it cannot keep the real nodes waiting
behind it in a queue. Where multicast does not pass (Wi-Fi client isolation, VLANs, cloud hosts)
or no socket can be opened, discovery logs one line and the node joins the other ways
(bootstrap list, invite code).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import socket
import time
from collections.abc import Collection
from typing import Any

from swarmnode.swarm.address import ip4_of, parse_multiaddr
from swarmnode.swarm.lanrecord import MAX_WAY_IN, SERVICE_TYPE, LanPeers, LanRecord, advertised, encode_txt
from swarmnode.swarm.transport.base import local_ipv4_addresses

log = logging.getLogger("swarmnode.swarm.transport.lan")

MAX_NAMES = 512  # service names held (looked up or waiting); more are dropped and counted as "flood"
LOOKUP_MS = 2000
TTL_S = 60  # of the advertisement's records: a node gone without a goodbye drops out of caches within a minute


class LanDiscovery:
    """This node's mDNS advertisement and browser for ``swarm`` over ``transport``.

    :meth:`start` and :meth:`stop` run on the node's event loop; :meth:`start` never raises.
    ``changed`` is set whenever a new candidate was found, so the join loop can dial at once."""

    def __init__(self, swarm: str, transport: str, peer_id: str, *, max_peers: int = 64):
        self.peer_id = peer_id
        self.table = LanPeers(swarm, transport, peer_id, max_peers=max_peers)
        self.changed = asyncio.Event()
        self.running = False
        self._zc: Any = None
        self._info: Any = None  # the ServiceInfo registered now
        self._browser: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._names: set[str] = set()
        self._todo: set[str] = set()  # names not looked up since they were announced or changed
        self._wake = asyncio.Event()
        self._resolver: asyncio.Task | None = None
        self._opening: asyncio.Future | None = None
        self._advertising: asyncio.Future | None = None

    async def start(self, addresses: Collection[str], way_in: Collection[str] = ()) -> None:
        """Advertise ``addresses`` and ``way_in`` (this node's bootstrap peers) (loopback left out;
        neither: browse only) and start browsing."""
        self._loop = asyncio.get_running_loop()
        # Shielded: a stop while zeroconf starts waits for it in stop(), then closes what it opened.
        self._opening = asyncio.ensure_future(asyncio.to_thread(self._open, self._record(addresses, way_in)))
        try:
            await asyncio.shield(self._opening)
        except Exception as exc:  # no multicast here: the node joins the other ways
            log.info("LAN discovery is off: %s (peers can still join with --bootstrap or --join)", exc)
            await asyncio.to_thread(self._close)
            return
        self.running = True
        self._resolver = asyncio.create_task(self._resolve(), name="lan-resolve")

    def _record(self, addresses: Collection[str], way_in: Collection[str]) -> LanRecord | None:
        """This node's advertisement, None when it has nothing to give."""
        own, way = advertised(addresses), advertised(way_in, MAX_WAY_IN)
        if not own and not way:
            return None
        return LanRecord(self.table.swarm, self.table.transport, self.peer_id, own, way_in=way)

    def _open(self, record: LanRecord | None) -> None:
        """In a worker thread: zeroconf makes its own loop thread only when none runs in the caller's."""
        from zeroconf import IPVersion, ServiceBrowser, Zeroconf

        self._zc = Zeroconf(ip_version=IPVersion.V4Only)
        self._register(record)
        self._browser = ServiceBrowser(self._zc, SERVICE_TYPE, handlers=[self._on_change])

    def _register(self, record: LanRecord | None) -> None:
        """In a worker thread: advertise ``record`` in place of what was (None: nothing). A
        changed record is announced under the same name, so browsers see it updated."""
        from zeroconf import ServiceInfo

        if record is None:
            if self._info is not None:
                self._zc.unregister_service(self._info)
                self._info = None
            return
        # zeroconf resolves no service without a host address, though the TXT record is all a
        # node reads: a node behind NAT gives the host's own.
        ips = sorted({ip for a in record.addresses if (ip := ip4_of(a))}) or [
            ip for ip in local_ipv4_addresses() if not ip.startswith("127.")]
        port = next((p for a in record.addresses if (p := parse_multiaddr(a).tcp_port)), 0)
        info = ServiceInfo(SERVICE_TYPE, f"{self.peer_id}.{SERVICE_TYPE}", port=port,
                           properties=encode_txt(record), server=f"{self.peer_id}.local.",
                           addresses=[socket.inet_aton(ip) for ip in ips], host_ttl=TTL_S, other_ttl=TTL_S)
        if self._info is None:
            self._zc.register_service(info)
        else:
            self._zc.update_service(info)
        self._info = info

    async def advertise(self, addresses: Collection[str], way_in: Collection[str]) -> None:
        """Advertise ``addresses`` and ``way_in`` from now on (after the node changed its
        reachability or bootstrap list); nothing when discovery is not running. Never raises:
        a failure is logged, and the node's neighbours still reach it the other ways."""
        if not self.running:
            return
        # Shielded as the start is: stop() waits for it before it closes zeroconf.
        self._advertising = asyncio.ensure_future(asyncio.to_thread(self._register, self._record(addresses, way_in)))
        try:
            await asyncio.shield(self._advertising)
        except Exception as exc:
            log.warning("LAN discovery: the new advertisement could not be registered: %r", exc)

    def _on_change(self, zeroconf: Any, service_type: str, name: str, state_change: Any) -> None:
        """On zeroconf's browser thread: hand the name to the node's loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed since the check: the node is stopping
                loop.call_soon_threadsafe(self._noticed, name, state_change.name)

    def _noticed(self, name: str, change: str) -> None:
        if change == "Removed":
            self._names.discard(name)
            self._todo.discard(name)
            self.table.remove(name.split(".", 1)[0])
            return
        if name not in self._names and len(self._names) >= MAX_NAMES:
            self.table.refuse("flood")
            return
        self._names.add(name)
        self._todo.add(name)
        self._wake.set()

    async def _resolve(self) -> None:
        """Look the announced services up one at a time, in random order, and offer their TXT
        records to the table."""
        while True:
            if not self._todo:
                self._wake.clear()
                await self._wake.wait()
                continue
            name = random.choice(tuple(self._todo))
            self._todo.discard(name)
            try:
                info = await asyncio.to_thread(self._lookup, name)
            except Exception as exc:  # a malformed answer is zeroconf's to parse; its failure is ours to count
                log.debug("LAN lookup of %s failed: %r", name, exc)
                info = None
            if info is None or info.text is None:
                self.table.refuse("unresolved")
            elif self.table.offer_txt(bytes(info.text)):
                self.changed.set()

    def _lookup(self, name: str) -> Any:
        """In a worker thread: the service's info from zeroconf's cache, else asked for."""
        from zeroconf import ServiceInfo

        info = ServiceInfo(SERVICE_TYPE, name)
        if info.load_from_cache(self._zc):
            return info
        return self._zc.get_service_info(SERVICE_TYPE, name, LOOKUP_MS)

    def to_dial(self, connected: Collection[str], limit: int) -> list[str]:
        return self.table.to_dial(connected, limit) if self.running else []

    def dialed(self, maddr: str, answered: bool) -> None:
        self.table.dialed(maddr, answered)
        self.changed.set()  # a dial slot is free

    def verified(self, connected: Collection[str]) -> set[str]:
        """PeerIDs found on the LAN whose handshake vouched for them (see :meth:`LanPeers.verified`)."""
        return self.table.verified(connected)

    def counts(self) -> dict[str, int]:
        return self.table.counts() if self.running else {}

    async def stop(self) -> None:
        """Withdraw the advertisement and close zeroconf's sockets and thread; idempotent."""
        self.running = False
        if self._resolver is not None:
            self._resolver.cancel()
            await asyncio.gather(self._resolver, return_exceptions=True)
            self._resolver = None
        await asyncio.gather(*(f for f in (self._opening, self._advertising) if f is not None), return_exceptions=True)
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        zc, self._zc = self._zc, None
        if self._browser is not None:
            self._browser.cancel()
            self._browser = None
        self._info = None
        if zc is not None:
            zc.unregister_all_services()
            zc.close()


def browse(swarm: str, transport: str, seconds: float = 2.0) -> tuple[dict[str, tuple[str, ...]], dict[str, int]]:
    """The nodes of ``swarm`` over ``transport`` that advertise on the local network within about
    ``seconds`` (PeerID -> addresses, unverified: only a handshake proves a PeerID), and the
    table's counters; blocking, for ``swarmnode doctor``. OSError when no multicast socket opens."""
    from zeroconf import IPVersion, ServiceBrowser, Zeroconf

    names: collections.deque[str] = collections.deque(maxlen=MAX_NAMES)
    table = LanPeers(swarm, transport, own_peer_id="")
    zc = Zeroconf(ip_version=IPVersion.V4Only)
    try:
        browser = ServiceBrowser(zc, SERVICE_TYPE, handlers=[lambda zeroconf, service_type, name, state_change:
                                                             names.append(name)])
        time.sleep(seconds)
        browser.cancel()
        for name in list(dict.fromkeys(names)):
            info = zc.get_service_info(SERVICE_TYPE, name, LOOKUP_MS)
            if info is None or info.text is None:
                table.refuse("unresolved")
            else:
                table.offer_txt(bytes(info.text))
    finally:
        zc.close()
    return table.candidates(), table.counts()
