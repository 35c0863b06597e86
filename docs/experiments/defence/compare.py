"""The peer log-prob bound on (gap 3) against off (gap 1000), from the tables beside this script:
cumulative reward per seed over the rounds both finished, the yardstick after the last round,
and how far peers' groups were from the receiver's own (per group: the bound acts per completion).

Run: ``python docs/experiments/defence/compare.py``.
"""

import collections
import csv
import glob
import os
import statistics as st

from swarmnode.experiment.report import per_seed_text

HERE = os.path.dirname(os.path.abspath(__file__))


def load(table: str, gap: int) -> list[dict]:
    rows: list[dict] = []
    for folder in (f"gap-{gap}", *sorted(glob.glob(f"{HERE}/gap-{gap}-s*"))):
        path = os.path.join(HERE, folder, f"{table}.csv")
        if os.path.exists(path):
            with open(path) as f:
                rows += list(csv.DictReader(f))
    return rows


def main() -> None:
    on = {(r["seed"], r["node"], int(r["round"])): r for r in load("rounds", 3)}
    off = {(r["seed"], r["node"], int(r["round"])): r for r in load("rounds", 1000)}
    seeds = sorted({k[0] for k in on} & {k[0] for k in off})
    ratios = []
    for seed in seeds:
        rounds = min(max(k[2] for k in on if k[0] == seed), max(k[2] for k in off if k[0] == seed)) + 1
        keys = [k for k in on if k[0] == seed and k[2] < rounds and k in off]
        cum_on = sum(float(on[k]["reward_mean"]) for k in keys)
        cum_off = sum(float(off[k]["reward_mean"]) for k in keys)
        ratios.append(cum_on / cum_off)
        print(f"seed {seed}: {rounds} rounds, cumulative reward on {cum_on:.3f}, off {cum_off:.3f}, "
              f"on/off {cum_on / cum_off:.3f}")
    print("cumulative reward on/off:", per_seed_text(ratios))

    last = {}
    for gap in (3, 1000):
        scores: dict[str, dict[int, list[float]]] = collections.defaultdict(dict)
        for r in load("yardstick", gap):
            if r["config"] != "base":
                scores[r["seed"]].setdefault(int(r["round"]), []).append(float(r["score"]))
        last[gap] = {seed: st.mean(by_round[max(by_round)]) for seed, by_round in scores.items()}
        print(f"yardstick after the last round, gap {gap}:",
              ", ".join(f"seed {s} {x:.4f}" for s, x in sorted(last[gap].items())))
    print("yardstick on - off:", per_seed_text([last[3][s] - last[1000][s] for s in seeds]))

    for gap in (3, 1000):
        own: dict[tuple, list[float]] = collections.defaultdict(list)
        for r in load("groups", gap):
            if r["logp"]:
                own[(r["seed"], r["node"], r["round"])].append(float(r["logp"]))
        peers = load("external", gap)
        gaps = [float(r["logp"]) - st.mean(own[(r["seed"], r["node"], r["round"])]) for r in peers
                if r["logp"] and own.get((r["seed"], r["node"], r["round"]))]
        rows = load("rounds", gap)
        print(f"gap {gap}: peers' groups trained on {len(peers)}, their mean log-prob a token against the "
              f"receiver's own groups' {st.mean(gaps):+.3f} nats, {sum(g < -3 for g in gaps)} groups more than "
              f"3 below; signal rate {st.mean(float(r['signal_rate']) for r in rows):.4f}, peers' groups a "
              f"round {st.mean(float(r['n_external']) for r in rows):.3f}")


if __name__ == "__main__":
    main()
