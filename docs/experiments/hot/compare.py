"""Two branches of one run from a common checkpoint, arm by arm, over the rounds from FIRST on
that both have in every seed: cumulative reward (a node's, mean over nodes) hot against base,
sharing against alone within each branch, the yardstick after the last round both measured
(and hot minus base, per seed), and the own groups with signal a round and the rounds with no
update. Intervals are 95 % t intervals across seeds.

Run: ``python docs/experiments/hot/compare.py BASE HOT [FIRST]`` (folders holding each branch's
joined tables, as ``docs/experiments/combine.sh`` writes them; FIRST 100).
"""

import statistics as st
import sys
from collections import defaultdict
from pathlib import Path

from swarmnode.experiment.report import per_seed_text
from swarmnode.experiment.tables import read_rows

ARMS = ("8/0", "4/4:ab")


def by_seed(rows: list[dict], first: int) -> dict[tuple, dict[int, list[dict]]]:
    """(arm, seed) -> round -> that round's rows, for rounds from ``first`` on."""
    out: dict[tuple, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if int(r["round"]) >= first and r["config"] in ARMS:
            out[(r["config"], r["seed"])][int(r["round"])].append(r)
    return out


def main() -> None:
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    folders = {"base": Path(sys.argv[1]), "hot": Path(sys.argv[2])}
    first = int(sys.argv[3]) if len(sys.argv) == 4 else 100
    rounds = {name: by_seed(read_rows(folder / "rounds.csv"), first) for name, folder in folders.items()}
    seeds = sorted({seed for table in rounds.values() for _, seed in table})
    last = {seed: min(max(table[(arm, seed)]) for table in rounds.values() for arm in ARMS) for seed in seeds}
    print(f"rounds {first} to {sorted(set(last.values()))} per seed, seeds {', '.join(seeds)}")

    cumulative: dict[tuple, list[float]] = defaultdict(list)
    for name, table in rounds.items():
        for arm in ARMS:
            for seed in seeds:
                rows = [r for rnd in range(first, last[seed] + 1) for r in table[(arm, seed)][rnd]]
                nodes = len({r["node"] for r in rows})
                cumulative[(name, arm)].append(sum(float(r["reward_mean"]) for r in rows) / nodes)
                cumulative[(name, arm, "local")].append(st.fmean(int(r["n_local"]) for r in rows))
                cumulative[(name, arm, "idle")].append(st.fmean(int(r["n_local"]) + int(r["n_external"]) == 0
                                                               for r in rows))
    for arm in ARMS:
        for name in folders:
            print(f"{name} {arm}: cumulative reward a node {per_seed_text(cumulative[(name, arm)])}; own groups "
                  f"with signal a round {per_seed_text(cumulative[(name, arm, 'local')], 2)}; rounds with no "
                  f"update {per_seed_text(cumulative[(name, arm, 'idle')], 2)}")
        ratios = [h / b for h, b in zip(cumulative[("hot", arm)], cumulative[("base", arm)])]
        print(f"{arm} cumulative reward hot / base: {per_seed_text(ratios, 2)}")
    for name in folders:
        ratios = [s / a for s, a in zip(cumulative[(name, ARMS[1])], cumulative[(name, ARMS[0])])]
        print(f"{name} cumulative reward {ARMS[1]} / {ARMS[0]}: {per_seed_text(ratios, 2)}")

    scores: dict[tuple, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for name, folder in folders.items():
        for r in read_rows(folder / "yardstick.csv"):
            if r["config"] in ARMS and int(r["round"]) > first:
                scores[(name, r["config"], r["seed"])][int(r["round"])].append(float(r["score"]))
    for arm in ARMS:
        common = [set(scores[(name, arm, seed)]) for name in folders for seed in seeds]
        done = max(set.intersection(*common), default=None) if common else None
        if done is None:
            print(f"{arm}: no yardstick after round {first} in both branches and every seed yet")
            continue
        per = {name: [st.fmean(scores[(name, arm, seed)][done]) for seed in seeds] for name in folders}
        for name in folders:
            print(f"{name} {arm} yardstick after round {done}: {per_seed_text(per[name])}")
        print(f"{arm} yardstick hot minus base: {per_seed_text([h - b for h, b in zip(per['hot'], per['base'])])}")


if __name__ == "__main__":
    main()
