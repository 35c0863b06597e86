"""The live state of a running node, shared by the round loop, the API and the dashboard.

The round runs in a worker thread and the API on the event loop, so every change goes
through :meth:`NodeState.emit`, which is safe to call from any thread: it applies the event
(:meth:`swarmnode.events.NodeView.apply`, the reducer the dashboard uses too) under a lock,
calls the node's listeners (:meth:`NodeState.listen`) in the emitting thread, and hands it to
the loop, where subscribers' queues are fed in order. Subscribers that fall behind lose their
oldest events rather than growing memory.

Listeners are how the parts that follow the round learn of it: the round
(:mod:`swarmnode.node.round`) only emits its phases and its end; whoever builds it registers
the thread policy's and the yardstick's followers (``node/roundthreads.py``,
``node/yardsticks.py``). Each PhaseChanged is logged at DEBUG here ("phase generating"): a
crashed node's log says which phase the crash hit.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from swarmnode.events import NodeEvent, NodeView, PhaseChanged
from swarmnode.records import RoundRecord

log = logging.getLogger(__name__)

_SUBSCRIBER_QUEUE = 1000

Listener = Callable[[NodeEvent], None]


@dataclass
class NodeInfo:
    """What does not change while the node runs."""

    peer_id: str = ""
    name: str = ""
    swarm: str = ""
    transport: str = "solo"
    model: str = ""
    device: str = ""
    home: str = ""
    priority: str = ""  # what the node runs at, as priority.apply_priority described it


@dataclass
class NodeState(NodeView):
    """The node's own :class:`NodeView`, changed only by :meth:`emit`, plus who the node is."""

    info: NodeInfo = field(default_factory=NodeInfo)
    started_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscribers: set[asyncio.Queue] = set()
        self._listeners: list[Listener] = []

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver events on ``loop`` from now on (the daemon calls this once)."""
        self._loop = loop

    def listen(self, listener: Listener) -> None:
        """Call ``listener`` with every event from now on, in the thread that emits it, after the
        view took it and in the order listeners were registered. Register before the events
        flow (the round's are emitted in the node's model thread); a listener must not raise."""
        self._listeners.append(listener)

    def emit(self, event: NodeEvent) -> None:
        """Apply ``event``, call the listeners, deliver it to subscribers (as its JSON); callable
        from any thread."""
        with self._lock:
            self.apply(event)
        if isinstance(event, PhaseChanged):
            log.debug("phase %s", event.phase)
        for listener in self._listeners:
            listener(event)
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        wire = event.to_json()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._deliver(wire)
        else:
            loop.call_soon_threadsafe(self._deliver, wire)

    def _deliver(self, event: dict) -> None:
        for q in self._subscribers:
            if q.full():
                q.get_nowait()
            q.put_nowait(event)

    def subscribe(self) -> asyncio.Queue:
        """A queue of future events (their JSON); call on the loop, and :meth:`unsubscribe` when done."""
        q: asyncio.Queue = asyncio.Queue(maxsize=_SUBSCRIBER_QUEUE)
        self._subscribers.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue) -> None:
        self._subscribers.discard(q)

    def restore_rounds(self, records: Iterable[RoundRecord]) -> None:
        """The rounds a resumed node finished before (from metrics.jsonl), for ``/v1/rounds``."""
        with self._lock:
            super().restore_rounds(records)

    def yardstick_records(self) -> list[dict]:
        with self._lock:
            return list(self.yardstick)

    def rounds_since(self, since: int) -> list[RoundRecord]:
        with self._lock:
            return [r for r in self.rounds if r.round >= since]

    def snapshot(self) -> dict[str, Any]:
        """The changing fields, read together under the lock (for the status endpoint and /metrics)."""
        with self._lock:
            return {
                **self.summary(),
                "uptime_s": round(time.time() - self.started_at, 3),
                "rounds_finished": self.rounds_finished,
                "tokens_generated": self.tokens_generated,
                "round_seconds_sum": self.round_seconds_sum,
                "reward_sum": self.reward_sum,
                "bundles": dict(self.bundles),
            }
