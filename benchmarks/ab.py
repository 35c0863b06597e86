"""Before/after comparison of changes: one benchmark, several source trees, alternated.

Each run is a fresh process (so peak RSS is per run) that prints one JSON object
(``round_profile.py --json``). Runs cycle through the trees (A B A B ...) so that a shared,
noisy machine slows every side alike; medians and ratios to the first tree are printed.
A tree that carries its own ``benchmarks/`` runs its own copy of the script: archive it
with the package when the commit's modules are laid out differently. Usage::

    git archive BEFORE_COMMIT swarmnode | tar -x -C /tmp/before    # or: swarmnode benchmarks
    PYTHONPATH=. python benchmarks/ab.py --tree before=/tmp/before --tree after=. --pairs 3 -- \\
        benchmarks/round_profile.py --max-new-tokens 64

``--flags NAME=FLAGS`` adds flags to one tree's runs, so that one tree can be compared with
itself under two settings::

    PYTHONPATH=. python benchmarks/ab.py --tree fp32=. --tree bf16=. --flags fp32="--dtype float32" \\
        --flags bf16="--dtype bfloat16" --pairs 2 -- benchmarks/round_profile.py --curriculum
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from common import median

KEYS = ("seconds", "cpu_seconds", "seconds_generate", "seconds_score", "seconds_train", "tokens_generated",
        "tokens_per_second", "peak_rss_mb")


def tree_argv(tree: str, argv: list[str]) -> list[str]:
    """``argv`` with its script replaced by the tree's own copy, where the tree has one."""
    own = Path(tree) / "benchmarks" / Path(argv[0]).name
    return [str(own), *argv[1:]] if own.is_file() else argv


def run_once(tree: str, argv: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    proc = subprocess.run([sys.executable, *tree_argv(tree, argv), "--json"], env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"run failed in {tree}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=PATH",
                    help="a source tree to measure (repeat; the first is the reference)")
    ap.add_argument("--flags", action="append", default=[], metavar="NAME=FLAGS",
                    help="flags added to tree NAME's runs (repeat for other trees)")
    ap.add_argument("--pairs", type=int, default=3, help="runs of each tree")
    ap.add_argument("benchmark", nargs=argparse.REMAINDER, help="-- script and its arguments")
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    argv = [a for a in args.benchmark if a != "--"]
    extra = {name: shlex.split(flags) for name, flags in (f.split("=", 1) for f in args.flags)}
    unknown = sorted(set(extra) - set(trees))
    if unknown:
        raise SystemExit(f"--flags names no tree: {', '.join(unknown)}")
    results: dict[str, list[dict]] = {name: [] for name in trees}
    for i in range(args.pairs):
        for name, tree in trees.items():
            res = run_once(tree, [*argv, *extra.get(name, [])])
            results[name].append(res)
            # every figure of the run, phase peaks too: a run cut short still leaves them
            shown = [*KEYS, *sorted(k for k in res if k.startswith("peak_rss_mb_"))]
            print(f"run {i + 1} {name}: " + ", ".join(f"{k} {res[k]:.2f}" for k in shown if k in res), flush=True)
    names = list(trees)
    print(f"\nmedians over {args.pairs} runs each ({' '.join(argv)}):")
    print(f"{'':20s}" + "".join(f"{n:>12s}" for n in names) + "".join(f"{n + '/' + names[0]:>16s}" for n in names[1:]))
    phases = sorted({k for runs in results.values() for r in runs for k in r if k.startswith("peak_rss_mb_")})
    for k in (*KEYS, *phases):
        if not any(k in r for runs in results.values() for r in runs):
            continue
        meds = [median([r[k] for r in results[n] if k in r]) for n in names]
        print(f"{k:20s}" + "".join(f"{m:12.2f}" for m in meds)
              + "".join(f"{m / meds[0] if meds[0] else float('nan'):16.2f}" for m in meds[1:]))


if __name__ == "__main__":
    main()
