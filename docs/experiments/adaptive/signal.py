"""Moving levels against pinned, per model and arm: signal rate, own groups with signal an
update (``n_local``), peers' groups an update (``n_external``) and mean reward, as means over
node-rounds of ``rounds.csv``, over the rounds both runs finished in each seed. Pinned: the
mixed run's 8/0 arm (``../mixed`` for seeds 0-2, ``../mixed/ab/current`` for the later seeds)
and 4/4:ab arm (``../mixed/ab/current``); moving: this folder's ``mixed/seed-*``. With
``skip``, moving levels' 4/4:ab arm against the draw passing over far peers besides
(``skip/seed-*``).

Run: ``python docs/experiments/adaptive/signal.py [SEEDS] [skip]`` (SEEDS comma-separated,
``0,1`` by default).
"""

import statistics as st
import sys
from pathlib import Path

from swarmnode.experiment.tables import read_rows

HERE = Path(__file__).resolve().parent
MIXED = HERE.parent / "mixed"
COLUMNS = ("signal_rate", "n_local", "n_external", "reward_mean")


def main() -> None:
    seeds = (sys.argv[1] if len(sys.argv) > 1 else "0,1").split(",")
    moving = [HERE / f"mixed/seed-{s}/rounds.csv" for s in seeds]
    if sys.argv[2:] == ["skip"]:
        sources = {("moving", "4/4:ab"): moving,
                   ("skip", "4/4:ab"): [HERE / f"skip/seed-{s}/rounds.csv" for s in seeds]}
    else:
        sources = {
            ("pinned", "8/0"): [MIXED / "rounds.csv"] + [MIXED / f"ab/current/seed-{s}/rounds.csv" for s in seeds],
            ("pinned", "4/4:ab"): [MIXED / f"ab/current/seed-{s}/rounds.csv" for s in seeds],
            ("moving", "8/0"): moving,
            ("moving", "4/4:ab"): moving,
        }
    runs = list(dict.fromkeys(run for run, _ in sources))
    configs = list(dict.fromkeys(config for _, config in sources))
    rows = {key: [r for path in paths for r in read_rows(path)
                  if r["config"] == key[1] and r["seed"] in seeds] for key, paths in sources.items()}
    last = {s: min(max(int(r["round"]) for r in arm if r["seed"] == s) for arm in rows.values())
            for s in seeds}
    print("rounds per seed: " + ", ".join(f"seed {s}: {last[s] + 1}" for s in seeds))
    print("model | arm | " + " | ".join(f"{c}, {' / '.join(runs)}" for c in COLUMNS))
    for model in ("qwen2.5-coder-0.5b", "embedded"):
        for config in configs:
            cells = []
            for column in COLUMNS:
                means = (st.fmean(float(r[column]) for r in rows[(run, config)]
                                  if r["model"] == model and int(r["round"]) <= last[r["seed"]])
                         for run in runs)
                cells.append(" / ".join(f"{m:.3f}" for m in means))
            print(f"{model} | {config} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
