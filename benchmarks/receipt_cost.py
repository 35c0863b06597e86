"""What receipts cost beside the bundle they ride in: signing an update's receipts, checking
one, and the bytes they add, each against checking the bundle itself. Usage::

    PYTHONPATH=. python benchmarks/receipt_cost.py [--repeats 200]

An update of 8 external groups from 3 authors (one receipt each), in a bundle of 8 groups of
8 completions of 200 characters of random words. Times are medians of alternated batches (a shared machine
slows both alike), printed with their ratio to one bundle check.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import string
import time

from swarmnode.records import Group, Question
from swarmnode.swarm import receipt
from swarmnode.swarm.bundle import BundleVerifier, encode_bundle
from swarmnode.swarm.identity import Identity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    trainer = Identity.from_seed(b"T" * 32)
    authors = [Identity.from_seed(bytes([i]) * 32).peer_id for i in range(1, 4)]
    trained = [Group(Question("chain_sum", f"What is {i} + 2?", str(i + 2), {}), ["x" * 200] * 8, [1.0] * 4 + [0.0] * 4,
                     source=authors[i % 3], origin=(i, hashlib.sha256(bytes([i])).hexdigest())) for i in range(8)]
    rng = random.Random(0)  # text that compresses about as model output does, not as a repeated letter
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(500)]
    own = [Group(Question("chain_sum", f"What is {i} + 3?", str(i + 3), {}),
                 [" ".join(rng.choices(words, k=35))[:200] for _ in range(8)], [0.5] * 8) for i in range(8)]
    bundle = encode_bundle(trainer, swarm="s", round_no=1, model="m", groups=own)
    receipts = receipt.make_receipts(trainer, swarm="s", round_no=1, groups=trained, created=time.time())
    wire = receipt.attach(bundle, receipts)
    timings: dict[str, list[float]] = {"bundle check": [], "sign an update's receipts": [], "check one receipt": []}
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(args.repeats):
            BundleVerifier(swarm="s", own_peer_id="x").check(bundle)
        timings["bundle check"].append((time.perf_counter() - t) / args.repeats)
        t = time.perf_counter()
        for _ in range(args.repeats):
            receipt.make_receipts(trainer, swarm="s", round_no=1, groups=trained, created=time.time())
        timings["sign an update's receipts"].append((time.perf_counter() - t) / args.repeats)
        t = time.perf_counter()
        for _ in range(args.repeats):
            receipt.verify(receipts[0], sender=trainer.peer_id, swarm="s", now=time.time())
        timings["check one receipt"].append((time.perf_counter() - t) / args.repeats)
    base = statistics.median(timings["bundle check"])
    for name, values in timings.items():
        print(f"{name:<28} {statistics.median(values) * 1e6:8.0f} us  {statistics.median(values) / base:5.2f}x")
    print(f"bundle {len(bundle)} bytes, with {len(receipts)} receipts {len(wire)} bytes (+{len(wire) - len(bundle)})")


if __name__ == "__main__":
    main()
