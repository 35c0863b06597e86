"""Records shared by every layer: a question, a question group, a finished round.

Groups are what a round produces, what bundles carry between nodes (minus the rewards,
which a receiver recomputes), and what GRPO trains on. This module imports nothing of the
project but ``typed`` (the one reader of JSON values), so the wire format, the trainer and the
node all depend on it and not on each other.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from typing_extensions import Self

from swarmnode.typed import read_as

LOCAL = "local"


@dataclass(frozen=True)
class Question:
    """One verifiable task: what is asked, the answer key and what the verifier needs."""

    family: str
    question: str
    answer: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # The difficulty level it was drawn at (swarmnode.train.curriculum), None when unknown: a
    # family off the ladder, or a peer that did not say. A peer's claim is for display and
    # selection only; it never moves this node's levels.
    level: int | None = None

    def entry(self) -> dict[str, Any]:
        """The reasoning-gym entry that ``score_answer`` expects."""
        return {"question": self.question, "answer": self.answer, "metadata": dict(self.metadata)}


@dataclass
class Group:
    question: Question
    # Full assistant responses, the prefilled "<answer>" included, so a receiver with other
    # prompt settings still sees exactly what the sender's model produced.
    responses: list[str]
    # This node's own rewards (never a sender's), one per response.
    rewards: list[float]
    # LOCAL, or the PeerID of the node that shared it.
    source: str = LOCAL
    # For local groups, the sampled token ids of each completion (after the prompt), so the
    # update scores exactly what was generated; None for text that came over the network.
    token_ids: list[list[int]] | None = None
    # For a peer's group, the bundle it came in: (the sender's round, the bundle's digest), so
    # the node can send the sender a receipt once it trained on it (swarmnode.swarm.receipt).
    # Where a group travelled is not what it is: equal groups compare equal whatever carried them.
    origin: tuple[int, str] | None = field(default=None, compare=False)

    @property
    def level(self) -> int | None:
        """The level its question was drawn at (see :attr:`Question.level`)."""
        return self.question.level

    @property
    def is_local(self) -> bool:
        return self.source == LOCAL

    def has_signal(self) -> bool:
        """False when every response got the same reward: zero advantage, nothing to learn."""
        return len(self.rewards) > 1 and max(self.rewards) - min(self.rewards) > 1e-6


class JsonRecord:
    """A frozen record that is one JSON line of a log (:class:`swarmnode.node.metrics.MetricsLog`).

    Subclasses are dataclasses with a ``round``: a log holds one record per round number.
    """

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]  # what @dataclass gives each subclass
    round: int

    def to_json(self) -> dict[str, Any]:
        return {f.name: (dict(v) if isinstance(v := getattr(self, f.name), Mapping) else v) for f in fields(self)}

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Self:
        """The record of a JSON row; keys it does not know (a newer writer's) are ignored.

        Raises ValueError naming the first missing field or the first value of the wrong kind
        (:func:`swarmnode.typed.read_as`: an int where a float is due becomes a float).
        """
        values = {}
        hints = _field_hints(cls)
        for f in fields(cls):
            if f.name not in row:
                if f.default is not MISSING or f.default_factory is not MISSING:
                    continue
                raise ValueError(f"no '{f.name}'")
            values[f.name] = read_as(row[f.name], hints[f.name], f.name)
        return cls(**values)


@functools.cache
def _field_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


R = TypeVar("R", bound=JsonRecord)


@dataclass(frozen=True)
class RoundRecord(JsonRecord):
    """What one finished round did: a line of ``metrics.jsonl``, a row of ``/v1/rounds``."""

    round: int
    started_at: float
    seconds: float
    seconds_generate: float
    seconds_score: float
    seconds_train: float
    reward_mean: float
    # Mean reward per task family over this node's own completions.
    reward_by_task: Mapping[str, float]
    n_local: int
    n_external: int
    n_dropped_zero_adv: int
    tokens_generated: int
    # The round's sizes after the round budget (:mod:`swarmnode.node.budget`) fitted them to the hardware.
    completions: int
    max_new_tokens: int
    loss: float | None
    peers: int
    # Rows written before a field existed read as its default.
    # torch's intra-op threads while decoding (:mod:`swarmnode.node.threads`).
    threads: int = 0
    # Share of the round's groups with non-zero advantage: all, this node's own, the external
    # ones drawn (None when there were none); see :func:`swarmnode.node.round.signal_rates`.
    signal_rate: float | None = None
    signal_rate_local: float | None = None
    signal_rate_external: float | None = None
    # The family levels the round's questions were drawn at, and the families whose level this
    # round's results moved, with their new level (:mod:`swarmnode.train.curriculum`).
    levels: Mapping[str, int] = field(default_factory=dict)
    level_moves: Mapping[str, int] = field(default_factory=dict)
    # What the swarm gave the round (:mod:`swarmnode.gain`): the groups with signal that entered
    # the update per family, this node's own and peers'; peers' groups pooled since the previous
    # round per family and their mean reward under this node's verifier; the update's external
    # groups per sender (PeerID).
    trained_by_family: Mapping[str, int] = field(default_factory=dict)
    trained_external_by_family: Mapping[str, int] = field(default_factory=dict)
    peer_groups_by_family: Mapping[str, int] = field(default_factory=dict)
    peer_reward_by_family: Mapping[str, float] = field(default_factory=dict)
    drawn_by_peer: Mapping[str, int] = field(default_factory=dict)

@dataclass(frozen=True)
class YardstickRecord(JsonRecord):
    """The policy's greedy score on the fixed yardstick (:mod:`swarmnode.train.yardstick`): a
    line of ``yardstick.jsonl``, a row of ``/v1/yardstick``."""

    round: int  # rounds trained when it was taken
    started_at: float
    score: float | None
    by_family: Mapping[str, float]
    by_level: Mapping[str, float]  # keys "family:level"
    questions: int
    seconds: float

