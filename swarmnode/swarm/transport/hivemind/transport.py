"""The ``hivemind`` transport (the default): bundles as records of a hivemind DHT.

The records (layout version 2, :mod:`~swarmnode.swarm.transport.hivemind.layout`): one key
per peer and round for bundles, announcements of each peer's latest round in one of a few
shards. What a node reads and fetches each poll is decided by
:class:`~swarmnode.swarm.transport.hivemind.reads.HivemindPull`, so its cost per round stays
flat however many peers announce. What a node's DHT accepts is
:class:`~swarmnode.swarm.transport.hivemind.records.SwarmRecordValidator`, how much it holds
:class:`~swarmnode.swarm.transport.hivemind.storage.BoundedStorage`.

hivemind's DHT runs in a forked process and talks over a pipe. That process and its p2pd run
in a session of their own (:func:`~swarmnode.compat.hivemind.start_dht`): a signal to the
node's process group (Ctrl-C) reaches only the node, which stops them in order, and they end
by themselves once the node is gone. Every call runs a coroutine of
:mod:`~swarmnode.swarm.transport.hivemind.dht_process` there through
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
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import hivemind
from hivemind.dht.node import DHTNode

from swarmnode.backoff import Backoff
from swarmnode.compat.hivemind import start_dht
from swarmnode.swarm.bundle import open_envelope
from swarmnode.swarm.sealing import Sealer
from swarmnode.swarm.transport.base import (
    MAX_MESSAGE_BYTES,
    NodeIdentity,
    Transport,
    TransportError,
)
from swarmnode.swarm.transport.counters import TransportCounters
from swarmnode.swarm.transport.hivemind import dht_process as calls
from swarmnode.swarm.transport.hivemind.layout import LAYOUT_VERSION
from swarmnode.swarm.transport.hivemind.reads import HivemindPull
from swarmnode.swarm.transport.hivemind.records import SwarmRecordValidator
from swarmnode.swarm.transport.pull import FETCH_PER_ROUND

log = logging.getLogger("swarmnode.swarm.transport")

POLL_INTERVAL = 1.0
DHT_SHUTDOWN_S = 10.0


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


class HivemindTransport(Transport):
    name = "hivemind"

    def __init__(self, identity: NodeIdentity, swarm: str, bootstrap: Sequence[str] = (),
                 listen: str | None = None, announce: str | None = None, *, poll_interval: float = POLL_INTERVAL,
                 private: bool = False, fetch_per_round: int = FETCH_PER_ROUND, sealer: Sealer | None = None):
        """``private``: the node cannot accept inbound connections, so it runs as a DHT client
        (stores and reads at public DHT servers, never listed in a routing table) and reports
        no address. ``fetch_per_round``: K, the most peers' bundles fetched per round of this
        node (0: none, for a node that only serves the DHT). ``sealer``: a private swarm's
        (:class:`~swarmnode.swarm.transport.hivemind.records.SwarmRecordValidator` seals and
        opens its records under keyed names)."""
        super().__init__(identity, swarm, bootstrap, listen, announce)
        self.sealer = sealer
        self._space = SwarmRecordValidator(swarm, sealer=sealer).space
        self.poll_interval = poll_interval
        self.private = private
        self._pull = HivemindPull(identity.peer_id, fetch_per_round)
        self._dht: hivemind.DHT | None = None
        self._send_lock = threading.Lock()
        self._poll_task: asyncio.Task | None = None
        self._peers: list[str] = []
        self._addresses: list[str] = []
        self._dht_counters: TransportCounters | None = None  # the DHT process's, as of the last poll
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
            calls.write_private(key_file, self.identity.private_key_protobuf())
            kwargs: dict[str, Any] = {"host_maddrs": [self.listen], "identity_path": key_file}
            if self.announce:
                kwargs["announce_maddrs"] = [self.announce]
            if self.private:
                kwargs["client_mode"] = True
            validator = SwarmRecordValidator(self.swarm, self.identity, self.sealer)
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
            await self._call(partial(calls.bound_storage, checker=SwarmRecordValidator(self.swarm, sealer=self.sealer)))
            self._addresses = await self._call(calls.visible_addresses)
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
        await asyncio.to_thread(calls.write_private, path, data)
        try:
            await self._call(partial(calls.store_round, swarm=self._space, peer_id=self.identity.peer_id,
                                     round_no=round_no, path=path, created=float(open_envelope(data)[1]["created"])))
        finally:
            # The round was made whether or not its stores were accepted: its K fetches begin.
            self._pull.next_round(time.monotonic())

    async def _dial(self, maddr: str) -> bool:
        try:
            return bool(await self._call(partial(calls.join, maddr=maddr)))
        except Exception as exc:
            log.debug("hivemind transport: joining through %s failed: %s", maddr, exc)
            return False

    def peers(self) -> list[str]:
        """Connected peers in the DHT's routing table, as of the last poll (see
        :func:`~swarmnode.swarm.transport.hivemind.dht_process.read_announcements`)."""
        return list(self._peers)

    def addresses(self) -> list[str]:
        return [] if self.private else list(self._addresses)

    def counters(self) -> TransportCounters | None:
        """The DHT process's counters (:func:`~swarmnode.swarm.transport.hivemind.dht_process.counters`),
        read every tenth poll; None before the first."""
        return self._dht_counters

    async def _call(self, coro: Callable[[Any, DHTNode], Awaitable[Any]]) -> Any:
        """Run ``coro(dht, node)`` in the DHT process and return its result."""
        dht = self._dht
        if dht is None:
            raise RuntimeError("the DHT is not running")

        def send() -> Any:
            with self._send_lock:
                return dht.run_coroutine(partial(calls.guarded, coro=coro), return_future=True)

        future = await asyncio.to_thread(send)
        # A margin over the DHT process's own limit, so that side reports a hang first.
        ok, result = await asyncio.to_thread(future.result, calls.CALL_TIMEOUT + 5.0)
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
                if dht is None:  # _become_private replaces it
                    await asyncio.sleep(self.poll_interval)
                    continue
                if not dht.is_alive():
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
        await self._replace(dead)

    async def _become_private(self) -> None:
        """A DHT server cannot become a client: the DHT process starts again in client mode,
        on the same key and listen address (a few seconds without a DHT; a publish then
        fails and is counted)."""
        self.private = True
        if self._dht is not None:
            await self._replace(self._dht)

    async def _replace(self, old: hivemind.DHT) -> None:
        """Stop ``old`` and start a DHT process in its place, as :attr:`private` says now,
        retrying with backoff until one starts."""
        self._dht, self._peers = None, []
        await _shutdown(old)
        backoff = Backoff()
        while self._dht is None:
            try:
                await self._launch()
            except TransportError as exc:
                log.error("hivemind transport: %s", exc)
                await asyncio.sleep(backoff.next_delay())

    async def _poll_once(self) -> None:
        """One poll of :class:`~swarmnode.swarm.transport.hivemind.reads.HivemindPull`: read the
        shards it asks for, fetch what it chooses, deliver what was found, report the rest."""
        pull = self._pull
        shards = pull.shards_to_read(pull.plan.established(self._established, self._peers))
        announced, answered, self._peers = await self._call(partial(calls.read_announcements, swarm=self._space,
                                                                    shards=shards))
        self._polls += 1
        if self._polls % 10 == 1:
            self._dht_counters = await self._call(calls.counters)
            self._warn_old_version()
        established = pull.plan.established(self._established, self._peers)
        pull.read(shards, announced, time.monotonic(), established, answered)
        chosen = pull.plan.choose(established)
        if not chosen:
            return
        records = await self._call(partial(calls.fetch_bundles, swarm=self._space, wanted=chosen))
        found = set()
        for peer, _round, data in records:
            found.add(peer)
            self._deliver(data)
            pull.plan.note_delivered(peer)
        for peer in pull.missing(chosen, found):
            if self._reject_handler is not None:
                self._reject_handler(peer, "missing_payload")

    def _warn_old_version(self) -> None:
        if self.refusals().get("old_version") and not self._warned_old_version:
            self._warned_old_version = True
            log.warning("hivemind transport: peers of an older swarmnode (DHT layout v1) write to this swarm; "
                        "they and this node (layout v%d) cannot exchange bundles until they upgrade",
                        LAYOUT_VERSION)
