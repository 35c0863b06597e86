"""Records shared by every layer: a question, a question group, a finished round.

Groups are what a round produces, what bundles carry between nodes (minus the rewards,
which a receiver recomputes), and what GRPO trains on. This module imports nothing of the
project, so the wire format, the trainer and the node all depend on it and not on each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

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
