"""A lever's 4/4:ab run (FOLDER's tables, the equal-nodes flags on patched code) against this
folder's 4/4:ab (the node as it is) and 8/0 (alone), over the rounds every table has per seed:
cumulative reward and the yardstick after the last round all three measured. How far peers'
groups were from the receiver's policy is ``drift.py``'s, on either folder.

Run: ``python docs/experiments/equal/against.py FOLDER`` (e.g. ``docs/experiments/bar``).
"""

import collections
import csv
import os
import statistics as st
import sys

from swarmnode.experiment.report import per_seed_text

HERE = os.path.dirname(os.path.abspath(__file__))


def load(folder: str, table: str, config: str) -> list[dict]:
    with open(os.path.join(folder, f"{table}.csv")) as f:
        return [r for r in csv.DictReader(f) if r["config"] == config]


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    arms = {"lever": (sys.argv[1], "4/4:ab"), "current": (HERE, "4/4:ab"), "alone": (HERE, "8/0")}
    rewards = {name: collections.defaultdict(dict) for name in arms}
    for name, (where, config) in arms.items():
        for r in load(where, "rounds", config):
            rewards[name][r["seed"]].setdefault(int(r["round"]), []).append(float(r["reward_mean"]))
    seeds = sorted(set.intersection(*(set(v) for v in rewards.values())))
    ratio = collections.defaultdict(list)
    for seed in seeds:
        n = min(max(rewards[name][seed]) for name in arms) + 1
        cum = {name: sum(st.mean(rewards[name][seed][r]) for r in range(n)) for name in arms}
        for name in ("lever", "current"):
            ratio[name].append(cum[name] / cum["alone"])
        ratio["lever/current"].append(cum["lever"] / cum["current"])
        print(f"seed {seed}: rounds 0-{n - 1}, cumulative reward a node: lever {cum['lever']:.3f}, "
              f"current {cum['current']:.3f}, alone {cum['alone']:.3f}")
    for name, values in ratio.items():
        print(f"cumulative reward {name}{'' if '/' in name else ' / alone'}: {per_seed_text(values, 2)}")

    scores = {name: collections.defaultdict(dict) for name in arms}
    for name, (where, config) in arms.items():
        for r in load(where, "yardstick", config):
            scores[name][r["seed"]].setdefault(int(r["round"]), []).append(float(r["score"]))
    last = {seed: max(set.intersection(*(set(scores[name][seed]) for name in arms)), default=None) for seed in seeds}
    if all(last.values()):
        for name in arms:
            per_seed = [st.mean(scores[name][seed][last[seed]]) for seed in seeds]
            print(f"yardstick {name} after rounds {sorted({v for v in last.values() if v})}: {per_seed_text(per_seed)}")


if __name__ == "__main__":
    main()
