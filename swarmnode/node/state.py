"""The live state of a running node, shared by the round loop, the API and the dashboard.

The round runs in a worker thread and the API on the event loop, so every change goes
through :meth:`NodeState.emit`, which is safe to call from any thread: it updates the
fields under a lock and hands the event to the loop, where subscribers' queues are fed in
order. Subscribers that fall behind lose their oldest events rather than growing memory.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from swarmnode.records import RoundRecord

_MAX_ROUNDS_KEPT = 5000
_SUBSCRIBER_QUEUE = 1000


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
class NodeState:
    info: NodeInfo = field(default_factory=NodeInfo)
    started_at: float = field(default_factory=time.time)
    round: int = 0
    phase: str = "loading"
    paused: bool = False
    rounds: collections.deque = field(default_factory=lambda: collections.deque(maxlen=_MAX_ROUNDS_KEPT))
    counters: collections.Counter = field(default_factory=collections.Counter)
    # (outcome, reason) -> count; reason is "" for accepted bundles
    bundles: collections.Counter = field(default_factory=collections.Counter)
    # totals over every round finished since start (``rounds`` keeps only the latest)
    tokens_generated: int = 0
    round_seconds_sum: float = 0.0
    reward_sum: float = 0.0
    # the torch thread count in use and why (threads.ThreadChoice.as_dict); empty until chosen
    threads: dict = field(default_factory=dict)
    # difficulty level per task family now (the levels the next round draws at)
    levels: dict = field(default_factory=dict)
    # the families drawn rarely for want of signal (curriculum.Levels.dormant)
    dormant: list = field(default_factory=list)
    # the yardstick's records, oldest first (a few per hundred rounds)
    yardstick: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscribers: set[asyncio.Queue] = set()

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver events on ``loop`` from now on (the daemon calls this once)."""
        self._loop = loop

    def emit(self, type: str, **data: Any) -> None:
        """Record an event and deliver it to subscribers; callable from any thread.

        The one writer of the fields it changes. ``round_finished`` takes ``record=`` (a
        :class:`RoundRecord`); subscribers get it as ``metrics``, its JSON form.
        """
        event = {"type": type, "time": time.time()}
        with self._lock:
            if type == "phase":
                self.phase = data["phase"]
            elif type == "round_started":
                self.round = data["round"]
            elif type == "round_finished":
                record: RoundRecord = data.pop("record")
                event["metrics"] = record.to_json()
                self.rounds.append(record)
                self.tokens_generated += record.tokens_generated
                self.round_seconds_sum += record.seconds
                self.reward_sum += record.reward_mean
            elif type == "bundle_accepted":
                self.bundles[("accepted", "")] += 1
            elif type == "bundle_rejected":
                self.bundles[("rejected", str(data.get("reason", "")))] += 1
            elif type == "paused":
                self.paused = bool(data["paused"])
            elif type == "threads":
                self.threads = dict(data)
            elif type == "levels":
                self.levels = dict(data["levels"])
                self.dormant = list(data.get("dormant", ()))
            elif type == "yardstick":
                self.yardstick = [r for r in self.yardstick if r["round"] != data["record"]["round"]]
                self.yardstick = (self.yardstick + [data["record"]])[-_MAX_ROUNDS_KEPT:]
            self.counters[type] += 1
        event.update(data)
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._deliver(event)
        else:
            loop.call_soon_threadsafe(self._deliver, event)

    def _deliver(self, event: dict) -> None:
        for q in self._subscribers:
            if q.full():
                q.get_nowait()
            q.put_nowait(event)

    def subscribe(self) -> asyncio.Queue:
        """A queue of future events; call on the loop, and :meth:`unsubscribe` when done."""
        q: asyncio.Queue = asyncio.Queue(maxsize=_SUBSCRIBER_QUEUE)
        self._subscribers.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue) -> None:
        self._subscribers.discard(q)

    def restore_rounds(self, records: Iterable[RoundRecord]) -> None:
        """The rounds a resumed node finished before (from metrics.jsonl), for ``/v1/rounds``."""
        with self._lock:
            self.rounds.extend(records)

    def yardstick_records(self) -> list[dict]:
        with self._lock:
            return list(self.yardstick)

    def rounds_since(self, since: int) -> list[RoundRecord]:
        with self._lock:
            return [r for r in self.rounds if r.round >= since]

    def snapshot(self) -> dict[str, Any]:
        """The changing fields, read together under the lock (for the status endpoint)."""
        with self._lock:
            return {
                "round": self.round,
                "phase": self.phase,
                "paused": self.paused,
                "uptime_s": round(time.time() - self.started_at, 3),
                "last_reward": self.rounds[-1].reward_mean if self.rounds else None,
                "rounds_finished": self.counters["round_finished"],
                "tokens_generated": self.tokens_generated,
                "round_seconds_sum": self.round_seconds_sum,
                "reward_sum": self.reward_sum,
                "bundles": dict(self.bundles),
                "threads": dict(self.threads),
                "levels": dict(self.levels),
                "dormant": list(self.dormant),
                "signal_rate": self.rounds[-1].signal_rate if self.rounds else None,
                "yardstick": self.yardstick[-1] if self.yardstick else None,
            }
