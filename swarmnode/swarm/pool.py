"""Where peers' groups wait to be trained on, and what the node knows about each peer.

:class:`ExternalPool` holds external groups that already carry this node's own rewards (the
daemon re-scores every group on arrival), bounded per round, per peer and in total. The J
external groups of a round are drawn from it: ``uniform`` (the SAPO paper) or
``reward-weighted`` (the paper's suggested improvement), with a cap on any one peer's share.

:class:`PeerTable` is the node's view of its peers for display: bundles accepted, rejected by
reason, last round and the sender-reported mean reward (never used for training).

Both are thread-safe: transports deliver from their own threads.
"""

from __future__ import annotations

import bisect
import math
import random
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from swarmnode.swarm.identity import name_from_peer_id
from swarmnode.records import Group

SAMPLING_MODES = ("uniform", "reward-weighted")
# Added to every group's mean reward in reward-weighted sampling, so a group whose responses
# all scored low (yet differ) can still be drawn.
REWARD_FLOOR = 0.05
UNKNOWN_PEER = "unknown"


@dataclass(order=True)
class _Entry:
    round_no: int
    seq: int
    group: Group = field(compare=False)

    @property
    def peer(self) -> str:
        return self.group.source


class ExternalPool:
    """Bounded store of peers' groups; when a cap is hit the oldest (lowest round, then first
    arrived) group under that cap leaves first."""

    def __init__(self, *, max_total: int = 2048, max_per_round: int = 512, max_per_peer: int = 128):
        if min(max_total, max_per_round, max_per_peer) < 1:
            raise ValueError("pool caps must be >= 1")
        self.max_total, self.max_per_round, self.max_per_peer = max_total, max_per_round, max_per_peer
        self._entries: list[_Entry] = []  # sorted by (round, arrival): oldest first
        self._by_peer: Counter[str] = Counter()
        self._by_round: Counter[int] = Counter()
        self._seq = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, round_no: int, groups: list[Group]) -> int:
        """Store ``groups`` of ``round_no`` (``.source`` = sender PeerID); returns how many stayed."""
        with self._lock:
            added = []
            for g in groups:
                entry = _Entry(round_no, self._seq, g)
                self._seq += 1
                bisect.insort(self._entries, entry)
                self._by_peer[entry.peer] += 1
                self._by_round[round_no] += 1
                added.append(entry)
                self._evict(entry)
            kept = {id(e) for e in self._entries}
            return sum(id(e) in kept for e in added)

    def _evict(self, entry: _Entry) -> None:
        if self._by_peer[entry.peer] > self.max_per_peer:
            self._remove_first(lambda e: e.peer == entry.peer)
        if self._by_round[entry.round_no] > self.max_per_round:
            self._remove_first(lambda e: e.round_no == entry.round_no)
        if len(self._entries) > self.max_total:
            self._remove_first(lambda e: True)

    def _remove_first(self, match: Callable[[_Entry], bool]) -> None:
        for i, e in enumerate(self._entries):
            if match(e):
                del self._entries[i]
                self._by_peer[e.peer] -= 1
                self._by_round[e.round_no] -= 1
                if not self._by_peer[e.peer]:
                    del self._by_peer[e.peer]
                if not self._by_round[e.round_no]:
                    del self._by_round[e.round_no]
                return

    def sample(self, n: int, rng: random.Random, *, exclude: str | None = None, mode: str = "uniform",
               max_peer_share: float = 0.5, min_round: int | None = None) -> list[Group]:
        """Up to ``n`` distinct groups with signal, never from ``exclude``, at most
        ``max(1, ceil(max_peer_share * n))`` from one peer; deterministic given ``rng``.

        ``uniform`` draws each eligible group with equal chance; ``reward-weighted`` with
        chance proportional to its mean (receiver) reward plus :data:`REWARD_FLOOR`.
        """
        if mode not in SAMPLING_MODES:
            raise ValueError(f"sampling mode must be one of {', '.join(SAMPLING_MODES)}, not {mode!r}")
        with self._lock:
            candidates = [e.group for e in self._entries
                          if e.peer != exclude and (min_round is None or e.round_no >= min_round)
                          and e.group.has_signal()]
        per_peer_cap = max(1, math.ceil(max_peer_share * n))
        if mode == "uniform":
            weights = [1.0] * len(candidates)
        else:
            weights = [max(sum(g.rewards) / len(g.rewards), 0.0) + REWARD_FLOOR for g in candidates]
        taken: Counter[str] = Counter()
        out: list[Group] = []
        while len(out) < n and candidates:
            i = rng.choices(range(len(candidates)), weights)[0]
            g = candidates.pop(i)
            weights.pop(i)
            out.append(g)
            taken[g.source] += 1
            if taken[g.source] >= per_peer_cap:
                keep = [j for j, c in enumerate(candidates) if c.source != g.source]
                candidates = [candidates[j] for j in keep]
                weights = [weights[j] for j in keep]
        return out

    def stats(self) -> dict:
        """``{"total": n, "by_peer": {peer: n}, "by_round": {round: n}}``."""
        with self._lock:
            return {"total": len(self._entries), "by_peer": dict(self._by_peer),
                    "by_round": dict(sorted(self._by_round.items()))}


@dataclass
class _PeerRow:
    peer_id: str
    name: str
    first_seen: float
    last_seen: float
    accepted: int = 0
    rejected: int = 0
    rejected_by_reason: Counter[str] = field(default_factory=Counter)
    last_round: int | None = None
    reported_mean_reward: float | None = None


class PeerTable:
    """What this node knows of each peer; the least recently seen peer leaves past ``max_peers``."""

    def __init__(self, *, max_peers: int = 10_000, clock: Callable[[], float] = time.time):
        self.max_peers = max_peers
        self._clock = clock
        self._rows: OrderedDict[str, _PeerRow] = OrderedDict()  # least recently seen first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def _row(self, peer_id: str) -> _PeerRow:
        """The peer's row, created if new and marked seen now; call with the lock held."""
        now = self._clock()
        row = self._rows.get(peer_id)
        if row is None:
            row = self._rows[peer_id] = _PeerRow(peer_id, name_from_peer_id(peer_id), now, now)
            while len(self._rows) > self.max_peers:
                self._rows.popitem(last=False)
        else:
            row.last_seen = now
            self._rows.move_to_end(peer_id)
        return row

    def touch(self, peer_id: str) -> None:
        """The peer was seen on the network (connected, or listed by the transport)."""
        with self._lock:
            self._row(peer_id)

    def record_bundle(self, peer_id: str, *, round_no: int, reported_mean: float | None) -> None:
        """The peer's bundle of ``round_no`` was accepted; ``reported_mean`` is its own claim."""
        with self._lock:
            row = self._row(peer_id)
            row.accepted += 1
            row.last_round = round_no if row.last_round is None else max(row.last_round, round_no)
            if reported_mean is not None:
                row.reported_mean_reward = reported_mean

    def record_rejection(self, peer_id: str | None, reason: str) -> None:
        """A bundle was rejected; ``peer_id`` None (sender not authenticated) counts as ``unknown``."""
        with self._lock:
            row = self._row(peer_id or UNKNOWN_PEER)
            row.rejected += 1
            row.rejected_by_reason[reason] += 1

    def rows(self) -> list[dict]:
        """One dict per peer, most recently seen first (JSON-ready)."""
        with self._lock:
            return [{"peer_id": r.peer_id, "name": UNKNOWN_PEER if r.peer_id == UNKNOWN_PEER else r.name,
                     "first_seen": r.first_seen, "last_seen": r.last_seen, "accepted": r.accepted,
                     "rejected": r.rejected, "rejected_by_reason": dict(r.rejected_by_reason),
                     "last_round": r.last_round, "reported_mean_reward": r.reported_mean_reward}
                    for r in reversed(self._rows.values())]
