"""What the round benchmarks share: building a solo node, peak RSS, medians.

Each benchmark runs the measured work in a fresh process so that its peak RSS belongs to
that work alone (``ru_maxrss`` is a per-process high-water mark that never goes down).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from swarmnode.config import NodeConfig


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def current_rss_mb() -> float:
    """This process's resident set size now, in MB."""
    import psutil

    return psutil.Process(os.getpid()).memory_info().rss / 2**20


def add_size_args(ap: argparse.ArgumentParser, *, questions: int = 8, completions: int = 8,
                  max_new_tokens: int = 256, threads: int = 0) -> None:
    """The round-size flags every round benchmark takes, with that benchmark's defaults."""
    ap.add_argument("--questions", type=int, default=questions)
    ap.add_argument("--completions", type=int, default=completions)
    ap.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    ap.add_argument("--threads", type=int, default=threads, help="torch threads; 0 lets torch decide")
    ap.add_argument("--model", default="embedded")


def bench_config(**overrides) -> NodeConfig:
    """Node defaults, solo, with ``overrides`` (questions, completions, max_new_tokens...)."""
    return replace(NodeConfig(), solo=True, **overrides)


def build_solo_node(cfg: NodeConfig, seed: int = 0, home: Path | None = None):
    """A real :class:`Node` (policy on ``cfg.model``, packaged tasks, no swarm) in ``home``."""
    import torch

    from swarmnode.node.round import Node
    from swarmnode.node.state import NodeState
    from swarmnode.paths import NodeHome
    from swarmnode.swarm.link import SoloLink
    from swarmnode.train.model import load_base_model, pick_device
    from swarmnode.train.policy import Policy
    from swarmnode.train.tasks import Scorer, TaskSource, load_task_file

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    home = NodeHome(home or Path(tempfile.mkdtemp(prefix="swarmnode-bench-")))
    families = load_task_file(cfg.tasks)
    base = load_base_model(cfg.model, pick_device(cfg.device))
    policy = Policy(base, cfg)
    return Node(cfg, home, policy, TaskSource(families, seed), Scorer(families), SoloLink(), NodeState(), seed)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
