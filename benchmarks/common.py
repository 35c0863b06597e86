"""What the round benchmarks share: building a solo node, peak RSS, medians.

Each benchmark runs the measured work in a fresh process so that its peak RSS belongs to
that work alone (``ru_maxrss`` is a per-process high-water mark that never goes down).
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import statistics
import sys
import tempfile
import threading
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
    ap.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"),
                    help="the model's precision (the node's dtype setting)")


def bench_config(**overrides) -> NodeConfig:
    """Node defaults, solo, with ``overrides`` (questions, completions, max_new_tokens...)."""
    return replace(NodeConfig(), solo=True, **overrides)


def build_solo_node(cfg: NodeConfig, seed: int = 0, home: Path | None = None, curriculum: bool = False):
    """A real :class:`Node` (policy on ``cfg.model``, packaged tasks, no swarm) in ``home``; its
    families at their task-file configs, or with ``curriculum`` at the levels ``swarmnode start`` gives."""
    import torch

    from swarmnode.node.round import Node
    from swarmnode.node.state import NodeState
    from swarmnode.paths import NodeHome
    from swarmnode.swarm.link import SoloLink
    from swarmnode.train.curriculum import Levels
    from swarmnode.train.model import load_base_model, pick_device, pick_dtype
    from swarmnode.train.policy import Policy
    from swarmnode.train.tasks import Scorer, TaskSource, load_task_file

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    home = NodeHome(home or Path(tempfile.mkdtemp(prefix="swarmnode-bench-")))
    families = load_task_file(cfg.tasks)
    device = pick_device(cfg.device)
    base = load_base_model(cfg.model, device, pick_dtype(device, cfg.dtype))
    policy = Policy(base, cfg)
    levels = Levels.configured(families, cfg.levels, adaptive=cfg.adaptive_difficulty) if curriculum else None
    return Node(cfg, home, policy, TaskSource(families, seed), Scorer(families), SoloLink(), NodeState(), seed,
                levels=levels)


class PhasePeaks:
    """Peak RSS per phase of a node's work, sampled by a thread every ``interval`` seconds.

    The phase is what :meth:`mark` last set, or the phase a :class:`Node` logged last
    (``phase generating`` ...: the handler is installed on ``swarmnode.node.state`` at DEBUG).
    Use as a context manager; ``peaks`` maps a phase to its peak in MB.
    """

    def __init__(self, interval: float = 0.01):
        self.interval = interval
        self.phase = "loading"
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        outer = self

        class _Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if record.msg == "phase %s":
                    outer.mark(str(record.args[0]))

        self._handler = _Handler(logging.DEBUG)
        self._logger = logging.getLogger("swarmnode.node.state")

    def mark(self, phase: str) -> None:
        self._record()
        self.phase = phase

    def _record(self) -> None:
        with open("/proc/self/statm") as fh:
            rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0.0), rss)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._record()

    def __enter__(self) -> PhasePeaks:
        self._logger.addHandler(self._handler)
        self._logger.setLevel(logging.DEBUG)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._record()
        self._logger.removeHandler(self._handler)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
