"""Memory soak: many rounds of a real solo node at tiny sizes, RSS printed every 10 rounds.

The node runs whole rounds as the daemon does (``run_round`` then ``finish_round``: metrics
line, checkpoint, state events). Target: the RSS after the last round within 5% of the RSS
after round 20 (memory must not grow with the number of rounds). Exits 1 when it misses.
Usage, from the repository root::

    PYTHONPATH=. python benchmarks/soak.py [--rounds 200] [--questions 2] [--completions 4]
        [--max-new-tokens 16] [--model embedded] [--tasks laptop]

The default tasks are the packaged easy set, where the embedded model's groups have reward
signal, so every round also trains (at the default difficulties nothing would).
"""

from __future__ import annotations

import argparse
import sys
import time

from common import add_size_args, bench_config, build_solo_node, current_rss_mb, peak_rss_mb

BASELINE_ROUND = 20
TOLERANCE = 0.05


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    add_size_args(ap, questions=2, completions=4, max_new_tokens=16)
    ap.add_argument("--tasks", default="laptop", help="task file or packaged set (see the config key 'tasks')")
    args = ap.parse_args()
    if args.rounds < BASELINE_ROUND:
        ap.error(f"--rounds must be at least {BASELINE_ROUND}")

    cfg = bench_config(questions=args.questions, completions=args.completions, max_new_tokens=args.max_new_tokens,
                       threads=args.threads, model=args.model, tasks=args.tasks, local=args.questions, external=0)
    node = build_solo_node(cfg, seed=0)
    print(f"{'round':>6s}{'RSS MB':>10s}{'seconds':>10s}{'reward':>8s}", flush=True)
    baseline = None
    t0 = time.perf_counter()
    for r in range(args.rounds):
        row = node.run_round(r)
        node.finish_round(row)
        if (r + 1) % 10 == 0:
            rss = current_rss_mb()
            if r + 1 == BASELINE_ROUND:
                baseline = rss
            print(f"{r + 1:6d}{rss:10.1f}{time.perf_counter() - t0:10.1f}{row.reward_mean:8.3f}", flush=True)
    final = current_rss_mb()
    growth = final / baseline - 1
    verdict = "PASS" if growth <= TOLERANCE else "FAIL"
    print(f"RSS after round {BASELINE_ROUND}: {baseline:.1f} MB, after round {args.rounds}: {final:.1f} MB, "
          f"growth {growth * 100:+.2f}% (target <= {TOLERANCE * 100:.0f}%): {verdict}; peak RSS {peak_rss_mb():.0f} MB")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
