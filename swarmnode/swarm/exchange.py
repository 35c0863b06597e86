"""A node's side of the rollout exchange, without the network.

Outgoing: this round's groups as a signed bundle. Incoming: a peer's bytes are verified
(:class:`~swarmnode.swarm.bundle.BundleVerifier`), every response is put in the one form this
node trains on and re-scored in it with this node's own verifier (``Scorer.rescore``, the rule
in :mod:`swarmnode.train.answers`; a response that does not fit is left out and counted per
peer by reason; the sender's rewards are never used for training), and the groups go into the
bounded :class:`~swarmnode.swarm.pool.ExternalPool`, from which the round draws its J external
groups. A group that cannot teach this node is dropped and counted under its sender by reason
(:data:`GROUP_DROP_REASONS`), its bundle still accepted. A bundle whose re-scored groups carry
signal counts towards its sender's record (:class:`~swarmnode.swarm.standing.Standing`): until a
peer has one, it shares the newcomers' minority of the pool and of the draws. A bundle with a
response left out for a reason an honest model does not give, or a peer's completion the update
leaves out as too far from this node's policy (:meth:`Exchange.judge_training`), sets the peer's
probation back instead. The daemon and the experiment harness both use this class, so what the
experiment measures is what a real node does.

Receipts (:mod:`swarmnode.swarm.receipt`): after an update, :meth:`Exchange.trained_on` signs one
receipt per author whose groups entered it, and the next outgoing bundle carries them. An
incoming bundle's receipts addressed to this node are verified and handed to the
:class:`~swarmnode.swarm.ledger.Ledger`, when the exchange has one.
"""

from __future__ import annotations

import logging
import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Callable, Mapping, Protocol

from swarmnode.config import NodeConfig
from swarmnode.events import BundleAccepted, BundleRefused, NodeEvent
from swarmnode.records import Group, Question
from swarmnode.sampling import LevelSource, NearSkipping, NearWeighted, sampling_mode
from swarmnode.swarm import receipt
from swarmnode.swarm.bundle import (
    SIGNING_DOMAINS,
    Bundle,
    BundleLimits,
    BundleVerifier,
    Verdict,
    signed_bundle,
)
from swarmnode.swarm.guard import PeerGuard
from swarmnode.swarm.identity import Identity
from swarmnode.swarm.ledger import Ledger
from swarmnode.swarm.nearshare import NearShare
from swarmnode.swarm.pool import ExternalPool, OwnRewards, PeerTable
from swarmnode.swarm.standing import Standing

# Why a peer's group is dropped on arrival: of a family this node does not run, with fewer than
# two responses (it can never have signal), or a response this node's verifier cannot score.
GROUP_DROP_REASONS = ("other_family", "too_few_responses", "unverifiable")

log = logging.getLogger("swarmnode.swarm.exchange")

class Rescorer(Protocol):
    """This node's own verifier (the trainer's ``Scorer``)."""

    # Reasons for leaving a response out that an honest peer's model gives too: the others
    # keep the bundle from counting towards its sender's standing, and set its probation back.
    honest_reasons: frozenset[str]

    def rescore(self, question: Question, response: str) -> tuple[str, float] | str:
        """``(the form of the response this node trains on, its reward)``, or why it is left out."""
        ...


class EventSink(Protocol):
    """Where the exchange reports bundles accepted and rejected (the node's ``NodeState``)."""

    def emit(self, event: NodeEvent) -> None: ...


class Exchange:
    def __init__(self, identity: Identity, cfg: NodeConfig, scorer: Rescorer, model_name: str, *,
                 state: EventSink | None = None, limits: BundleLimits = BundleLimits(),
                 on_ban: Callable[[str, float], None] | None = None, pool: ExternalPool | None = None,
                 credits_dir: Path | None = None, families: Collection[str] | None = None,
                 levels: LevelSource | None = None):
        """``on_ban(peer_id, seconds)`` runs once per ban the guard imposes (the daemon passes
        the transport's ``block``, so a banned flooder is dropped before any check). Without
        ``pool``, the exchange keeps a default-sized one that holds newcomers to
        ``cfg.newcomer_share``. ``credits_dir`` holds the node's receipt ledger (without it,
        receipts addressed to this node are ignored; the node still sends its own).
        ``families``: the task families this node runs (a peer's group of another is dropped);
        None takes any its verifier scores. ``levels``: this node's family levels as they move
        (its ``Levels``), which ``level-aware`` sampling reads."""
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
        # the shares of peers' completions the updates kept, per family, and the pairs skipped
        self.near = NearShare(skip_rounds=cfg.skip_far_peer_rounds)
        self.sampling = sampling_mode(cfg.external_sampling, levels, self.own)
        if cfg.weigh_draw_by_nearness:
            self.sampling = NearWeighted(self.sampling, self.near)
        if cfg.skip_far_peer_rounds:
            self.sampling = NearSkipping(self.sampling, self.near)
        self.guard = PeerGuard(on_ban=None if on_ban is None else lambda peer, seconds, why: on_ban(peer, seconds))
        self._warned_newer = False
        self.ledger = None if credits_dir is None else Ledger(credits_dir, self.standing.is_established)
        self.receipt_limits = receipt.ReceiptLimits()
        self._receipts: list[dict] = []  # the signed receipts of this node's latest update
        self.families = None if families is None else frozenset(families)
        # family -> [groups, reward sum] of peers' groups pooled since take_received (receive's thread adds)
        self._received: dict[str, list] = {}
        self._received_lock = threading.Lock()

    def outgoing(self, round_no: int, groups: list[Group]) -> bytes:
        """This node's signed bundle of ``round_no`` (its rewards also go into :attr:`own`),
        carrying the receipts of its latest update; the ledger remembers the bundle."""
        self.own.note(groups)
        data, digest = signed_bundle(self.identity, swarm=self.cfg.swarm, round_no=round_no, model=self.model_name,
                                     groups=groups)
        if self.ledger is not None:
            self.ledger.note_shared(round_no, digest, [receipt.group_key(g) for g in groups])
        receipts, self._receipts = self._receipts, []
        return receipt.attach(data, receipts, self.receipt_limits, self.limits.max_bytes) if receipts else data

    def trained_on(self, round_no: int, groups: list[Group]) -> None:
        """This node's round ``round_no`` trained on ``groups``: sign a receipt for each author
        of the external ones, for the next outgoing bundle to carry."""
        self._receipts = receipt.make_receipts(self.identity, swarm=self.cfg.swarm, round_no=round_no,
                                               groups=groups, created=time.time())

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
        if reason == "bad_version" and not self._warned_newer:  # once: every bundle of such a peer is one
            self._warned_newer = True
            log.warning("a peer sends bundles of a format this swarmnode cannot read (it reads versions %s; "
                        "each is counted as bad_version): it runs a newer release; upgrade swarmnode to use its "
                        "bundles", " and ".join(map(str, sorted(SIGNING_DOMAINS))))

    def receive(self, data: bytes, now: float | None = None) -> Verdict:
        """Verify, re-score and pool a peer's bundle; never raises. Returns the verdict."""
        data, section = receipt.split(data)
        verdict = self.verifier.check(data, now)
        if not verdict.accepted:
            self.reject(verdict.sender, verdict.reason or "malformed")
            return verdict
        self.guard.judge(verdict.sender, None)
        bundle = verdict.bundle
        assert bundle is not None, "an accepted verdict carries its bundle"
        rescored, left_out, dropped = self._rescore(bundle)
        self.peers.record_left_out(bundle.sender, left_out)
        self.peers.record_groups(bundle.sender, rescored, dropped)
        self._note_received(rescored)
        if left_out.keys() - self.scorer.honest_reasons:
            self.standing.set_back(bundle.sender)
        else:
            self.standing.note(bundle.sender, useful=any(g.has_signal() for g in rescored))
        self.pool.add(bundle.round, rescored)
        claimed = [x for g in bundle.groups for x in g.rewards]
        self.peers.record_bundle(bundle.sender, round_no=bundle.round,
                                 reported_mean=statistics.fmean(claimed) if claimed else None, model=bundle.model)
        self._emit(BundleAccepted(bundle.sender, bundle.round, len(rescored)))
        if section is not None and self.ledger is not None:
            self._take_receipts(bundle, section, time.time() if now is None else now)
        return verdict

    def _rescore(self, bundle: Bundle) -> tuple[list[Group], Counter[str], Counter[str]]:
        """The groups this node can learn from, each with only its responses in the form this node
        trains on and its own rewards of them; the responses left out, by reason; the groups
        dropped, by reason (:data:`GROUP_DROP_REASONS`)."""
        rescored: list[Group] = []
        left_out: Counter[str] = Counter()
        dropped: Counter[str] = Counter()
        for g in bundle.groups:
            if self.families is not None and g.question.family not in self.families:
                dropped["other_family"] += 1
                continue
            if len(g.responses) < 2:  # it can never have signal
                dropped["too_few_responses"] += 1
                continue
            kept: list[tuple[str, float]] = []
            unverifiable = False
            for response in g.responses:
                got = self.scorer.rescore(g.question, response)
                if isinstance(got, str):
                    left_out[got] += 1
                    unverifiable |= got == "unverifiable"
                else:
                    kept.append(got)
            if not kept:  # every response left out (counted by reason above)
                if unverifiable:
                    dropped["unverifiable"] += 1
                continue
            rescored.append(Group(g.question, [r for r, _ in kept], [x for _, x in kept], source=bundle.sender,
                                  origin=(bundle.round, bundle.digest)))
        return rescored, left_out, dropped

    def judge_training(self, weighed: Mapping[tuple[str, str], tuple[int, int]]) -> None:
        """The update weighed ``n`` of a peer's completions of a family against the bound on their
        distance from this node's policy and left ``far`` of them out, ``weighed[peer, family] =
        (n, far)`` (:meth:`swarmnode.train.policy.Policy.train_step`): counted per peer, a peer
        with one left out has its probation set back, and :attr:`near` remembers the shares kept."""
        measured: Counter[str] = Counter()
        far: Counter[str] = Counter()
        for (peer, _), (n, n_far) in weighed.items():
            measured[peer] += n
            far[peer] += n_far
        for peer, n in measured.items():
            self.peers.record_measured(peer, n)
        for peer, n in far.items():
            if n:
                self.peers.record_left_out(peer, Counter(far_from_policy=n))
                self.standing.set_back(peer)
        self.near.note(weighed)

    def _take_receipts(self, bundle: Bundle, section: bytes, now: float) -> None:
        """Verify the receipts of an accepted bundle addressed to this node and offer them to
        the ledger; every refusal counted there by reason, none raised."""
        assert self.ledger is not None
        try:
            entries = receipt.open_section(section, self.receipt_limits)
        except receipt.ReceiptRejected as exc:
            self.ledger.refuse(exc.reason)
            return
        for entry in entries:
            payload = entry.get("payload") if isinstance(entry, dict) else None
            if isinstance(payload, dict) and payload.get("author") != self.identity.peer_id:
                continue  # another author's receipt: theirs to check
            try:
                self.ledger.offer(receipt.verify(entry, sender=bundle.sender, swarm=self.cfg.swarm, now=now,
                                                 limits=self.receipt_limits), now)
            except receipt.ReceiptRejected as exc:
                self.ledger.refuse(exc.reason)

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

    def draw(self, round_no: int, n: int, rng: random.Random) -> list[Group]:
        """Up to ``n`` external groups for the round's training set, drawn by this node's
        sampling mode (see ExternalPool.sample). ``round_no`` is this node's round: it is the
        clock of peers' probation."""
        self.standing.advance(round_no)
        if self.ledger is not None:
            self.ledger.promote()
        return self.pool.sample(n, rng, exclude=self.identity.peer_id, mode=self.sampling,
                                max_peer_share=self.cfg.max_peer_share, consume=not self.cfg.reuse_peer_groups)

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
