"""How often a sharing node trained on a peer's group it had drawn before, by ten-round span:
the peers' groups drawn a node-round (of the node-rounds that drew any), the share of them drawn
already in an earlier round (the same sender and question: a group stays in the pool until
evicted, and the draw may pick it again), how many rounds after the first draw, and the mean
log-prob a token of fresh and of repeated groups under the receiver's policy before its update,
with the share of each holding a right completion. Then by seed: the share of repeats, and the
distinct groups with a right completion drawn on each family. Last, by model: the draws beyond
the update's bound on a peer's distance (more than 3 nats a token below the mean of the node's
own trained groups that round, from ``groups.csv``: the update's bar, taken per group instead of
per completion), and of the repeats of a group beyond it at its first draw, how many still were.

Run: ``python docs/experiments/equal/repeats.py [--before N] [FOLDER ...]`` (folders holding
``external.csv``, this one by default; several are read as one run, e.g. a run's seed folders;
``--before N`` reads only the draws of rounds before N, to hold a partial run against a whole one).
"""

import statistics as st
import sys
from collections import defaultdict
from pathlib import Path

from swarmnode.experiment.tables import read_rows

HERE = Path(__file__).resolve().parent
SPAN = 10
GAP = 3.0  # the default peer_logprob_gap


def mean(values: list[float]) -> str:
    return f"{st.fmean(values):.2f}" if values else "-"


def main() -> None:
    args = sys.argv[1:]
    before = int(args.pop(args.index("--before") + 1)) if "--before" in args else None
    args = [a for a in args if a != "--before"]
    folders = [Path(a) for a in args] or [HERE]
    draws = sorted((r for f in folders for r in read_rows(f / "external.csv")
                    if before is None or int(r["round"]) < before),
                   key=lambda r: (r["config"], r["seed"], r["node"], int(r["round"])))
    first: dict[tuple, int] = {}
    by_seed: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    spans: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    node_rounds: dict[tuple, set] = defaultdict(set)
    for r in draws:
        key, round_no = (r["config"], r["seed"], r["node"], r["sender"], r["question"]), int(r["round"])
        span = spans[(r["config"], r["model"], round_no // SPAN)]
        node_rounds[(r["config"], r["model"], round_no // SPAN)].add((r["seed"], r["node"], round_no))
        kind = "repeat" if key in first else "fresh"
        seed = by_seed[(r["config"], r["model"], r["seed"])]
        seed["repeat"].append(kind == "repeat")
        if kind == "fresh" and int(r["right"]) > 0:
            seed["right " + r["family"]].append(key)
        if kind == "repeat":
            span["age"].append(round_no - first[key])
        else:
            first[key] = round_no
        span[kind].append(float(r["logp"]) if r["logp"] else None)
        span[kind + "_right"].append(int(r["right"]) > 0)
    print("config model rounds | drawn a node-round that drew any  repeats  their age | log-prob fresh / repeated"
          " | right fresh / repeated")
    for (config, model, span), v in sorted(spans.items()):
        n = len(v["fresh"]) + len(v["repeat"])
        logp = {k: [x for x in v[k] if x is not None] for k in ("fresh", "repeat")}
        right = {k: f"{st.fmean(v[k + '_right']):.0%}" if v[k + "_right"] else "-" for k in ("fresh", "repeat")}
        print(f"{config} {model} {SPAN * span:>3}-{SPAN * span + SPAN - 1:<3} | "
              f"{n / len(node_rounds[(config, model, span)]):.2f}  {len(v['repeat']) / n:>6.0%}  {mean(v['age']):>5} | "
              f"{mean(logp['fresh'])} / {mean(logp['repeat'])} | {right['fresh']} / {right['repeat']}")

    far_counts(folders, draws)
    print("\nconfig model seed | repeats | distinct groups with a right completion drawn, by family")
    for (config, model, seed), v in sorted(by_seed.items()):
        right = "  ".join(f"{k[6:]} {len(v[k])}" for k in sorted(v) if k.startswith("right "))
        print(f"{config} {model} {seed} | {st.fmean(v['repeat']):.0%} | {right}")


def far_counts(folders: list[Path], draws: list[dict]) -> None:
    """Print, by config and model, the draws beyond the bar and the repeats of far groups."""
    own: dict[tuple, list[float]] = defaultdict(list)
    for f in folders:
        for r in read_rows(f / "groups.csv"):
            if r["logp"] and r["signal"] == "1" and r["trained"] == "1":
                own[(r["config"], r["seed"], r["node"], r["round"])].append(float(r["logp"]))
    bar = {k: st.fmean(v) for k, v in own.items()}
    first_far: dict[tuple, bool] = {}
    counts: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # draws, far, repeats of far, still far
    for r in draws:
        b = bar.get((r["config"], r["seed"], r["node"], r["round"]))
        if b is None or not r["logp"]:
            continue
        far = float(r["logp"]) < b - GAP
        c = counts[(r["config"], r["model"])]
        c[0] += 1
        c[1] += far
        key = (r["config"], r["seed"], r["node"], r["sender"], r["question"])
        if key not in first_far:
            first_far[key] = far
        elif first_far[key]:
            c[2] += 1
            c[3] += far
    print(f"\nconfig model | draws beyond {GAP:g} nats below the own bar | repeats of a group beyond it at its"
          " first draw, still beyond")
    for (config, model), (n, far, again, still) in sorted(counts.items()):
        print(f"{config} {model} | {far} of {n} ({far / n:.0%}) | {again}, {still}")


if __name__ == "__main__":
    main()
