"""The SAPO round (Algorithm 1 of the paper) and what makes it durable.

:meth:`Node.run_round` is the whole round, :meth:`Node.rollout` (steps 1-3 of the paper's
Algorithm 1) then :meth:`Node.update` (steps 4-6), on one screen; :meth:`Node.finish_round`
writes its metrics line and checkpoint; :meth:`Node.resume` puts a restarted node back where it
was. Everything here runs in the daemon's worker thread, never on the event loop.

The round reports itself as events through its ``NodeState``: RoundStarted, a PhaseChanged at
each of :data:`ROUND_PHASES`, RoundFinished and LevelsNow once saved. What follows the round
listens to them, registered by whoever builds it: the thread policy
(:mod:`swarmnode.node.roundthreads`) and the yardstick's schedule (:mod:`swarmnode.node.yardsticks`).
"""

from __future__ import annotations

import hashlib
import logging
import random
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from swarmnode.config import NodeConfig
from swarmnode.events import LevelsNow, PhaseChanged, RoundFinished, RoundStarted
from swarmnode.node.budget import RoundBudget
from swarmnode.node.checkpoint import latest_checkpoint, restore, save_checkpoint
from swarmnode.node.metrics import MetricsLog
from swarmnode.node.state import NodeState
from swarmnode.paths import NodeHome
from swarmnode.records import Group, Question, RoundRecord
from swarmnode.swarm.link import SwarmLink
from swarmnode.train.curriculum import DORMANT_WEIGHT, Levels
from swarmnode.train.policy import Generation, Policy
from swarmnode.train.tasks import Scorer, TaskSource, full_response

log = logging.getLogger(__name__)

# The phases of a round, in order; a stop request is honoured at each boundary.
ROUND_PHASES = ("generating", "scoring", "sharing", "training")


class RoundAbandoned(Exception):
    """A stop was requested mid-round; the round leaves no trace and runs again on restart."""


def derive_seed(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


def select_training_set(local: list[Group], external: list[Group], n_local: int, n_external: int,
                        rng: random.Random) -> tuple[list[Group], int]:
    """I local groups plus the J external ones, zero-advantage groups dropped.

    External groups arrive already filtered; local ones without signal are dropped here
    and counted. When the pool is short, the free external slots go to local groups.
    Returns (training set, number of local groups dropped for zero advantage).
    """
    useful = [g for g in local if g.has_signal()]
    dropped = len(local) - len(useful)
    rng.shuffle(useful)
    external = external[:n_external]
    n_from_local = n_local + (n_external - len(external))
    return useful[:n_from_local] + external, dropped


def signal_rates(local: list[Group], external: list[Group]) -> dict[str, float | None]:
    """Share of the round's groups with non-zero advantage: all of them, local, external.

    External groups are drawn only among those with signal after this node re-scored them,
    so the external share is 1.0 whenever any were drawn (None when none were); the overall
    rate counts them beside the local ones. "Is my node learning?" at a glance.
    """
    with_signal = sum(g.has_signal() for g in local)
    ext_signal = sum(g.has_signal() for g in external)
    total = len(local) + len(external)
    return {
        "signal_rate": (with_signal + ext_signal) / total if total else None,
        "signal_rate_local": with_signal / len(local) if local else None,
        "signal_rate_external": ext_signal / len(external) if external else None,
    }


def gain_fields(train: list[Group], received: Mapping[str, tuple[int, float]]) -> dict[str, Any]:
    """The round record's fields of what the swarm gave (:mod:`swarmnode.gain`): the training
    set's groups per family, own and external (all carry signal: ``select_training_set`` and the
    pool keep no other), its external groups per sender, and ``received``, the link's
    ``family -> (groups, reward sum)`` of peers' groups pooled since the previous round."""
    return {"trained_by_family": dict(Counter(g.question.family for g in train if g.is_local)),
            "trained_external_by_family": dict(Counter(g.question.family for g in train if not g.is_local)),
            "drawn_by_peer": dict(Counter(g.source for g in train if not g.is_local)),
            "peer_groups_by_family": {f: n for f, (n, _) in sorted(received.items()) if n},
            "peer_reward_by_family": {f: total / n for f, (n, total) in sorted(received.items()) if n}}


def score_local(questions: list[Question], gen: Generation, scorer: Scorer,
                prefill_answer_tag: bool) -> list[Group]:
    """This node's groups of a round: full responses, the node's own rewards, the sampled ids."""
    local = []
    for q, texts, ids in zip(questions, gen.texts, gen.token_ids):
        responses = [full_response(t, prefill_answer_tag) for t in texts]
        local.append(Group(q, responses, [scorer.score(q, resp) or 0.0 for resp in responses], token_ids=ids))
    return local


@dataclass
class Rollout:
    """Steps 1-3 of a round: this node's scored groups, shared, and what producing them took."""

    round: int
    started_at: float
    groups: list[Group]
    tokens: int
    completions: int
    max_new_tokens: int
    seconds_generate: float
    seconds_score: float
    threads: int  # torch's intra-op threads while decoding
    levels: dict[str, int]  # the family levels its questions were drawn at


class Node:
    def __init__(self, cfg: NodeConfig, home: NodeHome, policy: Policy, tasks: TaskSource, scorer: Scorer,
                 swarm: SwarmLink, state: NodeState, seed: int, levels: Levels | None = None):
        self.cfg, self.home, self.policy, self.tasks, self.scorer = cfg, home, policy, tasks, scorer
        self.swarm, self.state, self.seed = swarm, state, seed
        self.metrics = MetricsLog(home.metrics_file)
        self.next_round = 0
        self.budget = RoundBudget(cfg)
        # Levels of the families (None: every family at its task-file config, no ladder).
        self.levels = levels or Levels(tasks.names, adaptive=False)
        # The levels a finished round leads to, committed by finish_round: an abandoned round
        # must leave the levels as they were.
        self._levels_after: tuple[int, Levels] | None = None

    def _phase(self, phase: str, should_stop: Callable[[], bool]) -> None:
        if should_stop():
            raise RoundAbandoned()
        self.state.emit(PhaseChanged(phase))

    def run_round(self, r: int, should_stop: Callable[[], bool] = lambda: False) -> RoundRecord:
        """One SAPO round. Raises RoundAbandoned on a stop request.

        The experiment harness calls the two halves itself, every node's rollout before any
        node's update, so that each round's training set can draw from every peer's groups.
        """
        return self.update(self.rollout(r, should_stop), should_stop)

    def rollout(self, r: int, should_stop: Callable[[], bool] = lambda: False) -> Rollout:
        cfg, started, t0 = self.cfg, time.time(), time.perf_counter()
        torch.manual_seed(derive_seed(f"{self.seed}:{r}:sample"))
        self.state.emit(RoundStarted(r))
        # 1. Sample a batch of questions from this node's own task stream.
        levels = dict(self.levels.levels)
        questions = self.tasks.sample(r, cfg.questions, levels, self.levels.focus())
        # 2. Generate L completions per question with the local policy.
        self._phase("generating", should_stop)
        n_threads = torch.get_num_threads()  # what decoding runs with (the thread policy listens to the phase)
        completions, max_new_tokens = self.budget.plan()
        gen = self.policy.generate([self.policy.prompt(q.question) for q in questions], completions,
                                   max_new_tokens=max_new_tokens, temperature=cfg.temperature,
                                   should_stop=should_stop)
        t_gen = time.perf_counter()
        # 5 (local part). Score every completion with this node's own verifier.
        self._phase("scoring", should_stop)
        local = score_local(questions, gen, self.scorer, cfg.prefill_answer_tag)
        t_score = time.perf_counter()
        # 3. Share this round's rollouts with the swarm (returns at once).
        self._phase("sharing", should_stop)
        self.swarm.share(r, local)
        return Rollout(r, started, local, gen.tokens, completions, max_new_tokens, t_gen - t0, t_score - t_gen,
                       n_threads, levels)

    def update(self, rollout: Rollout, should_stop: Callable[[], bool] = lambda: False) -> RoundRecord:
        cfg, r, t0 = self.cfg, rollout.round, time.perf_counter()
        rng = random.Random(f"{self.seed}:{r}:train")
        # 4. Training set: I local + J external groups (external ones re-scored on arrival).
        external = self.swarm.draw_external(r, cfg.external, rng)
        train, dropped = select_training_set(rollout.groups, external, cfg.local, cfg.external, rng)
        # 6. One GRPO update.
        self._phase("training", should_stop)
        loss = self.policy.train_step(train)
        self.swarm.judge_training(self.policy.nearness.weighed)
        seconds_train = time.perf_counter() - t0
        self.swarm.trained_on(r, train)

        after = self.levels.copy()
        moves = after.observe((g.question.family, g.rewards) for g in rollout.groups)
        self._levels_after = (r, after)
        by_task: dict[str, list[float]] = defaultdict(list)
        for g in rollout.groups:
            by_task[g.question.family].extend(g.rewards)
        return RoundRecord(
            round=r, started_at=rollout.started_at,
            seconds=round(rollout.seconds_generate + rollout.seconds_score + seconds_train, 3),
            seconds_generate=round(rollout.seconds_generate, 3), seconds_score=round(rollout.seconds_score, 3),
            seconds_train=round(seconds_train, 3),
            reward_mean=statistics.fmean(x for g in rollout.groups for x in g.rewards),
            reward_by_task={k: statistics.fmean(v) for k, v in sorted(by_task.items())},
            n_local=sum(g.is_local for g in train), n_external=sum(not g.is_local for g in train),
            n_dropped_zero_adv=dropped, tokens_generated=rollout.tokens, completions=rollout.completions,
            max_new_tokens=rollout.max_new_tokens, loss=loss, peers=self.swarm.peer_count(), threads=rollout.threads,
            levels=rollout.levels, level_moves=moves, **signal_rates(rollout.groups, external),
            **gain_fields(train, self.swarm.take_received()))

    def finish_round(self, record: RoundRecord) -> None:
        """Persist a finished round: metrics line first, then the checkpoint (see :mod:`swarmnode.node.metrics`)."""
        log.debug("round %d: saving", record.round)
        self.metrics.append(record)
        self.budget.observe(record.seconds, record.tokens_generated, self.cfg.questions * record.completions)
        self.commit_levels(record.round)
        save_checkpoint(self.home.checkpoints, record.round, self.policy,
                        {"seed": self.seed, "model": self.policy.model_name, "levels": self.levels.to_json(),
                         "peers": self.swarm.peer_state()},
                        keep=self.cfg.keep_checkpoints)
        self.next_round = record.round + 1
        self.state.emit(RoundFinished(record))
        self.state.emit(LevelsNow(dict(self.levels.levels), tuple(self.levels.dormant())))

    def commit_levels(self, r: int) -> None:
        """Take the levels finished round ``r`` led to (``update`` only proposes them)."""
        if self._levels_after is not None and self._levels_after[0] == r:
            before = set(self.levels.dormant())
            self.levels.take(self._levels_after[1])
            after = set(self.levels.dormant())
            for family in sorted(after - before):
                log.info("%s: no signal at the end of its ladder (level %d), drawn at %.0f%% of its weight until it"
                         " has some", family, self.levels.level(family), 100 * DORMANT_WEIGHT)
            for family in sorted(before - after):
                log.info("%s: signal again at level %d, drawn at its full weight", family, self.levels.level(family))
        self._levels_after = None

    def resume(self) -> int:
        """Load the newest valid checkpoint, align metrics.jsonl with it; return the next round."""
        ckpt = latest_checkpoint(self.home.checkpoints)
        records = self.metrics.truncate_after(ckpt.round if ckpt else None)
        if ckpt is not None:
            restore(ckpt, self.policy)
            if "levels" in ckpt.state:  # checkpoints from before levels have none: start levels
                self.levels.restore(ckpt.state["levels"])
            self._restore_peers(ckpt.state.get("peers", []))
            log.info("resumed from %s: next round is %d", ckpt.path, ckpt.round + 1)
            self.next_round = ckpt.round + 1
        self.state.restore_rounds(records)
        self.state.emit(LevelsNow(dict(self.levels.levels), tuple(self.levels.dormant())))
        return self.next_round

    def _restore_peers(self, state: list) -> None:
        """What peers' groups were worth here before the restart (display only: a damaged record
        costs it, never the resume)."""
        try:
            self.swarm.restore_peer_state(state)
        except ValueError as exc:
            log.warning("the peer table's groups kept, with signal and dropped start again: %s", exc)
