"""Oscillation and forgetting, per config: how much a node's mean reward moves from one round
to the next (mean absolute change, and that change over the node's mean reward), the largest
fall of its 5-round moving average from its running peak (mean and largest over nodes), and
the yardstick by family at each yardstick round that every seed has (mean over nodes and
seeds), so a family's best against its last shows what was forgotten.

Run: ``python docs/experiments/equal/swings.py [FOLDER]`` (the folder holding ``rounds.csv``
and ``yardstick.csv``, this one by default).
"""

import csv
import json
import os
import statistics as st
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
WINDOW = 5


def read(folder: str, table: str) -> list[dict]:
    with open(os.path.join(folder, f"{table}.csv")) as f:
        return list(csv.DictReader(f))


def largest_fall(rewards: list[float]) -> float:
    peak, fall = float("-inf"), 0.0
    for i in range(WINDOW, len(rewards) + 1):
        average = st.fmean(rewards[i - WINDOW:i])
        peak, fall = max(peak, average), max(fall, peak - average)
    return fall


def main() -> None:
    folder = sys.argv[1] if len(sys.argv) > 1 else HERE
    series: dict[tuple, dict[int, float]] = defaultdict(dict)
    for r in read(folder, "rounds"):
        series[(r["config"], r["seed"], r["node"])][int(r["round"])] = float(r["reward_mean"])
    print("config | mean reward | round-to-round change (of the mean) | fall of the 5-round average: mean, largest")
    for config in sorted({key[0] for key in series}):
        nodes = [[s[r] for r in sorted(s)] for key, s in series.items() if key[0] == config]
        changes = [abs(b - a) for xs in nodes for a, b in zip(xs, xs[1:])]
        falls = [largest_fall(xs) for xs in nodes]
        mean = st.fmean(x for xs in nodes for x in xs)
        print(f"{config} | {mean:.3f} | {st.fmean(changes):.3f} ({st.fmean(changes) / mean:.0%}) | "
              f"{st.fmean(falls):.3f}, {max(falls):.3f}")

    scores: dict[tuple, list[float]] = defaultdict(list)
    seeds: dict[tuple, set[str]] = defaultdict(set)
    for r in read(folder, "yardstick"):
        if r["config"] == "base":
            continue
        seeds[(r["config"], int(r["round"]))].add(r["seed"])
        for family, score in json.loads(r["by_family"]).items():
            scores[(r["config"], family, int(r["round"]))].append(float(score))
    every = {config for config, _ in seeds}
    all_seeds = set.union(*seeds.values()) if seeds else set()
    print("\nyardstick by family after round N (every seed measured)")
    for config in sorted(every):
        rounds = sorted(rd for (c, rd), s in seeds.items() if c == config and s == all_seeds)
        families = sorted({f for (c, f, _) in scores if c == config})
        for family in families:
            cells = " ".join(f"{rd}: {st.fmean(scores[(config, family, rd)]):.3f}" for rd in rounds)
            print(f"{config} {family:<17} {cells}")


if __name__ == "__main__":
    main()
