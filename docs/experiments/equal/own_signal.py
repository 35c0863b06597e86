"""How a node's own groups lose their signal as it trains, per config and seed, by ten-round span:
how many of its own groups a round had a spread of rewards (``n_local`` in ``rounds.csv``, the
ones that entered its update), the share of its rounds with none, and the share with no update
at all (no own group and no peer's). Then what its own groups were, over all seeds: with a
spread, every completion right, every completion scored 0, or every completion the same partial
score (the last three carry no advantage and are dropped).

Run: ``python docs/experiments/equal/own_signal.py [FOLDER]`` (the folder holding ``rounds.csv``
and ``groups.csv``, this one by default).
"""

import statistics as st
import sys
from collections import Counter, defaultdict
from pathlib import Path

from swarmnode.experiment.tables import read_rows

HERE = Path(__file__).resolve().parent
SPAN = 10


def kind(group: dict) -> str:
    if group["signal"] == "1":
        return "spread"
    if int(group["right"]) == int(group["responses"]):
        return "all right"
    return "all 0" if float(group["reward_mean"]) == 0 else "same partial"


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    spans: dict[tuple, list[dict]] = defaultdict(list)
    for r in read_rows(folder / "rounds.csv"):
        spans[(r["config"], r["seed"], int(r["round"]) // SPAN)].append(r)
    print(f"own groups with signal a round / rounds with none / rounds with no update, by {SPAN}-round span")
    for config, seed in sorted({key[:2] for key in spans}):
        cells = []
        for span in sorted(s for c, sd, s in spans if (c, sd) == (config, seed)):
            rows = spans[(config, seed, span)]
            local = [int(r["n_local"]) for r in rows]
            idle = [int(r["n_local"]) + int(r["n_external"]) == 0 for r in rows]
            cells.append(f"{span * SPAN}: {st.fmean(local):.2f}/{st.fmean(n == 0 for n in local):.0%}"
                         f"/{st.fmean(idle):.0%}")
        print(f"{config} seed {seed}  " + "  ".join(cells))

    kinds: dict[tuple, Counter] = defaultdict(Counter)
    for g in read_rows(folder / "groups.csv"):
        kinds[(g["config"], int(g["round"]) // SPAN)][kind(g)] += 1
    names = ("spread", "all right", "all 0", "same partial")
    print(f"\nown groups by kind, all seeds: {' / '.join(names)}")
    for config, span in sorted(kinds):
        counts = kinds[(config, span)]
        total = sum(counts.values())
        print(f"{config} rounds {span * SPAN}-{span * SPAN + SPAN - 1}  "
              + " / ".join(f"{counts[n] / total:.2f}" for n in names))


if __name__ == "__main__":
    main()
