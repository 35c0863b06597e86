"""What adaptive difficulty adds to a round, timed in isolation (microseconds per round).

Per round the node draws its questions at per-family levels instead of one config (dormant
families weighed down), copies its levels and feeds them the round's group rewards, computes
the signal rates, and writes the level record into the checkpoint's state.json (which a restart checks). This
times each of those against the same work without levels, on the packaged nine families,
8 questions x 8 rewards. A round of the embedded model takes tens of seconds, so anything
in microseconds is far below the 5% a round may grow. Usage, from the repository root::

    PYTHONPATH=. python benchmarks/curriculum_overhead.py [--repeat 2000]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from swarmnode.node.round import signal_rates
from swarmnode.records import Group
from swarmnode.train.curriculum import Levels, check_record
from swarmnode.train.tasks import TaskSource, load_task_file


def per_call_us(fn, repeat: int) -> float:
    """Median over 5 batches of ``repeat`` calls, in microseconds per call."""
    batches = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        batches.append((time.perf_counter() - start) / repeat * 1e6)
    return statistics.median(batches)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2000)
    args = ap.parse_args()
    families = load_task_file(None)
    source = TaskSource(families, 7)
    levels = Levels(families)
    for lv in range(-2, 3):  # build every dataset the timed draws touch (a one-off per level)
        source.sample(0, 8, {f: max(lv, levels.levels[f]) for f in families})
    levels.observe([(f, [0.0] * 8) for f in ("arc_1d", "bf", "binary_matrix", "decimal_arithmetic")] * 3)  # dormant
    rng = random.Random(0)
    groups = [Group(q, ["x"] * 8, [rng.random() for _ in range(8)]) for q in source.sample(1, 8, levels.levels)]

    def observe() -> None:
        after = levels.copy()
        after.observe((g.question.family, g.rewards) for g in groups)

    def record() -> None:
        check_record(json.loads(json.dumps({"levels": levels.to_json()}))["levels"])

    rows = [
        ("draw 8 questions, task-file configs (before)", per_call_us(lambda: source.sample(3, 8), args.repeat)),
        ("draw 8 questions at levels, dormant weighed down",
         per_call_us(lambda: source.sample(3, 8, levels.levels, levels.focus()), args.repeat)),
        ("dormant families before and after the round", per_call_us(lambda: (levels.dormant(), levels.dormant()),
                                                                    args.repeat)),
        ("copy levels + observe 8 groups", per_call_us(observe, args.repeat)),
        ("signal rates of 8 + 4 groups", per_call_us(lambda: signal_rates(groups, groups[:4]), args.repeat)),
        ("level record: to_json, JSON round trip, check", per_call_us(record, args.repeat)),
    ]
    for name, us in rows:
        print(f"{name:<48} {us:9.1f} us")
    added = rows[1][1] - rows[0][1] + sum(us for _, us in rows[2:])
    print(f"{'added per round':<48} {added:9.1f} us")


if __name__ == "__main__":
    main()
