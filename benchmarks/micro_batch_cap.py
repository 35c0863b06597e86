"""One training update at several micro-batch caps, alternated, on the same groups: seconds and peak RSS.

Loads the embedded model once, builds 8 question groups of 8 completions whose lengths mimic a
default round (a few rows to 256 tokens, most shorter; random token ids, random rewards), takes
one warm-up update, then runs ``Policy.train_step`` on those groups with each cap in turn
(``train.policy.MICRO_BATCH_TOKENS``), ``--pairs`` times, resetting the peak (``VmHWM``) before
each. Prints each run's seconds, CPU seconds, micro-batches and peak RSS above the warm state,
then the medians. Usage, from the repository root::

    PYTHONPATH=. python benchmarks/micro_batch_cap.py [--caps 1024 512] [--pairs 2] [--threads 2] [--dtype auto]
"""

from __future__ import annotations

import argparse
import random
import resource
import time

from common import bench_config, build_solo_node, median

LENGTHS = [[256, 256, 140, 90, 60, 40, 30, 20], [256, 200, 120, 100, 80, 64, 50, 33],
           [130, 120, 110, 100, 90, 80, 70, 60], [40, 38, 36, 34, 32, 30, 28, 26]] * 2


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(key + ":")) / 1024


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--caps", type=int, nargs="+", default=[1024, 512])
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"),
                    help="the model's precision (the node's dtype setting)")
    args = ap.parse_args()

    import torch

    import swarmnode.train.policy as policy_module
    from swarmnode.records import Group

    node = build_solo_node(bench_config(model="embedded", threads=args.threads, dtype=args.dtype))
    policy, rng = node.policy, random.Random(0)
    vocab = policy.model.config.vocab_size
    groups = [Group(question=q, responses=["x"] * len(lens), rewards=[rng.random() for _ in lens],
                    token_ids=[[rng.randrange(100, vocab) for _ in range(n)] for n in lens])
              for q, lens in zip(node.tasks.sample(0, len(LENGTHS)), LENGTHS)]
    seqs = policy._encode_pairs([(policy.prompt(g.question.question), ids) for g in groups for ids in g.token_ids])
    policy.train_step(groups[:1])
    warm = _status_mb("VmRSS")
    runs: dict[int, list[tuple[float, float, float]]] = {cap: [] for cap in args.caps}
    for i in range(args.pairs):
        for cap in args.caps:
            policy_module.MICRO_BATCH_TOKENS = cap
            parts = len(policy._micro_batches(seqs, range(len(seqs))))
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")  # VmHWM from here
            torch.manual_seed(0)
            t0, c0 = time.perf_counter(), _cpu_seconds()
            policy.train_step(groups)
            wall, cpu, peak = time.perf_counter() - t0, _cpu_seconds() - c0, _status_mb("VmHWM") - warm
            runs[cap].append((wall, cpu, peak))
            print(f"run {i + 1} cap {cap}: {parts} micro-batches, {wall:.2f} s, CPU {cpu:.2f} s, "
                  f"peak +{peak:.0f} MB over {warm:.0f} MB", flush=True)
    for cap, rs in runs.items():
        wall, cpu, peak = (median([r[k] for r in rs]) for k in range(3))
        print(f"median cap {cap}: {wall:.2f} s, CPU {cpu:.2f} s, peak +{peak:.0f} MB")


if __name__ == "__main__":
    main()
