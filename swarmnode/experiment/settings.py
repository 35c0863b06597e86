"""What defines an experiment run: its I/J configs, its nodes and their models, its size, and
the node settings every node runs with.

The node settings are a :class:`~swarmnode.config.NodeConfig` (the same keys, checks and flags
as ``swarmnode start``); a profile only changes their defaults. Each config's nodes take that
config with their own ``local`` / ``external`` / ``external_sampling`` and their cohort's model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmnode.config import NodeConfig

SAMPLING_SUFFIX = {"": "uniform", "rw": "reward-weighted", "lv": "level-aware", "ao": "above-own", "ab": "above-best"}
# Settings that may change when a run is resumed: they do not change what a round computes.
RESUMABLE = ("rounds", "seeds", "first_seed", "checkpoint_every", "out", "time_limit_minutes", "node.device",
             "node.threads", "node.eval_every")


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
        suffix = {mode: tag for tag, mode in SAMPLING_SUFFIX.items()}[self.sampling]
        return f"{self.local}/{self.external}" + (f":{suffix}" if suffix else "")

    @property
    def slug(self) -> str:
        return self.label.replace("/", "-").replace(":", "-")

    @classmethod
    def parse(cls, text: str) -> Arm:
        """``"4/4"`` (uniform external sampling), ``"4/4:rw"`` (reward-weighted), ``"4/4:lv"`` (level-aware),
        ``"4/4:ao"`` (above-own) or ``"4/4:ab"`` (above-best)."""
        body, _, suffix = text.strip().partition(":")
        try:
            local, external = (int(x) for x in body.split("/"))
        except ValueError:
            raise ExperimentError(f"config '{text}' is not I/J (e.g. 4/4 or 4/4:rw)") from None
        if suffix not in SAMPLING_SUFFIX:
            raise ExperimentError(f"config '{text}': unknown suffix ':{suffix}' (':rw' reward-weighted, "
                                  f"':lv' level-aware, ':ao' above-own, ':ab' above-best)")
        if local < 0 or external < 0 or local + external == 0:
            raise ExperimentError(f"config '{text}': I and J must be >= 0 and not both 0")
        return cls(local, external, SAMPLING_SUFFIX[suffix])

    def node_config(self, node: NodeConfig) -> NodeConfig:
        """What a node of this config runs: the experiment's node settings with this I/J."""
        return dataclasses.replace(node, local=self.local, external=self.external, external_sampling=self.sampling,
                                   swarm=f"experiment-{self.slug}")


@dataclass(frozen=True)
class Cohort:
    """``count`` nodes of every config on the base model ``model`` (as ``--model`` takes it: a
    catalogue name, ``embedded``, a Hugging Face id or a local directory)."""

    model: str
    count: int

    @property
    def label(self) -> str:
        """The model's name in the outputs: a local directory's own name, else ``model`` as given."""
        path = Path(self.model).expanduser()
        return path.name if ("/" in self.model or "\\" in self.model) and path.exists() else self.model


def parse_cohorts(nodes: int | str, default_model: str) -> list[Cohort]:
    """``4`` (four nodes on ``default_model``) or ``MODEL:N,MODEL:N`` (for example
    ``smollm2-135m:3,qwen2.5-coder-0.5b:1``): the nodes of each config, by model."""
    if isinstance(nodes, int) or str(nodes).strip().isdigit():
        return [Cohort(default_model, int(nodes))]
    cohorts = []
    for item in (t.strip() for t in str(nodes).split(",")):
        model, sep, count = item.rpartition(":")
        if not item or not sep or not model.strip() or not count.strip().isdigit() or int(count) < 1:
            raise ExperimentError(f"--nodes: '{item}' is not MODEL:COUNT with COUNT >= 1 "
                                  "(e.g. smollm2-135m:3,qwen2.5-coder-0.5b:1, or a plain count)")
        cohorts.append(Cohort(model.strip(), int(count)))
    if len({c.model for c in cohorts}) != len(cohorts):
        raise ExperimentError(f"--nodes names a model twice: {nodes}")
    if len({c.label for c in cohorts}) != len(cohorts):
        raise ExperimentError(f"--nodes: two models of the same name: {nodes}")
    return cohorts


def parse_arms(text: str) -> list[Arm]:
    arms = [Arm.parse(t) for t in text.split(",") if t.strip()]
    if not arms:
        raise ExperimentError("--configs lists no config")
    if len({a.label for a in arms}) != len(arms):
        raise ExperimentError(f"--configs lists a config twice: {text}")
    return arms


@dataclass
class Settings:
    """Everything that defines a run; fields in :data:`RESUMABLE` may differ on resume."""

    profile: str
    # Nodes per config: a count (all on ``node.model``) or ``MODEL:N,...`` (see :func:`parse_cohorts`).
    nodes: int | str
    configs: str
    rounds: int
    seeds: int
    checkpoint_every: int
    out: str
    node: NodeConfig = field(default_factory=NodeConfig)
    # A subset of the task file's families (comma-separated), or None for all of them.
    families: str | None = None
    time_limit_minutes: float | None = None
    # The first seed's number: seeds ``first_seed .. first_seed + seeds - 1`` run, so one run's
    # seeds can be split over processes or machines and their tables put together.
    first_seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.nodes, str) and self.nodes.strip().isdigit():
            self.nodes = int(self.nodes)  # a plain count is stored as one (and resumes runs that stored it so)
        for key in ("nodes", "rounds", "seeds", "checkpoint_every"):
            value = getattr(self, key)
            if isinstance(value, int) and value < 1:
                raise ExperimentError(f"--{key.replace('_', '-')} must be >= 1")
        if self.first_seed < 0:
            raise ExperimentError("--first-seed must be >= 0")
        if self.node_count < 2 and any(a.external for a in self.arms):
            raise ExperimentError("configs with J > 0 need --nodes 2 or more")

    @property
    def arms(self) -> list[Arm]:
        return parse_arms(self.configs)

    @property
    def seed_numbers(self) -> range:
        return range(self.first_seed, self.first_seed + self.seeds)

    @property
    def cohorts(self) -> list[Cohort]:
        return parse_cohorts(self.nodes, self.node.model)

    @property
    def node_count(self) -> int:
        """Nodes per config, every model's together."""
        return sum(c.count for c in self.cohorts)

    def cohort_of(self, k: int) -> Cohort:
        """The cohort of node ``k`` (0-based) of a config: the cohorts in order, ``count`` nodes each."""
        for cohort in self.cohorts:
            if k < cohort.count:
                return cohort
            k -= cohort.count
        raise IndexError(k)

    def fingerprint(self) -> dict[str, Any]:
        flat = {k: v for k, v in dataclasses.asdict(self).items() if k != "node"}
        flat.update({f"node.{k}": v for k, v in dataclasses.asdict(self.node).items()})
        return {k: v for k, v in flat.items() if k not in RESUMABLE}


PROFILES: dict[str, dict[str, Any]] = {
    # The four configs in about 45 minutes on two CPU cores with the embedded model: measured
    # 91 s a round for 16 nodes x 32 sequences with one torch thread while the other core was
    # busy (docs/experiments/README.md says what was run end to end).
    "laptop": dict(nodes=4, configs="8/0,6/2,4/4,2/6", rounds=30, seeds=1, checkpoint_every=1,
                   node=dict(questions=8, completions=4, max_new_tokens=8, model="embedded", tasks="laptop",
                             learning_rate=2e-4, micro_batch=32)),
    # The paper's controlled experiment: 8 nodes, 8 questions, 8 completions, the nine families.
    "paper": dict(nodes=8, configs="8/0,6/2,4/4,2/6", rounds=2000, seeds=1, checkpoint_every=10,
                  node=dict(questions=8, completions=8, max_new_tokens=256, model="qwen2.5-coder-0.5b",
                            tasks=None, learning_rate=1e-4, micro_batch=16)),
}
