"""When a node takes its yardstick: in the gaps between rounds, within a share of its time.

The yardstick (:mod:`swarmnode.train.yardstick`) takes far longer than a gap between two
rounds may last (54 questions against a few seconds), so it is taken a piece at a time. The
rule, :data:`SHARE` = 5 %:

- over any stretch since the node started, yardstick pieces take at most ``SHARE`` of the
  time its rounds took (a credit: ``SHARE`` x rounds' seconds - yardstick seconds; a piece
  runs only when the credit covers its estimate, and an overrun is paid back before the next);
- one gap holds at most ``SHARE`` of the round before it. A piece is at least one question,
  so where a round is shorter than twenty questions' time (tiny test rounds, never the
  default sizes) a gap may hold one question more than that; the credit still holds.

Nothing runs before round 0: its first yardstick, the untrained policy's, comes from the
cache when any node of the same model and task mix measured it before.
"""

from __future__ import annotations

SHARE = 0.05


class YardstickClock:
    """The credit of yardstick time (see the module docstring)."""

    def __init__(self, share: float = SHARE):
        self.share = share
        self.rounds_s = 0.0
        self.spent_s = 0.0
        self.last_round_s = 0.0

    def round_done(self, seconds: float) -> None:
        self.rounds_s += seconds
        self.last_round_s = seconds

    def spent(self, seconds: float) -> None:
        self.spent_s += seconds

    @property
    def credit(self) -> float:
        return self.share * self.rounds_s - self.spent_s

    def gap(self) -> float:
        """Seconds this gap may give the yardstick: the credit, capped by ``share`` of the last round."""
        return max(0.0, min(self.credit, self.share * self.last_round_s))

    def may_run(self, estimate: float | None) -> bool:
        """Whether a piece whose first question is estimated at ``estimate`` s (None: not yet known) may run now."""
        return self.credit > 0 and (estimate is None or estimate <= self.credit)
