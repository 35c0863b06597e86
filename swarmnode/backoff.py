"""Delays between retries, the one rule of every retry loop: the join loop and the libp2p
host's revival (swarm), an awaited round asked for again (the pull plan's freshness), the
dashboard reconnecting to its node (tui). No I/O."""

from __future__ import annotations

import random


class Backoff:
    """Delays for retrying: ``first``, doubling up to ``cap``, each with +-``jitter`` (a share
    of it) drawn from ``rng`` or the module's generator; with ``jitter`` 0 nothing is drawn,
    so a simulation's random stream is left as it is. :meth:`reset` starts from ``first``."""

    def __init__(self, first: float = 1.0, cap: float = 60.0, rng: random.Random | None = None, *,
                 jitter: float = 0.2):
        if not 0 <= jitter < 1:
            raise ValueError(f"jitter is a share of the delay in [0, 1), got {jitter}")
        self.first = first
        self.cap = cap
        self.rng = rng
        self.jitter = jitter
        self._next = first

    @property
    def upcoming(self) -> float:
        """The delay :meth:`next_delay` returns next, before its jitter."""
        return self._next

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self.cap)
        if not self.jitter:
            return delay
        return delay * (self.rng or random).uniform(1 - self.jitter, 1 + self.jitter)

    def reset(self) -> None:
        self._next = self.first
