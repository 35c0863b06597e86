"""The controlled experiment of the SAPO paper on one machine: ``swarmnode experiment``.

N nodes train side by side in one process, for each local/external config (I/J) at once.
Every node of every config is one LoRA adapter (with its own optimizer) on ONE shared copy of
the base model, so an extra node costs about one adapter of memory. A round, in lockstep:

1. each node draws its questions; node k's stream depends only on (seed, k), so every config
   sees the same questions and configs differ only in I/J;
2. every node samples its completions: all nodes of a config in one mixed-adapter batch
   (``--generation batched``) or one node after another (``per-node``), with sampling seeds
   that do not depend on the config;
3. each node scores its groups with its own verifier; in configs with J > 0 it signs them
   into a bundle that every other node of that config takes in through the daemon's own
   receive path (:class:`~swarmnode.swarm.exchange.Exchange`: verify, re-score with its own
   :class:`Scorer`, keep in its :class:`ExternalPool`);
4. each node builds its training set (I own groups + J groups drawn from this round's pool,
   never its own) and takes one GRPO step.

Checkpoints (the daemon's, one per node) make a killed run resume where it stopped; rounds
after the last checkpoint are redone, deterministically up to floating point noise, and
their CSV rows replaced. Outputs: ``rounds.csv``, ``summary.md`` and ``rewards.png``.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import logging
import math
import os
import random
import resource
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

log = logging.getLogger("swarmnode.experiment.runner")

CSV_FIELDS = ["config", "seed", "node", "round", "reward_mean", "n_external", "seconds", "n_local",
              "n_dropped_zero_adv", "loss", "bundles_rejected"]
SAMPLING_SUFFIX = {"": "uniform", "rw": "reward-weighted"}
# Settings that may change when a run is resumed: they do not change what a round computes.
_RESUMABLE_CHANGES = ("rounds", "seeds", "device", "checkpoint_every", "out", "time_limit_minutes")
# Two-sided 95 % Student t quantiles by degrees of freedom; past 30 the normal one is close enough.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


class ExperimentError(Exception):
    """The experiment cannot run as asked; ``str()`` is one line for the user."""


@dataclass(frozen=True)
class Arm:
    """One local/external config of the experiment: I own groups and J external ones a round."""

    local: int
    external: int
    sampling: str = "uniform"

    @property
    def label(self) -> str:
        return f"{self.local}/{self.external}" + ("" if self.sampling == "uniform" else ":rw")

    @property
    def slug(self) -> str:
        return self.label.replace("/", "-").replace(":", "-")

    @classmethod
    def parse(cls, text: str) -> "Arm":
        """``"4/4"`` (uniform external sampling) or ``"4/4:rw"`` (reward-weighted)."""
        body, _, suffix = text.strip().partition(":")
        try:
            local, external = (int(x) for x in body.split("/"))
        except ValueError:
            raise ExperimentError(f"config '{text}' is not I/J (e.g. 4/4 or 4/4:rw)") from None
        if suffix not in SAMPLING_SUFFIX:
            raise ExperimentError(f"config '{text}': unknown suffix ':{suffix}' (only ':rw', reward-weighted)")
        if local < 0 or external < 0 or local + external == 0:
            raise ExperimentError(f"config '{text}': I and J must be >= 0 and not both 0")
        return cls(local, external, SAMPLING_SUFFIX[suffix])


def parse_arms(text: str) -> list[Arm]:
    arms = [Arm.parse(t) for t in text.split(",") if t.strip()]
    if not arms:
        raise ExperimentError("--configs lists no config")
    if len({a.label for a in arms}) != len(arms):
        raise ExperimentError(f"--configs lists a config twice: {text}")
    return arms


@dataclass
class Settings:
    """Everything that defines a run. Fields in :data:`_RESUMABLE_CHANGES` may differ on resume."""

    profile: str
    nodes: int
    configs: str
    rounds: int
    seeds: int
    questions: int
    completions: int
    max_new_tokens: int
    model: str
    device: str
    task_file: str | None
    tasks: str | None
    learning_rate: float
    micro_batch: int
    temperature: float
    generation: str
    checkpoint_every: int
    out: str
    time_limit_minutes: float | None = None

    @property
    def arms(self) -> list[Arm]:
        return parse_arms(self.configs)

    def fingerprint(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in _RESUMABLE_CHANGES}


PROFILES: dict[str, dict] = {
    # The four configs in about 45 minutes on two CPU cores with the embedded model: measured
    # 91 s a round for 16 nodes x 32 sequences with one torch thread while the other core was
    # busy (docs/experiments/README.md says what was run end to end).
    "laptop": dict(nodes=4, configs="8/0,6/2,4/4,2/6", rounds=30, seeds=1, questions=8, completions=4,
                   max_new_tokens=8, model="embedded", task_file="laptop", learning_rate=2e-4,
                   micro_batch=32, checkpoint_every=1, generation="per-node"),
    # The paper's controlled experiment: 8 nodes, 8 questions, 8 completions, the nine families.
    "paper": dict(nodes=8, configs="8/0,6/2,4/4,2/6", rounds=2000, seeds=1, questions=8, completions=8,
                  max_new_tokens=256, model="Qwen/Qwen2.5-0.5B-Instruct", task_file=None, learning_rate=1e-4,
                  micro_batch=16, checkpoint_every=10, generation="batched"),
}


def load_families(settings: Settings) -> dict:
    from swarmnode.train.tasks import TaskConfigError, load_task_file

    try:
        families = load_task_file(settings.task_file)
    except TaskConfigError as exc:
        raise ExperimentError(f"tasks: {exc}") from None
    if settings.tasks:
        wanted = [t.strip() for t in settings.tasks.split(",") if t.strip()]
        unknown = [t for t in wanted if t not in families]
        if unknown:
            raise ExperimentError(f"--tasks: {', '.join(unknown)} not in the task file (it has "
                                  f"{', '.join(families)}; give another with --task-file)")
        families = {t: families[t] for t in wanted}
    return families


def _seed_int(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:4], "little")


@dataclass
class Member:
    """One node of one config: an adapter of the shared model and its side of the exchange
    (the daemon's own :class:`~swarmnode.swarm.exchange.Exchange`: verify, re-score, pool)."""

    arm: Arm
    node: int
    policy: object  # swarmnode.train.policy.Policy
    identity: object  # swarmnode.swarm.identity.Identity
    exchange: object  # swarmnode.swarm.exchange.Exchange


class Experiment:
    """Runs (or resumes) one experiment into ``settings.out``; see the module docstring."""

    def __init__(self, settings: Settings, *, scorer_factory: Callable | None = None, progress: bool = True):
        self.s = settings
        self.out = Path(settings.out)
        self.arms = settings.arms
        self.scorer_factory = scorer_factory
        self.progress = progress
        self.members: list[Member] = []
        self.base = None
        self._anchor = None  # any live policy: new adapters join its model

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

        from swarmnode.train.model import ModelError, load_base_model, pick_device
        from swarmnode.train.tasks import Scorer, TaskSource

        families = load_families(self.s)
        device = pick_device(self.s.device)
        try:
            self.base = load_base_model(self.s.model, device)
        except ModelError as exc:
            raise ExperimentError(str(exc)) from None
        log.info("model %s on %s; %d nodes x %d configs share it", self.base.name, device, self.s.nodes,
                 len(self.arms))
        self.tasks = [TaskSource(families, _seed_int("tasks", k)) for k in range(self.s.nodes)]
        make = self.scorer_factory or (lambda: Scorer(families))
        self.scorers = [make() for _ in range(self.s.nodes)]
        torch.manual_seed(0)

    def _node_config(self, arm: Arm):
        from swarmnode.config import NodeConfig

        return NodeConfig(questions=self.s.questions, completions=self.s.completions,
                          max_new_tokens=self.s.max_new_tokens, temperature=self.s.temperature,
                          local=arm.local, external=arm.external, learning_rate=self.s.learning_rate,
                          micro_batch=self.s.micro_batch, external_sampling=arm.sampling,
                          swarm=f"experiment-{arm.slug}")

    def _build_members(self, seed: int) -> None:
        """Fresh adapters for ``seed``; node k starts from the same weights in every config."""
        import torch

        from swarmnode.swarm.exchange import Exchange
        from swarmnode.swarm.identity import Identity
        from swarmnode.train.policy import Policy
        from swarmnode.swarm.pool import ExternalPool

        old = [m.policy.adapter for m in self.members]
        members = []
        per_round = self.s.nodes * self.s.questions
        for arm in self.arms:
            for k in range(self.s.nodes):
                torch.manual_seed(_seed_int("init", seed, k))
                cfg = self._node_config(arm)
                policy = Policy(self.base, cfg, adapter=f"s{seed}-{arm.slug}-n{k}", shared=self._anchor)
                self._anchor = self._anchor or policy
                identity = Identity.from_seed(hashlib.sha256(f"swarmnode-experiment:{k}".encode()).digest())
                pool = ExternalPool(max_total=2 * per_round, max_per_peer=2 * per_round)
                exchange = Exchange(identity, cfg, self.scorers[k], self.base.name, pool=pool)
                members.append(Member(arm, k, policy, identity, exchange))
        self.members = members
        self._anchor = members[0].policy
        self._anchor.activate()  # so deleting the previous seed's adapters never deletes the active one
        for name in old:
            self._anchor.model.delete_adapter(name)

    # ---- checkpoints and the CSV -----------------------------------------------------------
    def _ckpt_root(self, seed: int, m: Member) -> Path:
        return self.out / "checkpoints" / f"seed-{seed}" / m.arm.slug / f"node-{m.node}"

    def _completed_round(self, seed: int) -> int:
        """The last round whose checkpoint every node of every config has, or -1."""
        from swarmnode.node.checkpoint import list_checkpoints

        common: set[int] | None = None
        for arm in self.arms:
            for k in range(self.s.nodes):
                root = self.out / "checkpoints" / f"seed-{seed}" / arm.slug / f"node-{k}"
                rounds = {r for r, _ in list_checkpoints(root)}
                common = rounds if common is None else common & rounds
        return max(common) if common else -1

    def _restore(self, seed: int, round_no: int) -> bool:
        from swarmnode.node.checkpoint import Checkpoint, restore

        try:
            for m in self.members:
                path = self._ckpt_root(seed, m) / f"round-{round_no:06d}"
                restore(Checkpoint(round_no, path, json.loads((path / "state.json").read_text())), m.policy)
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            log.warning("checkpoint of seed %d round %d unusable (%s): the seed starts again", seed, round_no, exc)
            return False
        return True

    def _save(self, seed: int, round_no: int) -> None:
        from swarmnode.node.checkpoint import save_checkpoint

        for m in self.members:
            save_checkpoint(self._ckpt_root(seed, m), round_no, m.policy,
                            {"seed": seed, "config": m.arm.label, "node": m.node}, keep=2)

    @property
    def csv_path(self) -> Path:
        return self.out / "rounds.csv"

    def _truncate_csv(self, seed: int, first_round: int) -> None:
        """Drop rows of ``seed`` from ``first_round`` on (they are about to be redone)."""
        rows = read_rows(self.csv_path)
        keep = [r for r in rows if not (int(r["seed"]) == seed and int(r["round"]) >= first_round)]
        tmp = self.csv_path.with_suffix(".tmp")
        with open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, CSV_FIELDS)
            writer.writeheader()
            writer.writerows(keep)
        os.replace(tmp, self.csv_path)

    def _append_rows(self, rows: list[dict]) -> None:
        with open(self.csv_path, "a", newline="") as fh:
            csv.DictWriter(fh, CSV_FIELDS).writerows(rows)
            fh.flush()
            os.fsync(fh.fileno())

    # ---- one round -------------------------------------------------------------------------
    def _generate(self, members: list[Member], questions: list[list], seed: int, r: int) -> list:
        """One Generation per member of one config.

        The sampling seed depends on (seed, round) and, per node, on the node, never on the
        config: configs whose adapters are still equal (round 0) sample the very same
        completions, so their differences come from sharing, not from sampling luck.
        """
        import torch

        from swarmnode.train.policy import Generation

        s = self.s
        if s.generation == "per-node":
            out = []
            for m in members:
                torch.manual_seed(_seed_int("sample", seed, m.node, r))
                out.append(m.policy.generate([m.policy.prompt(q.question) for q in questions[m.node]],
                                             s.completions, max_new_tokens=s.max_new_tokens,
                                             temperature=s.temperature))
            return out
        prompts, adapters = [], []
        for m in members:
            prompts += [m.policy.prompt(q.question) for q in questions[m.node]]
            adapters += [m.policy.adapter] * len(questions[m.node])
        torch.manual_seed(_seed_int("sample", seed, r))
        gen = members[0].policy.generate(prompts, s.completions, max_new_tokens=s.max_new_tokens,
                                         temperature=s.temperature, adapters=adapters)
        q = s.questions
        return [Generation(gen.texts[i * q:(i + 1) * q], gen.token_ids[i * q:(i + 1) * q], 0)
                for i in range(len(members))]

    def run_round(self, seed: int, r: int, on_config: Callable[[Arm], None] = lambda arm: None) -> list[dict]:
        """One lockstep round of every node of every config; returns the CSV rows."""
        from swarmnode.node.round import score_local, select_training_set

        s = self.s
        questions = [self.tasks[k].sample(r, s.questions) for k in range(s.nodes)]
        rows = []
        for arm in self.arms:
            members = [(i, m) for i, m in enumerate(self.members) if m.arm == arm]
            t1 = time.perf_counter()
            generated = self._generate([m for _, m in members], questions, seed, r)
            gens = {i: g for (i, _), g in zip(members, generated)}
            local = {i: score_local(questions[m.node], gens[i], self.scorers[m.node], True) for i, m in members}
            if arm.external > 0:
                for i, m in members:
                    data = m.exchange.outgoing(r, local[i])
                    for _, other in members:
                        if other is not m:
                            other.exchange.receive(data)
            share = (time.perf_counter() - t1) / len(members)
            for i, m in members:
                t2 = time.perf_counter()
                rng = random.Random(f"{seed}:{arm.label}:{m.node}:{r}")
                external = m.exchange.pool.sample(arm.external, rng, exclude=m.identity.peer_id, mode=arm.sampling,
                                                  max_peer_share=1.0, min_round=r) if arm.external else []
                train, dropped = select_training_set(local[i], external, arm.local, arm.external, rng)
                loss = m.policy.train_step(train)
                rewards = [x for g in local[i] for x in g.rewards]
                rows.append({
                    "config": arm.label, "seed": seed, "node": m.node, "round": r,
                    "reward_mean": round(statistics.fmean(rewards), 6),
                    "n_external": sum(not g.is_local for g in train),
                    "seconds": round(share + time.perf_counter() - t2, 3),
                    "n_local": sum(g.is_local for g in train),
                    "n_dropped_zero_adv": dropped,
                    "loss": "" if loss is None else round(loss, 6),
                    "bundles_rejected": sum(peer["rejected"] for peer in m.exchange.peers.rows()),
                })
            on_config(arm)
        return rows

    # ---- the whole run -----------------------------------------------------------------------
    def run(self) -> Path:
        """Run or resume every seed, then write summary.md and rewards.png; returns the summary path."""
        from tqdm import tqdm

        self._check_out_dir()
        if not self.csv_path.exists():
            self._truncate_csv(-1, 0)
        s = self.s
        done_rows = {(int(r["seed"]), int(r["round"])) for r in read_rows(self.csv_path)}
        total = s.seeds * s.rounds * len(self.arms)
        start = sum(len(self.arms) for (sd, rd) in done_rows if sd < s.seeds and rd < s.rounds)
        t_start = time.time()
        deadline = None if s.time_limit_minutes is None else t_start + 60 * s.time_limit_minutes
        rounds_run = 0
        with tqdm(total=total, initial=min(start, total), disable=not self.progress, unit="config-round",
                  dynamic_ncols=True) as bar:
            for seed in range(s.seeds):
                if deadline is not None and time.time() >= deadline:
                    break
                completed = self._completed_round(seed)
                if completed + 1 >= s.rounds:
                    continue
                if self.base is None:
                    self._load()
                self._build_members(seed)
                if completed >= 0 and not self._restore(seed, completed):
                    self._build_members(seed)
                    completed = -1
                first = completed + 1
                redone = sum(1 for (sd, rd) in done_rows if sd == seed and first <= rd < s.rounds)
                bar.update(-min(redone * len(self.arms), bar.n))
                self._truncate_csv(seed, first)
                for r in range(first, s.rounds):
                    def step(arm: Arm, r: int = r, seed: int = seed) -> None:
                        bar.set_postfix_str(f"config {arm.label} seed {seed} round {r}")
                        bar.update(1)
                    self._append_rows(self.run_round(seed, r, step))
                    rounds_run += 1
                    out_of_time = deadline is not None and time.time() >= deadline
                    if (r + 1) % s.checkpoint_every == 0 or r == s.rounds - 1 or out_of_time:
                        self._save(seed, r)
                    if out_of_time:
                        log.warning("time limit reached after round %d of seed %d; rerun to continue", r, seed)
                        break
        info = {"peak_rss_mb": peak_rss_mb(), "wall_seconds": round(time.time() - t_start, 1),
                "rounds_run": rounds_run, "adapters": len(self.members),
                "model": self.base.name if self.base else None, "device": s.device}
        if self.base is not None and str(self.base.device).startswith("cuda"):
            import torch

            info["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        with open(self.out / "runs.jsonl", "a") as fh:
            fh.write(json.dumps({"finished_at": time.time(), **info}) + "\n")
        return write_reports(self.out, s)


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# ---- reports -----------------------------------------------------------------------------------
def _t95(df: int) -> float:
    best = [k for k in _T95 if k <= df]
    return _T95[max(best)] if df <= 30 else 1.96


def _interval(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95 % t interval (None for fewer than two values)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, _t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def summarize(rows: list[dict], labels: Sequence[str]) -> dict:
    """Per config: cumulative reward per seed (over the rounds every config finished in that
    seed), its ratio to the baseline config, the final-window mean reward and the seconds."""
    by = defaultdict(list)  # (config, seed) -> rows
    for row in rows:
        by[(row["config"], int(row["seed"]))].append(row)
    seeds = sorted({int(r["seed"]) for r in rows})
    labels = [lb for lb in labels if any((lb, sd) in by for sd in seeds)]
    baseline = next((lb for lb in labels if lb.endswith("/0")), labels[0] if labels else None)
    rounds_by_seed = {}
    for sd in seeds:
        per_config = [len({int(r["round"]) for r in by[(lb, sd)]}) for lb in labels]
        rounds_by_seed[sd] = min(per_config) if per_config else 0
    out = {"baseline": baseline, "rounds_by_seed": rounds_by_seed, "configs": {}}
    for lb in labels:
        cum, final, secs = {}, [], 0.0
        for sd in seeds:
            n = rounds_by_seed[sd]
            use = [r for r in by[(lb, sd)] if int(r["round"]) < n]
            if not use:
                continue
            cum[sd] = sum(float(r["reward_mean"]) for r in use)
            window = max(1, n // 10)
            final += [float(r["reward_mean"]) for r in use if int(r["round"]) >= n - window]
            secs += sum(float(r["seconds"]) for r in use)
        out["configs"][lb] = {"cumulative": cum, "final_window": statistics.fmean(final) if final else None,
                              "seconds": secs}
    base = out["configs"].get(baseline, {}).get("cumulative", {})
    for lb, c in out["configs"].items():
        ratios = [c["cumulative"][sd] / base[sd] for sd in c["cumulative"] if base.get(sd)]
        c["ratio"] = _interval(ratios) if ratios else None
        c["cumulative_mean"] = statistics.fmean(c["cumulative"].values()) if c["cumulative"] else None
    return out


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def write_reports(out: Path, s: Settings) -> Path:
    rows = read_rows(out / "rounds.csv")
    labels = [a.label for a in s.arms]
    summary = summarize(rows, labels)
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()] \
        if (out / "runs.jsonl").exists() else []
    lines = [
        "# SAPO controlled experiment",
        "",
        f"{s.nodes} nodes, configs {s.configs}, {s.questions} questions x {s.completions} completions a round, "
        f"{s.max_new_tokens} new tokens, model `{runs[-1]['model'] if runs and runs[-1].get('model') else s.model}`, "
        f"tasks `{s.task_file or 'packaged tasks.toml'}`{' (' + s.tasks + ')' if s.tasks else ''}, "
        f"learning rate {s.learning_rate}, profile `{s.profile}`, generation {s.generation}.",
        "",
        "Rounds finished per seed (every config): " + ", ".join(
            f"seed {sd}: {n}" for sd, n in summary["rounds_by_seed"].items()) + ".",
        "",
        "Cumulative reward = sum over rounds and nodes of a node's mean reward in the round (the paper's "
        "measure), averaged over seeds; the ratio is taken per seed against the baseline "
        f"`{summary['baseline']}`, with a 95 % t interval across seeds. Final window = mean reward over the "
        "last tenth of the rounds. Seconds = the config's generation, scoring, sharing and training.",
        "",
        "| config | cumulative reward | vs baseline (95 % CI) | final-window mean reward | seconds |",
        "|---|---|---|---|---|",
    ]
    for lb, c in summary["configs"].items():
        ratio = "n/a"
        if c["ratio"] is not None:
            mean, half = c["ratio"]
            ratio = f"{mean:.2f}x" + (f" ({mean - half:.2f} to {mean + half:.2f})" if half is not None
                                      else " (one seed: no interval)")
        lines.append(f"| {lb} | {_fmt(c['cumulative_mean'], 2)} | {ratio} | {_fmt(c['final_window'])} | "
                     f"{c['seconds']:.0f} |")
    if runs:
        last = runs[-1]
        lines += ["", f"Last invocation: {last['rounds_run']} lockstep rounds in {last['wall_seconds']} s, "
                      f"{last['adapters']} adapters on one base model, peak RSS {last['peak_rss_mb']} MB"
                  + (f", peak GPU memory {last['peak_gpu_mb']} MB" if "peak_gpu_mb" in last else "") + "."]
    path = out / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    plot_rewards(rows, labels, out / "rewards.png")
    return path


def plot_rewards(rows: list[dict], labels: Sequence[str], path: Path) -> None:
    """Mean reward per round (over nodes and seeds) per config, trailing moving average."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    n_rounds = max((int(r["round"]) for r in rows), default=0) + 1
    window = max(1, n_rounds // 15)
    for lb in labels:
        per_round = defaultdict(list)
        for r in rows:
            if r["config"] == lb:
                per_round[int(r["round"])].append(float(r["reward_mean"]))
        if not per_round:
            continue
        xs = sorted(per_round)
        ys = [statistics.fmean(per_round[x]) for x in xs]
        smooth = [statistics.fmean(ys[max(0, i - window + 1):i + 1]) for i in range(len(ys))]
        ax.plot(xs, smooth, label=lb)
    ax.set_xlabel("round")
    ax.set_ylabel(f"mean reward (moving average of {window})")
    ax.set_title("SAPO controlled experiment: local / external groups per round")
    ax.grid(alpha=0.3)
    ax.legend(title="I / J")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
