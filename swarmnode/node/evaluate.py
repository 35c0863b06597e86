"""``swarmnode eval``'s work: the yardstick score of a node's newest checkpoint, or of the untrained policy.

The same fixed held-out set and greedy decoding as the yardstick a running node takes between
rounds (:mod:`swarmnode.train.yardstick`), run in its own process on the node's home, so it
can score any node (running or not) without touching its rounds.
"""

from __future__ import annotations

from typing import Any

from swarmnode.config import NodeConfig
from swarmnode.node.checkpoint import latest_checkpoint
from swarmnode.paths import NodeHome
from swarmnode.train.model import load_base_model, pick_device
from swarmnode.train.policy import Policy
from swarmnode.train.tasks import Scorer, load_task_file
from swarmnode.train.yardstick import score_yardstick, yardstick_questions


def evaluate(cfg: NodeConfig, home: NodeHome, *, untrained: bool = False) -> dict[str, Any]:
    """The yardstick record of ``home``'s newest valid checkpoint (``untrained``: of a fresh
    adapter, i.e. the base model); its ``round`` is the number of rounds trained."""
    families = load_task_file(cfg.tasks)
    policy = Policy(load_base_model(cfg.model, pick_device(cfg.device)), cfg)
    trained = 0
    ckpt = None if untrained else latest_checkpoint(home.checkpoints)
    if ckpt is not None:
        policy.load_adapter_weights(ckpt.path / "adapter")
        trained = ckpt.round + 1
    record = score_yardstick(policy, Scorer(families), yardstick_questions(families))
    return {"round": trained, "checkpoint": None if ckpt is None else str(ckpt.path), **record}
