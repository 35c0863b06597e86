"""Where peers' groups wait to be trained on, and what the node knows about each peer.

:class:`ExternalPool` holds external groups that already carry this node's own rewards (the
daemon re-scores every group on arrival), bounded per peer and in total. Age is arrival
order at this node, never the round a sender declares: rounds are per-node counters that
order one sender's bundles, never one sender's against another's, so a sender claiming
round 10^9 is no newer than anyone else. When the pool is full, the peer holding the most
(in the over-full class, see below) loses its oldest group: every peer keeps at least an
equal share of the room it competes for.

Room and draws are split over peers by :class:`~swarmnode.swarm.standing.PeerShare`: with a
:class:`~swarmnode.swarm.standing.Standing`, peers without a record (newcomers) hold at most
``newcomer_share`` of the pool and get at most that share of a round's draws, together. The
J external groups of a round are drawn peer first (each eligible peer equally likely, or
weighted by the mean weight of its eligible groups), then one group of that peer by the same
weights, with a cap on any one peer's share; which groups are eligible and what each weighs is
the node's sampling mode (:mod:`swarmnode.sampling`). ``above-own`` draws only groups whose mean
reward, as this node scored them, is above this node's own recent mean reward on their family
(:class:`OwnRewards`): a weak node learns from peers that do better than it does, and a strong
one leaves the slots of groups worse than its own to its own groups. That bar falls when the
node's own reward does, so a strong node that has started to take weaker groups takes ever
more; ``above-best`` holds the bar at the best recent mean the node has reached on the family,
so what it takes never pulls its bar down.

:class:`PeerTable` is the node's view of its peers for display: bundles accepted, rejected by
reason, last round, the sender-reported mean reward (never used for training), the model
its latest accepted bundle named (information only, made safe to print by :func:`display_text`),
its responses left out of training by reason and its completions measured against the
log-prob bound (:mod:`swarmnode.train.answers`), and what its groups are worth here: how many
this node kept, how many had signal, their mean reward under this node's verifier, and how
many it dropped on arrival by reason.

Both are thread-safe: transports deliver from their own threads.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
import unicodedata
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from swarmnode.records import Group
from swarmnode.sampling import SamplingMode, Uniform
from swarmnode.swarm.bundle import BundleRejected, group_fields, parse_group
from swarmnode.swarm.identity import name_from_peer_id
from swarmnode.swarm.standing import PeerShare, Standing

UNKNOWN_PEER = "unknown"
# Longest model name the peer table keeps: a stranger's string, shown in a narrow column.
MAX_MODEL_CHARS = 40
# Peers whose usefulness a node keeps across restarts (PeerTable.usefulness_json): the most recently seen.
PEERS_PERSISTED = 256


def display_text(text: str, limit: int = MAX_MODEL_CHARS) -> str:
    """A stranger's string made safe to print in a terminal: runs of whitespace become one
    space, then control, format (bidi overrides, zero-width), other separator and unassigned
    characters each one '?', and past ``limit`` characters it ends in '…'."""
    safe = "".join(c if c == " " or unicodedata.category(c)[0] not in "CZ" else "?" for c in " ".join(text.split()))
    return safe if len(safe) <= limit else safe[:limit - 1] + "…"


@dataclass
class _Entry:
    round_no: int  # as the sender declared it: for display and ``min_round`` only, never for age
    seq: int  # arrival order at this node
    group: Group


class OwnRewards:
    """This node's own recent rewards per family (the last ``window`` completions of each): the
    bar a peer's group must pass in ``above-own`` sampling (:meth:`means`) and in ``above-best``
    (:meth:`bests`). Fed the node's own scored groups each round; used from the round's thread only."""

    def __init__(self, window: int = 64):
        self._by_family: dict[str, deque[float]] = {}
        # family -> the highest mean of a full window so far: a bar the node's own decline cannot lower
        self._best: dict[str, float] = {}
        self.window = window

    def note(self, groups: list[Group]) -> None:
        for g in groups:
            recent = self._by_family.setdefault(g.question.family, deque(maxlen=self.window))
            recent.extend(g.rewards)
            if len(recent) == self.window:
                mean = statistics.fmean(recent)
                self._best[g.question.family] = max(mean, self._best.get(g.question.family, mean))

    def means(self) -> dict[str, float]:
        return {family: statistics.fmean(rewards) for family, rewards in self._by_family.items() if rewards}

    def bests(self) -> dict[str, float]:
        """Per family, the highest mean a full window of it has had; the recent mean while the
        window has not yet filled (a few completions are too noisy to hold a bar at)."""
        return {**self.means(), **self._best}

    def to_json(self) -> dict:
        """The recent rewards and best means, ``{"recent": [[family, [reward, ...]], ...],
        "best": {family: mean}}``, for :meth:`restore`."""
        return {"recent": [[family, list(rewards)] for family, rewards in self._by_family.items()],
                "best": dict(self._best)}

    def restore(self, state: dict | list) -> None:
        """Take the state of :meth:`to_json` (or a bare ``recent`` list, which has no best means);
        ValueError, and nothing changed, when ``state`` is not of that form."""
        try:
            recent, best = (state, {}) if isinstance(state, list) else (state["recent"], state["best"])
            by_family = {str(f): deque((float(x) for x in rewards), maxlen=self.window) for f, rewards in recent}
            best = {str(f): float(m) for f, m in best.items()}
        except (TypeError, ValueError, KeyError, AttributeError):
            raise ValueError("own rewards are not {'recent': [[family, [reward, ...]], ...], "
                             "'best': {family: mean}}") from None
        self._by_family, self._best = by_family, best


def _mean(group: Group) -> float:
    return sum(group.rewards) / len(group.rewards)


UNIFORM = Uniform()


class ExternalPool:
    """Bounded store of peers' groups (see the module doc for who leaves first).

    ``standing`` None treats every peer as established (no newcomer limit): the experiment
    harness, whose members are all known; a node passes its exchange's standing.
    """

    def __init__(self, *, max_total: int = 2048, max_per_peer: int = 128, standing: Standing | None = None,
                 newcomer_share: float = 0.25):
        if min(max_total, max_per_peer) < 1:
            raise ValueError("pool caps must be >= 1")
        if not 0.0 <= newcomer_share <= 1.0:
            raise ValueError("newcomer_share must be within [0, 1]")
        self.max_total, self.max_per_peer = max_total, max_per_peer
        self.standing = standing
        self.newcomer_share = 1.0 if standing is None else newcomer_share
        self._by_peer: dict[str, deque[_Entry]] = {}  # each peer's groups, oldest first
        self._by_round: Counter[int] = Counter()
        self._total = 0
        self._seq = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._total

    def _established(self, peer: str) -> bool:
        return self.standing is None or self.standing.is_established(peer)

    def add(self, round_no: int, groups: list[Group]) -> int:
        """Store ``groups`` of ``round_no`` (``.source`` = sender PeerID); returns how many stayed."""
        with self._lock:
            added = []
            for g in groups:
                entry = _Entry(round_no, self._seq, g)
                self._seq += 1
                self._by_peer.setdefault(g.source, deque()).append(entry)
                self._by_round[round_no] += 1
                self._total += 1
                added.append(entry)
                self._evict(g.source)
            kept = {id(e) for q in self._by_peer.values() for e in q}
            return sum(id(e) in kept for e in added)

    def _evict(self, peer: str) -> None:
        """Bring the pool back within its caps after ``peer`` added one group."""
        if len(self._by_peer[peer]) > self.max_per_peer:
            self._remove_oldest(peer)
        newcomer_room = PeerShare(newcomer_share=self.newcomer_share).newcomers(self.max_total)
        newcomers = [p for p in self._by_peer if not self._established(p)]
        if newcomers and sum(len(self._by_peer[p]) for p in newcomers) > newcomer_room:
            self._remove_oldest(self._largest(newcomers))
        if self._total > self.max_total:
            established = [p for p in self._by_peer if self._established(p)]
            self._remove_oldest(self._largest(established or newcomers))

    def _largest(self, peers: list[str]) -> str:
        """The peer holding the most groups; of equals, the one with the oldest group."""
        return max(peers, key=lambda p: (len(self._by_peer[p]), -self._by_peer[p][0].seq))

    def _remove_oldest(self, peer: str) -> None:
        self._remove(peer, self._by_peer[peer][0])

    def _remove(self, peer: str, entry: _Entry) -> None:
        queue = self._by_peer[peer]
        queue.remove(entry)
        if not queue:
            del self._by_peer[peer]
        self._total -= 1
        self._by_round[entry.round_no] -= 1
        if not self._by_round[entry.round_no]:
            del self._by_round[entry.round_no]

    def sample(self, n: int, rng: random.Random, *, exclude: str | None = None, mode: SamplingMode = UNIFORM,
               max_peer_share: float = 0.5, min_round: int | None = None, consume: bool = False) -> list[Group]:
        """Up to ``n`` distinct groups with signal, never from ``exclude``, split over peers by
        :class:`PeerShare` (at most ``max(1, ceil(max_peer_share * n))`` from one peer,
        newcomers together at most ``floor(newcomer_share * n)``); deterministic given ``rng``.

        ``mode`` (:mod:`swarmnode.sampling`) says which groups are eligible and what each
        weighs; a peer is drawn with equal chance (``uniform``) or by the mean weight of its
        eligible groups (so sending more groups never raises a peer's chance), then one of its
        groups by their weights.

        ``consume`` takes the drawn groups out of the pool, so each trains this node once; without
        it a group stays until evicted and may be drawn again in a later round.
        """
        weigh = mode.weigher()
        with self._lock:
            candidates: dict[str, list[Group]] = {}
            weights: dict[str, list[float]] = {}
            for peer, queue in self._by_peer.items():
                if peer == exclude:
                    continue
                eligible = [(e.group, w) for e in queue
                            if (min_round is None or e.round_no >= min_round) and e.group.has_signal()
                            and (w := weigh(e.group)) is not None]
                if eligible:
                    candidates[peer] = [g for g, _ in eligible]
                    weights[peer] = [w for _, w in eligible]
            established = {p: self._established(p) for p in candidates}
        share = PeerShare(max_peer_share=max_peer_share, newcomer_share=self.newcomer_share)
        peers = share.pick(n, {p: len(gs) for p, gs in candidates.items()}, established.__getitem__, rng,
                           {p: sum(w) / len(w) for p, w in weights.items()} if mode.WEIGHS_PEERS else None)
        out: list[Group] = []
        for peer in peers:
            i = rng.choices(range(len(candidates[peer])), weights[peer])[0]
            out.append(candidates[peer].pop(i))
            weights[peer].pop(i)
        if consume:
            self._discard(out)
        return out

    def _discard(self, groups: list[Group]) -> None:
        """Take ``groups`` out of the pool; one evicted meanwhile is already gone."""
        drawn = {id(g) for g in groups}
        with self._lock:
            for peer in {g.source for g in groups} & self._by_peer.keys():
                for entry in [e for e in self._by_peer[peer] if id(e.group) in drawn]:
                    self._remove(peer, entry)

    def to_json(self) -> dict:
        """The pool's contents, JSON-ready, for :meth:`restore`: each peer's groups oldest first, in
        the order the pool keeps peers (draws depend on it), as bundles carry groups (with this
        node's rewards), with their declared rounds and arrival numbers."""
        with self._lock:
            return {"seq": self._seq, "peers": [
                {"peer": peer, "rounds": [e.round_no for e in queue], "seqs": [e.seq for e in queue],
                 "groups": [group_fields(e.group) for e in queue]} for peer, queue in self._by_peer.items()]}

    def restore(self, state: Mapping) -> None:
        """Replace the contents with those of :meth:`to_json`; every group is read by the bundle
        format's own checks. ValueError (and the pool unchanged) when ``state`` is not of that form."""
        by_peer: dict[str, deque[_Entry]] = {}
        try:
            for row in state["peers"]:
                peer, rounds, seqs, groups = str(row["peer"]), row["rounds"], row["seqs"], row["groups"]
                if not len(rounds) == len(seqs) == len(groups) > 0:
                    raise ValueError(f"peer {peer}: rounds, seqs and groups differ in length or are empty")
                by_peer[peer] = deque(_Entry(int(r), int(q), parse_group(g, peer))
                                      for r, q, g in zip(rounds, seqs, groups))
            seq = int(state["seq"])
        except (KeyError, TypeError, ValueError, BundleRejected) as exc:
            raise ValueError(f"pool state is damaged ({type(exc).__name__}: {exc})") from None
        with self._lock:
            self._by_peer = by_peer
            self._by_round = Counter(e.round_no for q in by_peer.values() for e in q)
            self._total = sum(map(len, by_peer.values()))
            self._seq = seq

    def groups(self) -> list[Group]:
        """Every pooled group, in arrival order."""
        with self._lock:
            entries = [e for q in self._by_peer.values() for e in q]
        return [e.group for e in sorted(entries, key=lambda e: e.seq)]

    def stats(self) -> dict:
        """``{"total": n, "by_peer": {peer: n}, "by_round": {declared round: n}}``."""
        with self._lock:
            return {"total": self._total, "by_peer": {p: len(q) for p, q in self._by_peer.items()},
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
    model: str | None = None
    # Its responses left out of training, by reason (swarmnode.train.answers), and its
    # completions the update measured against the bound on their distance from this node's policy.
    left_out_by_reason: Counter[str] = field(default_factory=Counter)
    logprob_measured: int = 0
    # its groups this node re-scored and kept, those with signal, their rewards' sum (of each
    # group's mean), and its groups dropped on arrival by reason (swarm.exchange.GROUP_DROP_REASONS)
    groups: int = 0
    groups_with_signal: int = 0
    reward_sum: float = 0.0
    groups_dropped: Counter[str] = field(default_factory=Counter)

    def usefulness(self) -> dict:
        """The row's figures of what its groups are worth here (``reward_here`` None before any)."""
        return {"groups": self.groups, "groups_with_signal": self.groups_with_signal,
                "reward_here": self.reward_sum / self.groups if self.groups else None,
                "groups_dropped": dict(self.groups_dropped)}


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

    def record_bundle(self, peer_id: str, *, round_no: int, reported_mean: float | None,
                      model: str | None = None) -> None:
        """The peer's bundle of ``round_no`` was accepted; ``reported_mean`` and ``model`` are its own claims."""
        with self._lock:
            row = self._row(peer_id)
            row.accepted += 1
            row.last_round = round_no if row.last_round is None else max(row.last_round, round_no)
            if reported_mean is not None:
                row.reported_mean_reward = reported_mean
            if model is not None:
                row.model = display_text(model)

    def record_left_out(self, peer_id: str, reasons: Mapping[str, int]) -> None:
        """``reasons[r]`` of the peer's responses were left out of training for ``r``."""
        if not reasons:
            return
        with self._lock:
            self._row(peer_id).left_out_by_reason.update(reasons)

    def record_measured(self, peer_id: str, n: int) -> None:
        """The update measured ``n`` of the peer's completions' distance from this node's policy."""
        with self._lock:
            self._row(peer_id).logprob_measured += n

    def record_groups(self, peer_id: str, kept: list[Group], dropped: Mapping[str, int]) -> None:
        """The groups of the peer's accepted bundle: ``kept`` (re-scored by this node) and
        ``dropped`` (reason -> count)."""
        with self._lock:
            row = self._row(peer_id)
            row.groups += len(kept)
            row.groups_with_signal += sum(g.has_signal() for g in kept)
            row.reward_sum += sum(_mean(g) for g in kept)
            row.groups_dropped.update(dropped)

    def usefulness_json(self, limit: int = PEERS_PERSISTED) -> list[dict]:
        """What the ``limit`` most recently seen peers that sent groups were worth here, with when
        they were seen, for :meth:`restore_usefulness` (the checkpoint keeps it)."""
        with self._lock:
            rows = [r for r in reversed(self._rows.values()) if r.groups or r.groups_dropped][:limit]
            return [{"peer_id": r.peer_id, "first_seen": r.first_seen, "last_seen": r.last_seen, "groups": r.groups,
                     "groups_with_signal": r.groups_with_signal, "reward_sum": r.reward_sum,
                     "groups_dropped": dict(r.groups_dropped)} for r in reversed(rows)]

    def restore_usefulness(self, state: list) -> None:
        """Take the rows of :meth:`usefulness_json` (a resumed node's); ValueError, and nothing
        changed, when ``state`` is not of that form."""
        try:
            rows = [_PeerRow(str(s["peer_id"]), name_from_peer_id(str(s["peer_id"])), float(s["first_seen"]),
                             float(s["last_seen"]), groups=int(s["groups"]),
                             groups_with_signal=int(s["groups_with_signal"]), reward_sum=float(s["reward_sum"]),
                             groups_dropped=Counter({str(k): int(n) for k, n in s["groups_dropped"].items()}))
                    for s in state[-self.max_peers:]]
        except (TypeError, ValueError, KeyError, AttributeError):
            raise ValueError("peer usefulness is not [{'peer_id', 'first_seen', 'last_seen', 'groups', "
                             "'groups_with_signal', 'reward_sum', 'groups_dropped'}, ...]") from None
        with self._lock:
            for row in reversed(rows):  # oldest ends first
                self._rows[row.peer_id] = row
                self._rows.move_to_end(row.peer_id, last=False)  # seen before any peer of this run
            while len(self._rows) > self.max_peers:
                self._rows.popitem(last=False)

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
                     "last_round": r.last_round, "reported_mean_reward": r.reported_mean_reward,
                     "model": r.model, "left_out_by_reason": dict(r.left_out_by_reason),
                     "logprob_measured": r.logprob_measured, **r.usefulness()}
                    for r in reversed(self._rows.values())]
