"""Virtual time: a clock and a heap of events, one process, deterministic.

An event is a callable and its arguments, run at a virtual time; ties run in the order they
were scheduled, so a run depends only on what was scheduled and the seeds of the random
generators the caller hands out. Nothing here sleeps or reads the wall clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any


class Engine:
    """The clock (:attr:`now`, seconds) and the event heap."""

    def __init__(self) -> None:
        self.now = 0.0
        self.events_run = 0
        self._heap: list[tuple[float, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = 0

    def at(self, when: float, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` at virtual time ``when`` (now, if that has passed)."""
        self._seq += 1
        heapq.heappush(self._heap, (max(when, self.now), self._seq, fn, args))

    def after(self, delay: float, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` ``delay`` seconds from now."""
        self.at(self.now + delay, fn, *args)

    def run(self, until: float) -> None:
        """Run every event due up to ``until``, in time order; the clock then reads ``until``."""
        heap, pop = self._heap, heapq.heappop
        while heap and heap[0][0] <= until:
            when, _, fn, args = pop(heap)
            self.now = when
            self.events_run += 1
            fn(*args)
        self.now = max(self.now, until)

    def pending(self) -> int:
        return len(self._heap)
