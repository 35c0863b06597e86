"""The controlled experiment of the SAPO paper on one machine: ``swarmnode experiment``.

N nodes train side by side in one process, for each local/external config (I/J) at once. Every
node is the daemon's own :class:`~swarmnode.node.round.Node`: the same round, the same receive
path (:class:`~swarmnode.swarm.exchange.Exchange`: verify, re-score with its own verifier, pool)
and the same draw (per-peer share included), with its own LoRA adapter and optimizer on ONE
shared copy of its base model, so an extra node costs about one adapter of memory. The nodes
of a config may run different base models (``--nodes smollm2-135m:3,qwen2.5-coder-0.5b:1``):
each model is loaded once, node k is on the same model in every config, and the outputs keep
each model's nodes apart. The nodes of a config reach each other through
:class:`~swarmnode.experiment.members.InProcessLink` instead of a transport. A round, in lockstep per config:

1. every node runs its rollout (questions, completions, its own rewards) and shares its
   groups: each other node of the config takes the bundle in; configs with J = 0 share nothing;
2. then every node runs its update: J groups drawn from its pool, I of its own, one GRPO step.

Node k draws the same questions and sampling seeds in every config, so configs whose adapters
are still equal (round 0) sample the very same completions and differ only through sharing.
Checkpoints (one per node) make a killed run resume where it stopped; rounds after the last
checkpoint are redone and their CSV rows replaced. A checkpoint holds a node's adapter,
optimizer, levels and exchange (its pool, its peers' standing, its own recent rewards), so a
resumed run computes what an uninterrupted one does. Seeds take turns of ``checkpoint_every``
rounds, each turn resuming its seed from its checkpoint, so all seeds progress together.
Outputs (:mod:`.tables`, :mod:`.report`): ``rounds.csv`` (a row per node and round),
``external.csv`` (a row per external group a node trained on: whose, its rewards as the
receiver scored them), ``groups.csv`` (a row per group of a node's own rollout: its family,
rewards and signal, whether it trained on it; both group tables with the node's log-prob of
what it trained on), ``yardstick.csv`` (every node's greedy yardstick after every ``eval_every`` rounds, and each
untrained model's once), ``summary.md`` and ``rewards.png``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from swarmnode.config import NodeConfig
from swarmnode.experiment.members import InProcessLink, Member, exchange_state, restore_exchange
from swarmnode.experiment.report import peak_rss_mb, write_reports
from swarmnode.experiment.settings import Arm, ExperimentError, Settings
from swarmnode.experiment.tables import TABLES, append_rows, external_rows, own_rows, read_rows, truncate_rows
from swarmnode.node.checkpoint import Checkpoint, list_checkpoints, restore, save_checkpoint
from swarmnode.node.modelchoice import prepare
from swarmnode.node.round import Node, derive_seed
from swarmnode.node.state import NodeState
from swarmnode.paths import NodeHome
from swarmnode.records import Question
from swarmnode.swarm.exchange import Exchange
from swarmnode.swarm.identity import Identity
from swarmnode.train.answers import TokenBudget
from swarmnode.train.curriculum import LevelError, Levels
from swarmnode.train.model import BaseModel, ModelError, load_base_model, pick_device, pick_dtype
from swarmnode.train.policy import Policy
from swarmnode.train.tasks import Scorer, TaskConfigError, TaskSource, load_task_file
from swarmnode.train.yardstick import SEED as YARDSTICK_SEED
from swarmnode.train.yardstick import score_yardstick, yardstick_questions

log = logging.getLogger(__name__)
# Held-out questions per family when levels are pinned (see held_out_questions).
PINNED_PER_FAMILY = 6


def load_families(settings: Settings) -> dict:
    try:
        families = load_task_file(settings.node.tasks)
    except TaskConfigError as exc:
        raise ExperimentError(f"tasks: {exc}") from None
    if settings.families:
        wanted = [t.strip() for t in settings.families.split(",") if t.strip()]
        unknown = [t for t in wanted if t not in families]
        if unknown:
            raise ExperimentError(f"--families: {', '.join(unknown)} not in the task file (it has "
                                  f"{', '.join(families)}; give another with --tasks)")
        families = {t: families[t] for t in wanted}
    return families


def held_out_questions(families: dict, adaptive: bool) -> list[Question]:
    """The yardstick the experiment scores nodes on: the node's own (the lowest levels of each
    family's ladder) when levels move, else :data:`PINNED_PER_FAMILY` questions per family at
    the task file's config as written, the difficulty the nodes train at, from generators
    seeded like the yardstick's, which no node's training stream uses."""
    if adaptive:
        return yardstick_questions(families)
    return pinned_questions(TaskSource(families, YARDSTICK_SEED), PINNED_PER_FAMILY)


def pinned_questions(source: TaskSource, per_family: int) -> list[Question]:
    """The first ``per_family`` questions of each of ``source``'s families at the task file's
    config as written (no level), in the task file's order."""
    return [Question(family, str(e["question"]), str(e["answer"]), dict(e.get("metadata", {})))
            for family in source.names for e in (source.dataset(family, None)[i] for i in range(per_family))]


class Experiment:
    """Runs (or resumes) one experiment into ``settings.out``; see the module docstring."""

    def __init__(self, settings: Settings, *, scorer_factory: Callable[[dict], Scorer] = Scorer,
                 progress: bool = True):
        self.s = settings
        self.out = Path(settings.out)
        self.arms = settings.arms
        self.scorer_factory = scorer_factory
        self.progress = progress
        self.members: list[Member] = []
        self.bases: dict[str, BaseModel] = {}  # by the cohort's model spec: each loaded once
        self._anchors: dict[str, Policy] = {}  # a live policy per base model: new adapters join its model

    # ---- set-up ------------------------------------------------------------------------
    def _check_out_dir(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        meta = self.out / "experiment.json"
        mine = self.s.fingerprint()
        if meta.exists():
            theirs = json.loads(meta.read_text()).get("settings", {})
            differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
            if differ:
                raise ExperimentError(f"{self.out} holds a run with other settings ({', '.join(differ)}); "
                                      "resume it with the same settings or choose another --out")
        meta.write_text(json.dumps({"settings": mine}, indent=2, sort_keys=True) + "\n")

    def _load(self) -> None:
        import torch

        self.families = load_families(self.s)
        device = pick_device(self.s.node.device)
        for cohort in self.s.cohorts:
            try:
                # Fetched, checked and its license shown as `swarmnode start` does (model_file too).
                prepare(dataclasses.replace(self.s.node, model=cohort.model))
                self.bases[cohort.model] = base = load_base_model(cohort.model, device,
                                                                  pick_dtype(device, self.s.node.dtype))
            except ModelError as exc:
                raise ExperimentError(str(exc)) from None
            log.info("model %s on %s; %d nodes x %d configs share it", base.name, device, cohort.count,
                     len(self.arms))
        torch.manual_seed(0)

    def _levels(self, cfg: NodeConfig) -> Levels:
        try:
            return Levels.configured(self.families, cfg.levels, adaptive=cfg.adaptive_difficulty)
        except LevelError as exc:
            raise ExperimentError(f"levels: {exc}") from None

    def _build_members(self, seed: int) -> None:
        """Fresh nodes for ``seed``; node k starts from the same weights, on the same model, in every config."""
        import torch

        old = [(m.node.policy.model, m.node.policy.adapter) for m in self.members]
        members = []
        for arm in self.arms:
            exchanges: list[Exchange] = []
            for k in range(self.s.node_count):
                cohort = self.s.cohort_of(k)
                cfg = dataclasses.replace(arm.node_config(self.s.node), model=cohort.model)
                base = self.bases[cohort.model]
                torch.manual_seed(derive_seed(f"init:{seed}:{k}"))
                policy = Policy(base, cfg, adapter=f"s{seed}-{arm.slug}-n{k}", shared=self._anchors.get(cohort.model))
                self._anchors.setdefault(cohort.model, policy)
                identity = Identity.from_seed(hashlib.sha256(f"swarmnode-experiment:{k}".encode()).digest())
                scorer = self.scorer_factory(self.families)
                # The harness receives on the thread that samples: the check reads the model's own tokenizer.
                scorer.budget = TokenBudget(base.tokenizer, cfg.max_new_tokens, cfg.prefill_answer_tag)
                levels = self._levels(cfg)
                exchange = Exchange(identity, cfg, scorer, base.name, families=self.families, levels=levels)
                exchanges.append(exchange)
                link = InProcessLink(exchange, exchanges, sharing=arm.external > 0)
                node = Node(cfg, self._node_home(seed, arm, k), policy,
                            TaskSource(self.families, derive_seed(f"tasks:{k}")), scorer, link, NodeState(),
                            seed=derive_seed(f"node:{seed}:{k}"), levels=levels)
                members.append(Member(arm, k, cohort, node, link, dict(node.levels.levels)))
        self.members = members
        for model in self.bases:  # each base's active adapter a new one, so deleting the old ones is safe
            self._anchors[model] = next(m.node.policy for m in members if m.cohort.model == model)
            self._anchors[model].activate()
        for model, name in old:
            model.delete_adapter(name)

    # ---- checkpoints and the CSV -----------------------------------------------------------
    def _node_home(self, seed: int, arm: Arm, k: int) -> NodeHome:
        """Node k of ``arm`` in ``seed``: its checkpoints are under this home's ``checkpoints/``."""
        return NodeHome(self.out / "nodes" / f"seed-{seed}" / arm.slug / f"node-{k}")

    def _completed_round(self, seed: int) -> int:
        """The last round whose checkpoint every node of every config has, or -1."""
        common: set[int] | None = None
        for arm in self.arms:
            for k in range(self.s.node_count):
                rounds = {r for r, _ in list_checkpoints(self._node_home(seed, arm, k).checkpoints)}
                common = rounds if common is None else common & rounds
        return max(common) if common else -1

    def _restore(self, seed: int, round_no: int) -> bool:
        old_exchange = False
        try:
            for m in self.members:
                path = m.node.home.checkpoints / f"round-{round_no:06d}"
                state = json.loads((path / "state.json").read_text())
                restore(Checkpoint(round_no, path, state), m.node.policy)
                if "levels" in state:  # checkpoints from before the experiment kept levels have none
                    m.node.levels.restore(state["levels"])
                if "exchange" in state:
                    restore_exchange(m.exchange, state["exchange"])
                else:
                    old_exchange = True
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            log.warning("checkpoint of seed %d round %d unusable (%s): the seed starts again", seed, round_no, exc)
            return False
        if old_exchange:
            log.warning("checkpoint of seed %d round %d holds no exchange state: its nodes go on with empty pools "
                        "and their peers as newcomers", seed, round_no)
        return True

    def _save(self, seed: int, round_no: int) -> None:
        for m in self.members:
            save_checkpoint(m.node.home.checkpoints, round_no, m.node.policy,
                            {"seed": seed, "config": m.arm.label, "node": m.index, "levels": m.node.levels.to_json(),
                             "exchange": exchange_state(m.exchange)},
                            keep=2)

    @property
    def csv_path(self) -> Path:
        return self.out / "rounds.csv"

    # ---- the yardstick ---------------------------------------------------------------------
    def _yardstick_rows(self, members: list[Member], config: str, seed: int | str, trained: int) -> list[dict]:
        """Every member's greedy yardstick score now, after ``trained`` rounds."""
        questions = held_out_questions(self.families, self.s.node.adaptive_difficulty)
        rows = []
        for m in members:
            score = score_yardstick(m.node.policy, m.node.scorer, questions)
            rows.append({"config": config, "seed": seed, "node": m.index, "model": m.model, "round": trained,
                         "score": round(score["score"], 6), "seconds": score["seconds"],
                         "by_family": json.dumps({k: round(v, 4) for k, v in score["by_family"].items()})})
        return rows

    def _score_untrained(self) -> None:
        """Each model's untrained yardstick, once per run: a fresh adapter changes nothing (LoRA's B
        starts at zero), so the first fresh node of each model stands for all of them."""
        done = {r["model"] for r in read_rows(self.out / "yardstick.csv") if r["config"] == "base"}
        fresh = {m.model: m for m in reversed(self.members)}
        todo = [m for model, m in fresh.items() if model not in done]
        if self.s.node.eval_every and todo:
            append_rows(self.out, "yardstick.csv", self._yardstick_rows(todo, "base", "", 0))

    # ---- one round -------------------------------------------------------------------------
    def run_round(self, seed: int, r: int, on_config: Callable[[Arm], None] = lambda arm: None) -> list[dict]:
        """One lockstep round of every node of every config; returns the CSV rows."""
        rows = []
        for arm in self.arms:
            members = [m for m in self.members if m.arm == arm]
            senders = {m.identity.peer_id: (m.index, m.model) for m in members}
            rollouts = [m.node.rollout(r) for m in members]
            for m, rollout in zip(members, rollouts):
                record = m.node.update(rollout)
                m.node.commit_levels(r)
                where = {"config": arm.label, "seed": seed, "node": m.index, "model": m.model, "round": r}
                trained = m.node.policy.last_logprobs
                append_rows(self.out, "external.csv", external_rows(where, m.link.drawn, trained, senders))
                append_rows(self.out, "groups.csv", own_rows(where, rollout.groups, trained))
                rows.append({
                    **where, "reward_mean": round(record.reward_mean, 6), "n_external": record.n_external,
                    "seconds": record.seconds, "n_local": record.n_local,
                    "n_dropped_zero_adv": record.n_dropped_zero_adv,
                    "n_solved": sum(min(g.rewards) >= 1.0 for g in rollout.groups),
                    "signal_rate": "" if record.signal_rate is None else round(record.signal_rate, 4),
                    "loss": "" if record.loss is None else round(record.loss, 6),
                    "bundles_rejected": sum(peer["rejected"] for peer in m.exchange.peers.rows()),
                    "levels_up": sum(lv > m.start_levels[f] for f, lv in m.node.levels.levels.items()),
                })
            on_config(arm)
        return rows

    def _turn(self, seed: int, first: int, deadline: float | None, bar) -> tuple[int, bool]:
        """A turn of ``seed``: rounds from ``first`` to its next checkpoint (or the deadline), which
        it saves. Returns the last round run and whether the deadline passed."""
        s = self.s
        r = first
        while True:
            def step(arm: Arm, r: int = r) -> None:
                bar.set_postfix_str(f"config {arm.label} seed {seed} round {r}")
                bar.update(1)
            append_rows(self.out, "rounds.csv", self.run_round(seed, r, step))
            every = s.node.eval_every
            if every and (r + 1) % every == 0:
                for arm in self.arms:
                    append_rows(self.out, "yardstick.csv", self._yardstick_rows(
                        [m for m in self.members if m.arm == arm], arm.label, seed, r + 1))
            out_of_time = deadline is not None and time.time() >= deadline
            if (r + 1) % s.checkpoint_every == 0 or r == s.rounds - 1 or out_of_time:
                self._save(seed, r)
                return r, out_of_time
            r += 1

    def report(self) -> Path:
        """Write summary.md and rewards.png from the run's tables as they stand (a run stopped or
        still going), running nothing; returns the summary path."""
        meta = self.out / "experiment.json"
        if not (self.out / "rounds.csv").exists() or not meta.exists():
            raise ExperimentError(f"{self.out} holds no experiment's tables: nothing to report")
        self._check_out_dir()
        return write_reports(self.out, self.s)

    # ---- the whole run -----------------------------------------------------------------------
    def run(self) -> Path:
        """Run or resume every seed, then write summary.md and rewards.png; returns the summary path.

        Seeds take turns of ``checkpoint_every`` rounds, the one furthest behind first, each turn
        resuming its seed from its checkpoint (exact: see :func:`exchange_state`), so every seed has
        rows early and a stopped run leaves them about equally far."""
        from tqdm import tqdm

        self._check_out_dir()
        if not all((self.out / name).exists() for name in TABLES):
            truncate_rows(self.out, -1, 0)
        s = self.s
        done_rows = {(int(r["seed"]), int(r["round"])) for r in read_rows(self.csv_path)}
        total = s.seeds * s.rounds * len(self.arms)
        start = sum(len(self.arms) for (sd, rd) in done_rows if sd in s.seed_numbers and rd < s.rounds)
        t_start = time.time()
        deadline = None if s.time_limit_minutes is None else t_start + 60 * s.time_limit_minutes
        rounds_run = 0
        started: set[int] = set()  # the seeds that ran in this invocation
        with tqdm(total=total, initial=min(start, total), disable=not self.progress, unit="config-round",
                  dynamic_ncols=True) as bar:
            completed = {seed: self._completed_round(seed) for seed in s.seed_numbers}
            current: int | None = None  # the seed whose nodes are built now
            while deadline is None or time.time() < deadline:
                # The seed furthest behind takes the next turn, so seeds progress together.
                behind = [seed for seed in s.seed_numbers if completed[seed] + 1 < s.rounds]
                if not behind:
                    break
                seed = min(behind, key=lambda sd: (completed[sd], sd))
                if not self.bases:
                    self._load()
                if current != seed:
                    self._build_members(seed)
                    self._score_untrained()
                    if completed[seed] >= 0 and not self._restore(seed, completed[seed]):
                        self._build_members(seed)
                        completed[seed] = -1
                        started.discard(seed)  # its rows are all redone
                    current = seed
                first = completed[seed] + 1
                if seed not in started:  # rows past its checkpoint are redone
                    started.add(seed)
                    redone = sum(1 for (sd, rd) in done_rows if sd == seed and first <= rd < s.rounds)
                    bar.update(-min(redone * len(self.arms), bar.n))
                    truncate_rows(self.out, seed, first)
                completed[seed], out_of_time = self._turn(seed, first, deadline, bar)
                rounds_run += completed[seed] + 1 - first
                if out_of_time:
                    log.warning("time limit reached after round %d of seed %d; rerun to continue",
                                completed[seed], seed)
        info = {"peak_rss_mb": peak_rss_mb(), "wall_seconds": round(time.time() - t_start, 1),
                "rounds_run": rounds_run, "adapters": len(self.members),
                "model": ", ".join(b.name for b in self.bases.values()) or None, "device": s.node.device}
        if any(str(b.device).startswith("cuda") for b in self.bases.values()):
            import torch

            info["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        with open(self.out / "runs.jsonl", "a") as fh:
            fh.write(json.dumps({"finished_at": time.time(), **info}) + "\n")
        return write_reports(self.out, s)
