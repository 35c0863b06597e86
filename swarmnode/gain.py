"""What the swarm gives this node, reduced from its round records: the figures ``swarmnode status``,
the dashboard and ``/metrics`` show beside the reward.

- The share of the training signal that came from peers: of the groups with non-zero advantage
  that entered the update, how many were peers' (``external``) against this node's own
  (``local``), overall and per task family.
- How peers' groups scored under this node's verifier against its own (mean reward per family):
  every peer's group pooled since the previous round, re-scored here, against the round's own
  completions.
- Groups drawn from each peer into the update.

Each figure comes twice: over the last :data:`WINDOW_ROUNDS` rounds and over every round the
node has run (``metrics.jsonl`` holds them, so a resumed node starts from its history). A
figure without data is None, never 0; :func:`no_data_reason` says why in words.

:class:`SwarmGain` is folded by :class:`swarmnode.events.NodeView` from each
:class:`~swarmnode.records.RoundRecord` it reduces. Imports nothing of the project but ``records``.
"""

from __future__ import annotations

import collections
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from swarmnode.records import RoundRecord

# Rounds of the "recent" figures. At the default I = J = 4, 20 rounds hold up to 160 groups of
# the updates, so one round moves a share by at most 5 points (8 of 160) and the figure does not
# jump with each round's draw; yet the window is short enough that a swarm that stopped helping
# (its peers gone, their groups without signal here) shows within 20 rounds, minutes on a laptop.
WINDOW_ROUNDS = 20
# Peers whose drawn groups the cumulative figures keep (the most recently drawn): a bounded
# table however many peers the swarm has.
MAX_PEERS_KEPT = 256


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


class _Totals:
    """Sums over some rounds; :meth:`to_json` gives the figures, :meth:`from_json` reads them back."""

    def __init__(self) -> None:
        self.rounds = 0
        self.last_round: int | None = None  # the newest round folded in
        self.local = 0
        self.external = 0
        self.local_by_family: Counter[str] = Counter()
        self.external_by_family: Counter[str] = Counter()
        # sum of the rounds' own mean reward per family
        self.own_reward_sum: defaultdict[str, float] = defaultdict(float)
        self.own_rounds: Counter[str] = Counter()
        # sum of peers' groups' rewards here, per family
        self.peer_reward_sum: defaultdict[str, float] = defaultdict(float)
        self.peer_groups: Counter[str] = Counter()
        self.drawn_by_peer: OrderedDict[str, int] = OrderedDict()  # least recently drawn first

    def add(self, record: RoundRecord) -> None:
        self.rounds += 1
        self.last_round = record.round if self.last_round is None else max(self.last_round, record.round)
        self.local += record.n_local
        self.external += record.n_external
        self.local_by_family.update(record.trained_by_family)
        self.external_by_family.update(record.trained_external_by_family)
        for family, reward in record.reward_by_task.items():
            self.own_reward_sum[family] += reward
            self.own_rounds[family] += 1
        for family, groups in record.peer_groups_by_family.items():
            self.peer_groups[family] += groups
            self.peer_reward_sum[family] += groups * record.peer_reward_by_family.get(family, 0.0)
        for peer, drawn in record.drawn_by_peer.items():
            self.drawn_by_peer[peer] = self.drawn_by_peer.pop(peer, 0) + drawn
        while len(self.drawn_by_peer) > MAX_PEERS_KEPT:
            self.drawn_by_peer.popitem(last=False)

    def to_json(self) -> dict[str, Any]:
        """``rounds`` (and ``last_round``, the newest), ``local``, ``external`` (groups with signal
        in the updates), ``external_share`` (None without any), ``peer_groups`` and ``peer_reward``
        (peers' groups pooled, their mean reward here), ``own_reward`` (mean of the rounds' own
        means), ``families`` (the same per family) and ``drawn_by_peer``."""
        families = sorted(set(self.local_by_family) | set(self.external_by_family) | set(self.own_rounds)
                          | set(self.peer_groups))
        own_sum, own_n = sum(self.own_reward_sum.values()), sum(self.own_rounds.values())
        peer_sum, peer_n = sum(self.peer_reward_sum.values()), sum(self.peer_groups.values())
        return {
            "rounds": self.rounds, "last_round": self.last_round, "local": self.local, "external": self.external,
            "external_share": _share(self.external, self.local + self.external),
            "own_reward": own_sum / own_n if own_n else None,
            "peer_groups": peer_n, "peer_reward": peer_sum / peer_n if peer_n else None,
            "families": {f: {
                "local": self.local_by_family[f], "external": self.external_by_family[f],
                "external_share": _share(self.external_by_family[f],
                                         self.local_by_family[f] + self.external_by_family[f]),
                "own_rounds": self.own_rounds[f],
                "own_reward": self.own_reward_sum[f] / self.own_rounds[f] if self.own_rounds[f] else None,
                "peer_groups": self.peer_groups[f],
                "peer_reward": self.peer_reward_sum[f] / self.peer_groups[f] if self.peer_groups[f] else None,
            } for f in families},
            "drawn_by_peer": dict(self.drawn_by_peer),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> _Totals:
        """The sums :meth:`to_json` described (KeyError, TypeError or ValueError when it did not)."""
        t = cls()
        t.rounds, t.local, t.external = int(data["rounds"]), int(data["local"]), int(data["external"])
        t.last_round = None if data["last_round"] is None else int(data["last_round"])
        for family, f in data["families"].items():
            t.local_by_family[family], t.external_by_family[family] = int(f["local"]), int(f["external"])
            t.own_rounds[family], t.peer_groups[family] = int(f["own_rounds"]), int(f["peer_groups"])
            t.own_reward_sum[family] = float(f["own_reward"] or 0.0) * t.own_rounds[family]
            t.peer_reward_sum[family] = float(f["peer_reward"] or 0.0) * t.peer_groups[family]
        t.drawn_by_peer.update((str(p), int(n)) for p, n in data["drawn_by_peer"].items())
        return t


class SwarmGain:
    """The figures over the last ``window`` rounds and over every round folded in (see the module doc)."""

    def __init__(self, window: int = WINDOW_ROUNDS, total: _Totals | None = None,
                 recent: Iterable[RoundRecord] = ()):
        self.recent: collections.deque[RoundRecord] = collections.deque(recent, maxlen=window)
        self.total = total or _Totals()

    def add(self, record: RoundRecord) -> None:
        self.recent.append(record)
        self.total.add(record)

    def to_json(self) -> dict[str, Any]:
        """``{"window": N, "recent": figures, "total": figures}`` (figures: :meth:`_Totals.to_json`)."""
        recent = _Totals()
        for record in self.recent:
            recent.add(record)
        return {"window": self.recent.maxlen, "recent": recent.to_json(), "total": self.total.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], rounds: Iterable[RoundRecord]) -> SwarmGain:
        """The gain a client rebuilds from ``/v1/status``'s ``gain`` (its totals) and the latest
        ``rounds`` (the recent window; those newer than the totals' last round, finished between
        the two reads, are added to them); ValueError when ``data`` is not of :meth:`to_json`'s form."""
        try:
            total = _Totals.from_json(data["total"])
            window = int(data["window"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"gain is not a SwarmGain's JSON ({type(exc).__name__}: {exc})") from None
        rounds = list(rounds)
        for record in rounds:
            if total.last_round is None or record.round > total.last_round:
                total.add(record)
        return cls(window, total, rounds[-window:])


def no_data_reason(figures: Mapping[str, Any], what: str) -> str | None:
    """Why a figure of ``figures`` (one window's :meth:`_Totals.to_json`) is None, in words;
    None when it has data. ``what``: ``external_share``, ``peer_reward`` or ``own_reward``."""
    if figures.get(what) is not None:
        return None
    if not figures["rounds"]:
        return "no round finished yet"
    if what == "external_share":
        return "no group had signal yet"
    if what == "peer_reward":
        return "no external groups yet"
    return "no own reward recorded yet"


def yardstick_trend(records: list[Mapping[str, Any]], points: int = 5) -> dict[str, Any]:
    """The yardstick against the untrained score (the record after 0 rounds): ``untrained``,
    ``latest``, ``round`` (of the latest), ``change`` (latest minus untrained) and ``trend``
    (``[round, change]`` of the last ``points`` records); None where unknown, and ``reason``
    saying why when ``change`` is None."""
    first = records[0] if records else None
    untrained = first["score"] if first is not None and first["round"] == 0 else None
    latest = records[-1] if records else None
    reason = None
    if latest is None:
        reason = "no yardstick taken yet"
    elif first is not None and first["round"] != 0:
        reason = f"no untrained score (the first yardstick was after {first['round']} rounds)"
    elif untrained is None or latest["score"] is None:
        reason = "a yardstick without a score"
    elif latest["round"] == 0:
        reason = "only the untrained score so far"

    def change(r: Mapping[str, Any]) -> float | None:
        return None if untrained is None or r["score"] is None else r["score"] - untrained

    return {"untrained": untrained, "latest": None if latest is None else latest["score"],
            "round": None if latest is None else latest["round"],
            "change": None if reason or latest is None else change(latest), "reason": reason,
            "trend": [[r["round"], change(r)] for r in records[1:][-points:]] if untrained is not None else []}
