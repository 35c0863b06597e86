"""A lever's 4/4:ab run (FOLDER's tables, a run's flags on patched code) against BASE's 4/4:ab
(the node as it is) and 8/0 (alone), model by model, over the rounds every table has per seed:
cumulative reward and the yardstick after the last round all three measured. BASE is this
folder by default (the equal-nodes run). How far peers' groups were from the receiver's policy
is ``drift.py``'s, on either folder.

Run: ``python docs/experiments/equal/against.py FOLDER [BASE]`` (e.g. ``docs/experiments/bar``).
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


def by_seed(arms: dict, table: str, column: str, model: str) -> dict:
    """{arm: {seed: {round: [each node's value]}}} for the nodes of ``model``."""
    out = {name: collections.defaultdict(dict) for name in arms}
    for name, (where, config) in arms.items():
        for r in load(where, table, config):
            if r["model"] == model:
                out[name][r["seed"]].setdefault(int(r["round"]), []).append(float(r[column]))
    return out


def main() -> None:
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    base = sys.argv[2] if len(sys.argv) == 3 else HERE
    arms = {"lever": (sys.argv[1], "4/4:ab"), "current": (base, "4/4:ab"), "alone": (base, "8/0")}
    models = sorted({r["model"] for r in load(sys.argv[1], "rounds", "4/4:ab")})
    for model in models:
        if len(models) > 1:
            print(f"-- {model}")
        rewards = by_seed(arms, "rounds", "reward_mean", model)
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

        scores = by_seed(arms, "yardstick", "score", model)
        last = {seed: max(set.intersection(*(set(scores[name][seed]) for name in arms)), default=None)
                for seed in seeds}
        if all(last.values()):
            for name in arms:
                per_seed = [st.mean(scores[name][seed][last[seed]]) for seed in seeds]
                print(f"yardstick {name} after rounds {sorted({v for v in last.values() if v})}: "
                      f"{per_seed_text(per_seed)}")


if __name__ == "__main__":
    main()
