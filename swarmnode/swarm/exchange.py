"""A node's side of the rollout exchange, without the network.

Outgoing: this round's groups as a signed bundle. Incoming: a peer's bytes are verified
(:class:`~swarmnode.swarm.bundle.BundleVerifier`), every response is re-scored with this node's
own verifier (the sender's rewards are never used for training), and the groups go into the
bounded :class:`~swarmnode.swarm.pool.ExternalPool`, from which the round draws its J external
groups. A group that cannot teach this node is dropped and counted under its sender by reason
(:data:`GROUP_DROP_REASONS`), its bundle still accepted. A bundle whose re-scored groups carry
signal counts towards its sender's record (:class:`~swarmnode.swarm.standing.Standing`): until a
peer has one, it shares the newcomers' minority of the pool and of the draws. The daemon and the
experiment harness both use this class, so what the experiment measures is what a real node does.
"""

from __future__ import annotations

import random
import statistics
import threading
from collections import Counter
from collections.abc import Collection
from typing import Callable, Mapping, Protocol

from swarmnode.config import NodeConfig
from swarmnode.events import BundleAccepted, BundleRefused, NodeEvent
from swarmnode.records import Group, Question
from swarmnode.swarm.bundle import BundleLimits, BundleVerifier, Verdict, encode_bundle
from swarmnode.swarm.guard import PeerGuard
from swarmnode.swarm.identity import Identity
from swarmnode.swarm.pool import ExternalPool, OwnRewards, PeerTable
from swarmnode.swarm.standing import Standing

# Why a peer's group is dropped on arrival: of a family this node does not run, with fewer than
# two responses (it can never have signal), or a response this node's verifier cannot score.
GROUP_DROP_REASONS = ("other_family", "too_few_responses", "unverifiable")


class Rescorer(Protocol):
    """This node's own verifier (the trainer's ``Scorer``): a reward, or None when it cannot verify."""

    def score(self, question: Question, response: str) -> float | None: ...


class EventSink(Protocol):
    """Where the exchange reports bundles accepted and rejected (the node's ``NodeState``)."""

    def emit(self, event: NodeEvent) -> None: ...


class Exchange:
    def __init__(self, identity: Identity, cfg: NodeConfig, scorer: Rescorer, model_name: str, *,
                 state: EventSink | None = None, limits: BundleLimits = BundleLimits(),
                 on_ban: Callable[[str, float], None] | None = None, pool: ExternalPool | None = None,
                 families: Collection[str] | None = None):
        """``on_ban(peer_id, seconds)`` runs once per ban the guard imposes (the daemon passes
        the transport's ``block``, so a banned flooder is dropped before any check). Without
        ``pool``, the exchange keeps a default-sized one that holds newcomers to
        ``cfg.newcomer_share``. ``families``: the task families this node runs (a peer's group
        of another is dropped); None takes any its verifier scores."""
        self.identity = identity
        self.cfg = cfg
        self.scorer = scorer
        self.model_name = model_name
        self.state = state
        self.limits = limits
        self.verifier = BundleVerifier(swarm=cfg.swarm, own_peer_id=identity.peer_id, limits=limits)
        self.standing = Standing(probation_rounds=cfg.probation_rounds)
        if pool is None:
            pool = ExternalPool(standing=self.standing, newcomer_share=cfg.newcomer_share)
        self.pool = pool
        self.peers = PeerTable()
        self.own = OwnRewards()  # this node's own recent rewards: the bar of the above- samplings
        self.guard = PeerGuard(on_ban=None if on_ban is None else lambda peer, seconds, why: on_ban(peer, seconds))
        self.families = None if families is None else frozenset(families)
        # family -> [groups, reward sum] of peers' groups pooled since take_received (receive's thread adds)
        self._received: dict[str, list] = {}
        self._received_lock = threading.Lock()

    def outgoing(self, round_no: int, groups: list[Group]) -> bytes:
        """This node's signed bundle of ``round_no`` (its rewards also go into :attr:`own`)."""
        self.own.note(groups)
        return encode_bundle(self.identity, swarm=self.cfg.swarm, round_no=round_no, model=self.model_name,
                             groups=groups)

    def admit(self, data: bytes) -> str | None:
        """The guard's word on a message before it is queued for :meth:`receive`: None to
        queue it, else why it is dropped unread (``rate_limited``, ``banned``; counted)."""
        bucket, reason = self.guard.admit(data)
        if reason is not None:
            self.peers.record_rejection(bucket, reason)
        return reason

    def reject(self, peer_id: str | None, reason: str) -> None:
        """A message rejected for ``reason``, here or by the transport's own check: counted
        under ``peer_id``, its authenticated sender (None: counted as ``unknown``), and judged."""
        self.guard.judge(peer_id, reason)
        self.peers.record_rejection(peer_id, reason)
        self._emit(BundleRefused(peer_id, reason))

    def receive(self, data: bytes, now: float | None = None) -> Verdict:
        """Verify, re-score and pool a peer's bundle; never raises. Returns the verdict."""
        verdict = self.verifier.check(data, now)
        if not verdict.accepted:
            self.reject(verdict.sender, verdict.reason)
            return verdict
        self.guard.judge(verdict.sender, None)
        bundle = verdict.bundle
        rescored, dropped = self._rescore(bundle.groups, bundle.sender)
        self.peers.record_groups(bundle.sender, rescored, dropped)
        self._note_received(rescored)
        self.standing.note(bundle.sender, useful=any(g.has_signal() for g in rescored))
        self.pool.add(bundle.round, rescored)
        claimed = [x for g in bundle.groups for x in g.rewards]
        self.peers.record_bundle(bundle.sender, round_no=bundle.round,
                                 reported_mean=statistics.fmean(claimed) if claimed else None, model=bundle.model)
        self._emit(BundleAccepted(bundle.sender, bundle.round, len(rescored)))
        return verdict

    def _rescore(self, groups: list[Group], sender: str) -> tuple[list[Group], Counter[str]]:
        """The groups this node can learn from, with its own rewards, and the others counted by reason."""
        kept: list[Group] = []
        dropped: Counter[str] = Counter()
        for g in groups:
            if self.families is not None and g.question.family not in self.families:
                dropped["other_family"] += 1
                continue
            if len(g.responses) < 2:
                dropped["too_few_responses"] += 1
                continue
            rewards = [self.scorer.score(g.question, r) for r in g.responses]
            if any(x is None for x in rewards):
                dropped["unverifiable"] += 1
                continue
            kept.append(Group(g.question, g.responses, rewards, source=sender))
        return kept, dropped

    def _note_received(self, groups: list[Group]) -> None:
        with self._received_lock:
            for g in groups:
                tally = self._received.setdefault(g.question.family, [0, 0.0])
                tally[0] += 1
                tally[1] += statistics.fmean(g.rewards)

    def peer_state(self) -> list[dict]:
        """What peers' groups were worth here, for :meth:`restore_peer_state` (:meth:`PeerTable.usefulness_json`)."""
        return self.peers.usefulness_json()

    def restore_peer_state(self, state: list) -> None:
        """Take :meth:`peer_state`'s rows back (a resumed node); ValueError when they are not of its form."""
        self.peers.restore_usefulness(state)

    def take_received(self) -> dict[str, tuple[int, float]]:
        """``family -> (groups, sum of their mean rewards here)`` of the peers' groups pooled since
        the last call (the round's record of how peers' groups score under this node's verifier)."""
        with self._received_lock:
            received, self._received = self._received, {}
        return {f: (n, total) for f, (n, total) in received.items()}

    def draw(self, round_no: int, n: int, rng: random.Random, levels: Mapping[str, int] | None = None) -> list[Group]:
        """Up to ``n`` external groups for the round's training set (see ExternalPool.sample).
        ``round_no`` is this node's round: it is the clock of peers' probation. ``levels``:
        this node's family levels, for ``level-aware`` sampling."""
        self.standing.advance(round_no)
        mode = self.cfg.external_sampling
        return self.pool.sample(n, rng, exclude=self.identity.peer_id, mode=mode,
                                max_peer_share=self.cfg.max_peer_share, levels=levels,
                                own=self.own.bests() if mode == "above-best" else self.own.means())

    def peer_rows(self) -> list[dict]:
        """The peer table, each row with ``banned_until`` (epoch seconds or None) and
        ``pooled`` (its groups in the pool now) and ``established`` (it has a record here)."""
        pooled = self.pool.stats()["by_peer"]
        return [{**row, "banned_until": self.guard.banned_until(row["peer_id"]),
                 "pooled": pooled.get(row["peer_id"], 0),
                 "established": self.standing.is_established(row["peer_id"])} for row in self.peers.rows()]

    def _emit(self, event: NodeEvent) -> None:
        if self.state is not None:
            self.state.emit(event)
