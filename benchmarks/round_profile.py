"""One SAPO round on the embedded model, timed phase by phase, with peak RSS.

Runs a real solo :class:`~swarmnode.node.round.Node` (no swarm, no checkpoint writing) at the
default sizes: 8 questions x 8 completions x 256 max new tokens. Prints seconds for
generate / score / train, generated tokens per second, the process's peak RSS and the peak
RSS of each phase (loading, generating, scoring, sharing, training; with ``--yardstick``,
the yardstick after the rounds, taken whole). Families are drawn at their task-file configs
unless ``--curriculum`` draws them at the levels a new node starts at, as ``swarmnode
start`` does. Usage, from the repository root::

    PYTHONPATH=. python benchmarks/round_profile.py [--rounds 1] [--questions 8] [--completions 8]
        [--max-new-tokens 256] [--threads 0] [--tasks laptop] [--curriculum] [--yardstick] [--json]

``--json`` prints one JSON object instead of the table (``benchmarks/ab.py`` reads it). Figures
are medians over the rounds, except CPU time (the mean per round).
"""

from __future__ import annotations

import argparse
import json
import resource
import time

from common import (
    PhasePeaks,
    add_size_args,
    bench_config,
    build_solo_node,
    median,
    peak_rss_mb,
)


def _cpu_seconds() -> float:
    """CPU time of this process, all threads: less sensitive than wall time to a busy machine."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _yardstick_seconds(node) -> float:
    """Seconds of the policy's whole yardstick after the rounds (``score_yardstick``, in every tree)."""
    from swarmnode.train.yardstick import score_yardstick, yardstick_questions

    t0 = time.perf_counter()
    score_yardstick(node.policy, node.scorer, yardstick_questions(node.tasks.spec))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1, help="rounds to run (the figures are their medians)")
    ap.add_argument("--first-round", type=int, default=0, help="round number of the first round (its questions)")
    add_size_args(ap)
    ap.add_argument("--tasks", default=None,
                    help="task file or packaged set (laptop); default: the packaged nine families")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--curriculum", action="store_true", help="draw at a new node's start levels")
    ap.add_argument("--yardstick", action="store_true", help="take the yardstick, whole, after the rounds")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()

    cfg = bench_config(questions=args.questions, completions=args.completions, max_new_tokens=args.max_new_tokens,
                       threads=args.threads, model=args.model, dtype=args.dtype,
                       tasks=args.tasks)
    with PhasePeaks() as phases:
        t0 = time.perf_counter()
        node = build_solo_node(cfg, seed=args.seed, curriculum=args.curriculum)
        load_s = time.perf_counter() - t0
        cpu0 = _cpu_seconds()
        rows = [node.run_round(r) for r in range(args.first_round, args.first_round + args.rounds)]
        cpu_per_round = (_cpu_seconds() - cpu0) / args.rounds
        if args.yardstick:
            phases.mark("yardstick")
            yardstick_s = _yardstick_seconds(node)
    keys = ("seconds", "seconds_generate", "seconds_score", "seconds_train", "tokens_generated")
    result = {k: median([getattr(row, k) for row in rows]) for k in keys}
    result["tokens_per_second"] = median([row.tokens_generated / row.seconds_generate for row in rows])
    result["round_tokens_per_second"] = median([row.tokens_generated / row.seconds for row in rows])
    result["reward_mean"] = median([row.reward_mean for row in rows])
    result["cpu_seconds"] = cpu_per_round
    result["peak_rss_mb"] = peak_rss_mb()
    result["load_seconds"] = load_s
    result["rounds"] = args.rounds
    result.update({f"peak_rss_mb_{phase}": mb for phase, mb in phases.peaks.items()})
    if args.yardstick:
        result["yardstick_seconds"] = yardstick_s
    if args.json:
        print(json.dumps(result))
        return
    print(f"model {args.model}, {args.questions} questions x {args.completions} completions x "
          f"{args.max_new_tokens} max new tokens, {args.rounds} round(s), medians:")
    print(f"  round     {result['seconds']:8.2f} s  (CPU time {cpu_per_round:.2f} s)")
    print(f"  generate  {result['seconds_generate']:8.2f} s  ({result['tokens_generated']:.0f} tokens, "
          f"{result['tokens_per_second']:.1f} tok/s)")
    print(f"  score     {result['seconds_score']:8.2f} s")
    print(f"  train     {result['seconds_train']:8.2f} s")
    print(f"  peak RSS  {result['peak_rss_mb']:8.0f} MB  (model load {load_s:.1f} s)")
    if args.yardstick:
        print(f"  yardstick {yardstick_s:8.2f} s  (whole)")
    for phase, mb in phases.peaks.items():
        print(f"  peak RSS while {phase:<10s} {mb:6.0f} MB")


if __name__ == "__main__":
    main()
