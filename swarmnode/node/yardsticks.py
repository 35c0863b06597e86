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

:class:`YardstickSchedule` keeps this for one node: it follows the node's rounds as a listener
of its events (``NodeState.listen``: each finished round earns the clock its share) and takes
the due yardstick when the daemon gives it a gap (:meth:`YardstickSchedule.between_rounds`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from swarmnode.events import NodeEvent, PhaseChanged, RoundFinished, YardstickScored
from swarmnode.node.metrics import MetricsLog
from swarmnode.node.round import Node
from swarmnode.records import YardstickRecord
from swarmnode.train.yardstick import (
    YardstickRun,
    cached_untrained,
    store_untrained,
    untrained_key,
    untrained_weights,
    yardstick_questions,
)

log = logging.getLogger(__name__)

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


class YardstickSchedule:
    """When ``node`` takes its yardstick, every ``eval_every`` rounds, and the one being taken.

    Register it as a listener of the node's events (``node.state.listen(schedule)``) and call
    :meth:`restore` after ``node.resume()``. Runs in the node's model thread, like the round.
    """

    def __init__(self, node: Node, clock: YardstickClock | None = None):
        self.node = node
        self.clock = clock or YardstickClock()
        self.log = MetricsLog(node.home.yardstick_file, YardstickRecord)
        # The yardstick being taken, with the untrained score's cache key (round 0 only).
        self._run: tuple[YardstickRun, str | None] | None = None
        self._passed: set[int] = set()  # rounds whose yardstick is skipped or failed
        self.cached = False  # whether the last record came from the cache

    def __call__(self, event: NodeEvent) -> None:
        if isinstance(event, RoundFinished):
            self.clock.round_done(event.record.seconds)

    def restore(self) -> None:
        """Keep the records of the rounds the resumed node has trained (see ``Node.resume``), and show them."""
        for record in self.log.truncate_after(self.node.next_round):
            self.node.state.emit(YardstickScored(record))

    def due(self) -> bool:
        """True when the policy as of ``next_round`` should be scored on the yardstick and is not yet."""
        every, r = self.node.cfg.eval_every, self.node.next_round
        return bool(every) and r % every == 0 and r not in self._passed and not any(
            row["round"] == r for row in self.node.state.yardstick)

    @property
    def pending(self) -> int | None:
        """The round whose yardstick is being taken, if one is."""
        return None if self._run is None else self._run[0].round

    def _start(self) -> YardstickRecord | None:
        """Begin the due yardstick: a copy of the adapter as it is now (round 0: the base model's,
        whose score may come from the cache, which returns its record at once)."""
        node, r = self.node, self.node.next_round
        try:
            questions = yardstick_questions(node.tasks.spec)
        except Exception as exc:  # noqa: BLE001 - reasoning-gym's generators are third-party code
            self._passed.add(r)
            log.warning("yardstick after %d rounds not taken: its questions could not be made (%s: %s)",
                        r, type(exc).__name__, exc)
            return None
        key = None
        if r == 0:
            key = untrained_key(node.policy, questions)
            cached = cached_untrained(key)
            try:
                record = None if cached is None else YardstickRecord.from_json(
                    {**cached, "round": 0, "started_at": time.time()})
            except ValueError as exc:
                log.debug("cached untrained yardstick ignored: %s", exc)
                record = None
            if record is not None:
                return self._record(record, cached=True)
            weights = untrained_weights(node.policy)
        else:
            weights = [p.detach().clone() for p in node.policy.params]
        self._run = (YardstickRun(r, questions, weights), key)
        return None

    def _record(self, record: YardstickRecord, cached: bool = False) -> YardstickRecord:
        self.cached = cached
        self.log.append(record)
        self.node.state.emit(YardstickScored(record))
        return record

    def _advance(self, budget_s: float, should_stop: Callable[[], bool]) -> YardstickRecord | None:
        """One :meth:`YardstickRun.step` of the pending yardstick; its record once it is complete."""
        assert self._run is not None
        run, key = self._run
        self.node.state.emit(PhaseChanged("evaluating"))
        before = run.seconds
        try:
            done = run.step(self.node.policy, self.node.scorer, budget_s, should_stop)
        except Exception as exc:  # noqa: BLE001 - a yardstick failure costs the record, never the node
            self._run = None
            self._passed.add(run.round)
            log.warning("yardstick after %d rounds not taken: %s: %s", run.round, type(exc).__name__, exc)
            return None
        finally:
            self.clock.spent(run.seconds - before)
        if not done:
            return None
        self._run = None
        result = run.result()
        if key is not None:
            store_untrained(key, result)
        return self._record(YardstickRecord(round=run.round, started_at=run.started_at, **result))

    def between_rounds(self, should_stop: Callable[[], bool] = lambda: False) -> YardstickRecord | None:
        """Take what the clock allows of the pending or due yardstick; its record once complete.

        A yardstick due while another is still being taken is skipped (one log line), so its
        cost stays within the clock's share however slow it is.
        """
        r = self.node.next_round
        if self.due():
            if self._run is None:
                record = self._start()
                if record is not None:
                    return record
            elif self._run[0].round != r:
                self._passed.add(r)
                log.info("yardstick after %d rounds skipped: the one after %d rounds is still being taken",
                         r, self._run[0].round)
        if self._run is None or not self.clock.may_run(self._run[0].next_cost(self.node.policy)):
            return None
        return self._advance(self.clock.gap(), should_stop)

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> YardstickRecord | None:
        """Take the pending or due yardstick to its end now; record and return it.

        Its row's ``round`` is the number of rounds trained when its adapter was copied. A stop
        request ends it with nothing recorded (None); it is taken again on restart while due.
        """
        if self._run is None:
            if not self.due():
                return None
            record = self._start()
            if record is not None or self._run is None:
                return record
        while self._run is not None:
            record = self._advance(float("inf"), should_stop)
            if should_stop():
                return None
            if record is not None:
                return record
        return None

    def abandon(self) -> None:
        """Drop the yardstick being taken (the node stops), with one warning."""
        if self._run is not None:
            run = self._run[0]
            log.warning("yardstick after %d rounds not finished: the node stopped (%d of %d questions scored)",
                        run.round, run.scored, len(run.questions))
            self._run = None
