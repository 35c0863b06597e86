"""What putting a peer's response in its trained form costs beside scoring it.

``Scorer.score`` (the verifier alone) against ``Scorer.rescore`` with the node's token checks
(:mod:`swarmnode.train.answers`), on 64 chain_sum questions x 8 short answers, alternated
``--runs`` times in one process. Prints the per-run time ratio and each one's microseconds a
response.

Usage, from the repository root::

    PYTHONPATH=. python benchmarks/rescore_cost.py [--model-dir DIR] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from transformers import AutoTokenizer

from swarmnode.records import Question
from swarmnode.train.answers import TokenBudget
from swarmnode.train.tasks import Scorer

DEFAULT_MODEL = Path("~/.cache/swarmnode/models/smollm2-135m-instruct-0.1.2").expanduser()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL, help="a model directory with a tokenizer")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    plain = Scorer()
    checked = Scorer(budget=TokenBudget(AutoTokenizer.from_pretrained(str(args.model_dir)), 256, True))
    pairs = [(Question("chain_sum", f"What is {i} + 2?", str(i + 2), {"num_terms": 2, "num_digits": 1}),
              f"<answer>{i + 2 + j % 2}</answer>") for i in range(64) for j in range(8)]
    for q, r in pairs[:8]:  # each verifier's data set is built once, outside the timing
        plain.score(q, r)
        checked.rescore(q, r)
    rows = []
    for _ in range(args.runs):
        t = time.perf_counter()
        for q, r in pairs:
            plain.score(q, r)
        score_s = time.perf_counter() - t
        t = time.perf_counter()
        for q, r in pairs:
            checked.rescore(q, r)
        rescore_s = time.perf_counter() - t
        rows.append((rescore_s / score_s, 1e6 * score_s / len(pairs), 1e6 * rescore_s / len(pairs)))
    for ratio, score_us, rescore_us in rows:
        print(f"rescore/score {ratio:.2f}  score {score_us:.1f} us  rescore {rescore_us:.1f} us a response")
    print(f"median ratio {statistics.median(r for r, _, _ in rows):.2f}")


if __name__ == "__main__":
    main()
