"""``swarmnode eval``'s work: the yardstick score of a node's newest checkpoint, or of the untrained policy.

The same fixed held-out set and greedy decoding as the yardstick a running node takes between
rounds (:mod:`swarmnode.train.yardstick`), run in its own process on the node's home, so it
can score any node (running or not) without touching its rounds. It runs with the node's
thread count (``threads``), and the untrained score comes from the cache a node keeps it in
when one measured it before.
"""

from __future__ import annotations

from typing import Any

from swarmnode.config import NodeConfig
from swarmnode.node.checkpoint import latest_checkpoint
from swarmnode.node.threads import ThreadPolicy, confine_library_threads
from swarmnode.paths import NodeHome
from swarmnode.train.model import load_base_model, pick_device, pick_dtype
from swarmnode.train.policy import Policy
from swarmnode.train.tasks import Scorer, load_task_file
from swarmnode.train.yardstick import (
    cached_untrained,
    score_yardstick,
    store_untrained,
    untrained_key,
    yardstick_questions,
)


def evaluate(cfg: NodeConfig, home: NodeHome, *, untrained: bool = False) -> dict[str, Any]:
    """The yardstick record of ``home``'s newest valid checkpoint (``untrained``, or no checkpoint:
    of a fresh adapter, i.e. the base model); its ``round`` is the number of rounds trained."""
    confine_library_threads()
    threads = ThreadPolicy(cfg.threads)  # made before the load, which is its probe window
    families = load_task_file(cfg.tasks)
    device = pick_device(cfg.device)
    policy = Policy(load_base_model(cfg.model, device, pick_dtype(device, cfg.dtype)), cfg)
    threads.start()
    threads.apply()
    questions = yardstick_questions(families)
    ckpt = None if untrained else latest_checkpoint(home.checkpoints)
    if ckpt is None:
        key = untrained_key(policy, questions)
        record = cached_untrained(key)
        if record is None:
            record = score_yardstick(policy, Scorer(families), questions)
            store_untrained(key, record)
        return {"round": 0, "checkpoint": None, **record}
    policy.load_adapter_weights(ckpt.path / "adapter")
    record = score_yardstick(policy, Scorer(families), questions)
    return {"round": ckpt.round + 1, "checkpoint": str(ckpt.path), **record}
