"""A node's events, typed, and the one reduction of them into what the node is doing now.

The round loop, the daemon and the swarm exchange report what happens as events
(:class:`NodeEvent` subclasses) through ``NodeState.emit``; the local API streams them as
``/v1/events``, one JSON object each (:meth:`NodeEvent.to_json`: ``type``, ``time`` and the
event's fields), and the dashboard reads them back with :func:`parse_event`.

:class:`NodeView` is the one reducer: ``NodeState`` is the node's own view, and the
dashboard keeps one rebuilt from ``/v1/status``, ``/v1/rounds`` and ``/v1/yardstick``
(:meth:`NodeView.from_api`) and follows the stream with the same :meth:`NodeView.apply`.

Lives beside ``records`` under every layer: the swarm exchange, the node and the dashboard
all build or read these events. Imports nothing of the project but ``records``, ``gain`` and ``typed``.
"""

from __future__ import annotations

import collections
import dataclasses
import time
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Mapping

from swarmnode.gain import SwarmGain, yardstick_trend
from swarmnode.records import JsonRecord, RoundRecord, YardstickRecord
from swarmnode.typed import read_as

ROUNDS_KEPT = 5000  # rounds a NodeView keeps by default (the node's /v1/rounds window)


@dataclass(frozen=True, kw_only=True)
class NodeEvent:
    """Something that happened in the node, at ``time`` (epoch seconds, when it was made)."""

    TYPE: ClassVar[str] = ""
    _BY_TYPE: ClassVar[dict[str, type[NodeEvent]]] = {}

    time: float = field(default_factory=time.time)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        NodeEvent._BY_TYPE[cls.TYPE] = cls

    def to_json(self) -> dict[str, Any]:
        """The event's ``/v1/events`` object: ``type``, ``time``, then its fields."""
        return {"type": self.TYPE, "time": self.time, **self._fields_json()}

    def _fields_json(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "time"}

    @classmethod
    def _from_fields(cls, data: Mapping[str, Any]) -> NodeEvent:
        hints = typing.get_type_hints(cls)
        return cls(**{f.name: read_as(data[f.name], hints[f.name], f.name)
                      for f in dataclasses.fields(cls) if f.name != "time"})


@dataclass(frozen=True)
class PhaseChanged(NodeEvent):
    """The node entered a phase: loading, idle, generating, scoring, sharing, training, evaluating."""

    TYPE = "phase"
    phase: str


@dataclass(frozen=True)
class RoundStarted(NodeEvent):
    TYPE = "round_started"
    round: int


@dataclass(frozen=True)
class RoundFinished(NodeEvent):
    """A round finished and was saved. On the wire: ``round`` and ``metrics`` (the record's JSON)."""

    TYPE = "round_finished"
    record: RoundRecord

    def _fields_json(self) -> dict[str, Any]:
        return {"round": self.record.round, "metrics": self.record.to_json()}

    @classmethod
    def _from_fields(cls, data: Mapping[str, Any]) -> NodeEvent:
        return cls(read_as(data["metrics"], RoundRecord, "metrics"))


@dataclass(frozen=True)
class LevelsNow(NodeEvent):
    """The family levels the next round draws at, and the dormant families (after every round)."""

    TYPE = "levels"
    levels: Mapping[str, int]
    dormant: tuple[str, ...] = ()


@dataclass(frozen=True)
class YardstickScored(NodeEvent):
    """A yardstick record, new or restored on resume."""

    TYPE = "yardstick"
    record: YardstickRecord


@dataclass(frozen=True)
class ThreadsChosen(NodeEvent):
    """Torch's thread count and why (``node.threads.ThreadChoice``)."""

    TYPE = "threads"
    count: int
    reason: str
    pinned: bool = False
    others_busy: float | None = None
    cores: int = 0


@dataclass(frozen=True)
class PauseChanged(NodeEvent):
    """Paused (no new round starts) or resumed."""

    TYPE = "paused"
    paused: bool


@dataclass(frozen=True)
class BundleAccepted(NodeEvent):
    TYPE = "bundle_accepted"
    peer: str
    round: int
    groups: int  # the groups that went into the pool after re-scoring


@dataclass(frozen=True)
class BundleRefused(NodeEvent):
    """A message refused; ``peer`` is its authenticated sender, None when it has none."""

    TYPE = "bundle_rejected"
    peer: str | None
    reason: str


@dataclass(frozen=True)
class PeerJoined(NodeEvent):
    TYPE = "peer_joined"
    peer: str


@dataclass(frozen=True)
class PeerLeft(NodeEvent):
    TYPE = "peer_left"
    peer: str


def parse_event(data: Mapping[str, Any]) -> NodeEvent | None:
    """The event of one ``/v1/events`` object; None for a type this version does not know
    (a newer node's) or an object that does not fit its type."""
    cls = NodeEvent._BY_TYPE.get(data.get("type"))  # type: ignore[arg-type]
    if cls is None:
        return None
    try:
        return dataclasses.replace(cls._from_fields(data), time=read_as(data["time"], float, "time"))
    except (KeyError, TypeError, ValueError):
        return None


def _plain(value: Any) -> Any:
    if isinstance(value, JsonRecord):
        return value.to_json()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    return value



@dataclass
class NodeView:
    """What a node's events say about it: the node's ``NodeState`` and the dashboard both keep
    one and change it only through :meth:`apply`."""

    round: int = 0
    phase: str = "loading"
    paused: bool = False
    max_rounds: int = ROUNDS_KEPT
    # the latest finished rounds, oldest first (at most max_rounds)
    rounds: collections.deque = field(default_factory=collections.deque)
    # totals over every round finished since the view began (``rounds`` keeps only the latest)
    rounds_finished: int = 0
    tokens_generated: int = 0
    round_seconds_sum: float = 0.0
    reward_sum: float = 0.0
    # (outcome, reason) -> count; reason is "" for accepted bundles
    bundles: collections.Counter = field(default_factory=collections.Counter)
    # the torch thread count in use and why (ThreadsChosen's fields); empty until chosen
    threads: dict = field(default_factory=dict)
    # difficulty level per task family now (the levels the next round draws at)
    levels: dict = field(default_factory=dict)
    # the families drawn rarely for want of signal (curriculum.Levels.dormant)
    dormant: list = field(default_factory=list)
    # the yardstick's records as JSON, oldest first, one per round trained
    yardstick: list = field(default_factory=list)
    # what the swarm gives: over the latest rounds and every round of the node's history
    gain: SwarmGain = field(default_factory=SwarmGain)

    def __post_init__(self) -> None:
        self.rounds = collections.deque(self.rounds, maxlen=self.max_rounds)

    def apply(self, event: NodeEvent) -> None:
        """Change the view as ``event`` says (the one reducer of node events)."""
        match event:
            case PhaseChanged(phase=phase):
                self.phase = phase
            case RoundStarted(round=round_no):
                self.round = round_no
            case RoundFinished(record=record):
                if self.rounds and self.rounds[-1].round == record.round:
                    # already read: the dashboard reads /v1/rounds after it subscribed
                    self.rounds[-1] = record
                    return
                self.rounds.append(record)
                self.gain.add(record)
                self.rounds_finished += 1
                self.tokens_generated += record.tokens_generated
                self.round_seconds_sum += record.seconds
                self.reward_sum += record.reward_mean
            case BundleAccepted():
                self.bundles[("accepted", "")] += 1
            case BundleRefused(reason=reason):
                self.bundles[("rejected", reason)] += 1
            case PauseChanged(paused=paused):
                self.paused = paused
            case ThreadsChosen():
                self.threads = event._fields_json()
            case LevelsNow(levels=levels, dormant=dormant):
                self.levels, self.dormant = dict(levels), list(dormant)
            case YardstickScored(record=record):
                kept = [r for r in self.yardstick if r["round"] != record.round]
                self.yardstick = (kept + [record.to_json()])[-self.max_rounds:]

    def restore_rounds(self, records: Iterable[RoundRecord]) -> None:
        """The rounds a resumed node finished before it started (they count in ``gain``, not in
        the totals since start)."""
        for record in records:
            self.rounds.append(record)
            self.gain.add(record)

    @property
    def last_round(self) -> RoundRecord | None:
        return self.rounds[-1] if self.rounds else None

    def summary(self) -> dict[str, Any]:
        """What ``/v1/status`` says of the view (beside who the node is)."""
        last = self.last_round
        return {"round": self.round, "phase": self.phase, "paused": self.paused,
                "last_reward": None if last is None else last.reward_mean,
                "signal_rate": None if last is None else last.signal_rate,
                "threads": dict(self.threads), "levels": dict(self.levels), "dormant": list(self.dormant),
                "yardstick": self.yardstick[-1] if self.yardstick else None,
                "gain": self.gain.to_json(), "yardstick_trend": yardstick_trend(self.yardstick)}

    @classmethod
    def from_api(cls, status: Mapping[str, Any], rounds: Iterable[Mapping[str, Any]],
                 yardstick: Iterable[Mapping[str, Any]], max_rounds: int = ROUNDS_KEPT) -> NodeView:
        """The view a client rebuilds from ``/v1/status``, ``/v1/rounds`` and ``/v1/yardstick``
        (raises ValueError on a row that is not a record). The cumulative ``gain`` is the status's
        (``rounds`` may be only the latest); a node without one gets it from ``rounds``."""
        records = list(map(RoundRecord.from_json, rounds))
        gain = SwarmGain()
        if "gain" in status:
            gain = SwarmGain.from_json(status["gain"], records)
        else:
            for record in records:
                gain.add(record)
        return cls(round=status["round"], phase=status["phase"], paused=status["paused"], max_rounds=max_rounds,
                   rounds=collections.deque(records), gain=gain,
                   threads=dict(status["threads"]), levels=dict(status["levels"]), dormant=list(status["dormant"]),
                   yardstick=[YardstickRecord.from_json(r).to_json() for r in yardstick][-max_rounds:])
