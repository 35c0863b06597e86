"""What sealing costs a private swarm: sealing and opening one bundle (AES-256-GCM,
``swarmnode.swarm.sealing``) against the receiver's check of the same bundle (its envelope
opened and its payload parsed, as every node does for every bundle, public or private).
Usage::

    PYTHONPATH=.:tests python benchmarks/sealing_cost.py [--size 116000] [--batches 7]

Times are per bundle, medians of alternated batches (a shared machine slows both alike),
printed with their ratio.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from swarmnode.swarm.bundle import open_envelope, parse_payload
from swarmnode.swarm.sealing import BUNDLE, Sealer
from transport_node import identity_for, make_bundle


def per_call(fn: Callable[[], object], repeats: int) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=116_000, help="about this many wire bytes a bundle")
    parser.add_argument("--batches", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=50, help="calls a batch")
    args = parser.parse_args()
    sealer = Sealer.for_swarm("bench", bytes(range(32)))
    bundle = make_bundle(identity_for(1), "bench", 7, args.size, random.Random(0))

    def seal_and_open() -> bytes:
        return sealer.open(BUNDLE, sealer.seal(BUNDLE, bundle, b"key"), len(bundle), b"key")

    def check() -> object:
        _sender, payload = open_envelope(bundle)
        return parse_payload(payload, "")

    sealing, checking = [], []
    for _ in range(args.batches):
        sealing.append(per_call(seal_and_open, args.repeats))
        checking.append(per_call(check, args.repeats))
    ratios = sorted(s / c for s, c in zip(sealing, checking))
    print(f"bundle of {len(bundle)} bytes: seal + open {statistics.median(sealing) * 1e3:.3f} ms, "
          f"receiver check {statistics.median(checking) * 1e3:.3f} ms; ratio per batch "
          f"{', '.join(f'{r:.4f}' for r in ratios)} (median {statistics.median(ratios):.4f})")


if __name__ == "__main__":
    main()
