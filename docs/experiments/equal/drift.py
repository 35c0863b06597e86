"""How far the peers' groups a 4/4 node drew were from its own policy, by ten-round span: the
mean log-prob a token, under the receiver's policy before its update, of its own groups and of
its peers' (a group's mean over its completions), the share of peers' groups whose mean was
more than GAP nats below the receiver's own mean that round, and how many of those held a
right completion. The bound judges each completion, so the group shares approximate it.

Run: ``python docs/experiments/equal/drift.py [FOLDER] [GAP]`` (the folder holding
``groups.csv`` and ``external.csv``, this one by default; GAP 3).
"""

import csv
import os
import statistics as st
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))


def rows(folder: str, table: str) -> list[dict]:
    with open(os.path.join(folder, f"{table}.csv")) as f:
        return [r for r in csv.DictReader(f) if r["logp"] and not r["config"].startswith("8/0")]


def main() -> None:
    folder = sys.argv[1] if len(sys.argv) > 1 else HERE
    gap = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    own: dict[tuple, list[float]] = defaultdict(list)
    for r in rows(folder, "groups"):
        own[(r["config"], r["seed"], r["node"], int(r["round"]))].append(float(r["logp"]))
    spans: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for key, means in own.items():
        spans[(key[0], key[1], key[3] // 10)]["own"].append(st.fmean(means))
    for r in rows(folder, "external"):
        key = (r["config"], r["seed"], r["node"], int(r["round"]))
        if key not in own:
            continue
        span = spans[(key[0], key[1], key[3] // 10)]
        span["peer"].append(float(r["logp"]))
        if float(r["logp"]) < st.fmean(own[key]) - gap:
            span["far_right"].append(int(r["right"]) > 0)
    print(f"config seed rounds | own  peers | groups  beyond {gap:g} nats  of them with a right completion")
    for (config, seed, span), v in sorted(spans.items()):
        far, n = v["far_right"], len(v["peer"])
        right = f"{sum(far) / len(far):.0%}" if far else "-"
        print(f"{config} {seed} {10 * span:>3}-{10 * span + 9:<3} | {st.fmean(v['own']):.2f} "
              f"{st.fmean(v['peer']) if n else float('nan'):.2f} | {n:>4}  {len(far) / max(n, 1):>6.0%}  {right:>6}")


if __name__ == "__main__":
    main()
