"""What a round needs from the swarm: somewhere to share its groups and a pool to draw from.

The round (:mod:`swarmnode.node.round`) sees only :class:`SwarmLink`. A solo node uses :class:`SoloLink`,
which shares nothing and has no pool, so its training set is filled from local groups; a
networked node uses :class:`NetworkLink`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import random
from collections.abc import Mapping
from typing import Protocol

from swarmnode.events import PeerJoined, PeerLeft
from swarmnode.records import Group
from swarmnode.swarm.exchange import Exchange
from swarmnode.swarm.transport.counters import TransportCounters

log = logging.getLogger(__name__)


class SwarmLink(Protocol):
    def share(self, round_no: int, groups: list[Group]) -> None:
        """Offer this round's local groups to the swarm; must return at once (never blocks a round)."""
        ...

    def draw_external(self, round_no: int, n: int, rng: random.Random) -> list[Group]:
        """Up to ``n`` peers' groups, already re-scored by this node's own verifier, drawn by
        its sampling mode (:mod:`swarmnode.sampling`)."""
        ...

    def judge_training(self, weighed: Mapping[tuple[str, str], tuple[int, int]]) -> None:
        """The round's update weighed ``n`` of a peer's completions of a family against the bound
        on their distance from this node's policy and left ``far`` out, ``weighed[peer, family] =
        (n, far)`` (see :meth:`swarmnode.swarm.exchange.Exchange.judge_training`)."""

    def trained_on(self, round_no: int, groups: list[Group]) -> None:
        """Round ``round_no``'s update trained on ``groups``: receipts go to the external ones'
        authors with the next share (never blocks)."""

    def peer_count(self) -> int:
        """Peers currently connected."""
        ...

    def take_received(self) -> dict[str, tuple[int, float]]:
        """``family -> (groups, sum of their mean rewards)`` of peers' groups re-scored and kept since
        the last call (see :meth:`swarmnode.swarm.exchange.Exchange.take_received`)."""
        ...

    def peer_state(self) -> list[dict]:
        """What each peer's groups were worth here, JSON-ready, for the checkpoint."""
        ...

    def restore_peer_state(self, state: list) -> None:
        """Take :meth:`peer_state`'s rows back on resume; ValueError when they are not of its form."""

    def peer_rows(self) -> list[dict]:
        """The peer table for the API (see :meth:`swarmnode.node.api.NodeControl.peer_rows`)."""
        ...

    def counters(self) -> TransportCounters | None:
        """The transport's own counters (see :meth:`Transport.counters`)."""
        ...


class SoloLink:
    def share(self, round_no: int, groups: list[Group]) -> None:
        pass

    def draw_external(self, round_no: int, n: int, rng: random.Random) -> list[Group]:
        return []

    def judge_training(self, weighed: Mapping[tuple[str, str], tuple[int, int]]) -> None:
        pass

    def trained_on(self, round_no: int, groups: list[Group]) -> None:
        pass

    def peer_count(self) -> int:
        return 0

    def take_received(self) -> dict[str, tuple[int, float]]:
        return {}

    def peer_state(self) -> list[dict]:
        return []

    def restore_peer_state(self, state: list) -> None:
        pass

    def peer_rows(self) -> list[dict]:
        return []

    def counters(self) -> TransportCounters | None:
        return None


class ExchangeBacked:
    """The :class:`SwarmLink` methods a link answers from its
    :class:`~swarmnode.swarm.exchange.Exchange` (``self.exchange``): the peer table, its state for
    the checkpoint, the peers' groups received since the last round, and what the update did
    with peers' groups (judged, receipts)."""

    exchange: Exchange

    def judge_training(self, weighed: Mapping[tuple[str, str], tuple[int, int]]) -> None:
        self.exchange.judge_training(weighed)

    def trained_on(self, round_no: int, groups: list[Group]) -> None:
        self.exchange.trained_on(round_no, groups)

    def peer_rows(self) -> list[dict]:
        return self.exchange.peer_rows()

    def take_received(self) -> dict[str, tuple[int, float]]:
        return self.exchange.take_received()

    def peer_state(self) -> list[dict]:
        return self.exchange.peer_state()

    def restore_peer_state(self, state: list) -> None:
        self.exchange.restore_peer_state(state)


class NetworkLink(ExchangeBacked):
    """A :class:`SwarmLink` over a real transport, driven from the daemon's event loop.

    ``share`` is called from the round's worker thread: it signs the bundle there and hands
    the publish to the loop without waiting. Incoming messages are verified and re-scored
    on one background thread with a bounded backlog, so a flood of bundles can neither
    stall the loop nor grow memory: past the backlog, messages are dropped and counted. Before
    that, the exchange's :class:`~swarmnode.swarm.guard.PeerGuard` drops a rate-limited or banned
    sender's messages unread.
    """

    BACKLOG = 256
    PEER_POLL_S = 2.0

    def __init__(self, exchange, transport, state, loop: asyncio.AbstractEventLoop):
        self.exchange = exchange
        self.transport = transport
        self.state = state
        self.loop = loop
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="swarmnode-receive")
        self._pending = 0
        self._known_peers: set[str] = set()
        self._watch: asyncio.Task | None = None

    async def start(self) -> None:
        self.transport.set_handler(self._on_message)
        self.transport.set_reject_handler(self.exchange.reject)
        self.transport.set_established(self.exchange.standing.is_established)
        await self.transport.start()
        self._watch = asyncio.create_task(self._watch_peers(), name="peer-watch")

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        await self.transport.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _on_message(self, data: bytes) -> None:
        if self.exchange.admit(data) is not None:  # rate-limited or banned sender: dropped unread
            return
        if self._pending >= self.BACKLOG:
            self.exchange.peers.record_rejection(None, "overloaded")
            return
        self._pending += 1
        fut = self.loop.run_in_executor(self._executor, self.exchange.receive, data)
        fut.add_done_callback(self._done)

    def _done(self, fut: asyncio.Future) -> None:
        self._pending -= 1
        if not fut.cancelled() and fut.exception() is not None:
            log.error("receiving a bundle failed: %r", fut.exception())

    async def _watch_peers(self) -> None:
        while True:
            now = set(self.transport.peers())
            for p in now - self._known_peers:
                self.exchange.peers.touch(p)
                self.state.emit(PeerJoined(p))
            for p in self._known_peers - now:
                self.state.emit(PeerLeft(p))
            for p in now:
                self.exchange.peers.touch(p)
            self._known_peers = now
            await asyncio.sleep(self.PEER_POLL_S)

    # ---- SwarmLink -----------------------------------------------------------------------
    def share(self, round_no: int, groups: list[Group]) -> None:
        data = self.exchange.outgoing(round_no, groups)
        asyncio.run_coroutine_threadsafe(self.transport.publish(round_no, data), self.loop)

    def draw_external(self, round_no: int, n: int, rng: random.Random) -> list[Group]:
        return self.exchange.draw(round_no, n, rng)

    def peer_count(self) -> int:
        return len(self._known_peers)


    def transport_stats(self) -> dict[str, int]:
        return {**dataclasses.asdict(self.transport.stats), **self.transport.lan_counts()}

    def counters(self) -> TransportCounters | None:
        return self.transport.counters()
