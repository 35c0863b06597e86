"""Bundles per second for encode+sign and for verify+decode, on one CPU thread.

A realistic bundle: 4 question groups x 8 responses of about 200 characters (the size a
laptop node shares each round). Usage, from the repository root (or with swarmnode installed)::

    PYTHONPATH=. python benchmarks/bundle_throughput.py [--seconds 3] [--groups 4] [--responses 8] [--chars 200]
"""

from __future__ import annotations

import argparse
import random
import string
import time

from swarmnode.records import Group, Question
from swarmnode.swarm.bundle import BundleVerifier, encode_bundle
from swarmnode.swarm.identity import Identity


def realistic_groups(n_groups: int, n_responses: int, chars: int, rng: random.Random) -> list[Group]:
    """Groups whose text compresses like model output (words, digits, tags), not like zeros."""
    words = ["the", "answer", "is", "so", "we", "add", "carry", "then", "sum", "step", "first", "result"]

    def response() -> str:
        text = []
        while sum(len(w) + 1 for w in text) < chars:
            text.append(rng.choice(words) if rng.random() < 0.7 else str(rng.randrange(1000)))
        return "<answer>" + " ".join(text) + "</answer>"

    return [Group(Question("chain_sum", "What is " + " + ".join(rng.choices(string.digits, k=4)) + "?",
                           str(rng.randrange(40)), {"num_terms": 4, "num_digits": 1, "source_index": i}),
                  [response() for _ in range(n_responses)], [rng.random() for _ in range(n_responses)])
            for i in range(n_groups)]


def rate(fn, seconds: float) -> float:
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        fn(n)
        n += 1
    return n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="time spent on each measurement")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--responses", type=int, default=8)
    ap.add_argument("--chars", type=int, default=200)
    args = ap.parse_args()

    sender, receiver = Identity.from_seed(b"s" * 32), Identity.from_seed(b"r" * 32)
    groups = realistic_groups(args.groups, args.responses, args.chars, random.Random(0))

    def encode(i: int) -> bytes:
        return encode_bundle(sender, swarm="bench", round_no=i, model="bench", groups=groups)

    enc_rate = rate(encode, args.seconds)
    # Distinct bundles (one per round) so the replay memory never short-cuts a check; a fresh
    # verifier each time the list comes round again, for the same reason.
    encoded = [encode(r) for r in range(500)]
    verifiers: list[BundleVerifier] = []

    def verify(i: int) -> None:
        if i % len(encoded) == 0:
            verifiers.append(BundleVerifier(swarm="bench", own_peer_id=receiver.peer_id))
        r = i % len(encoded)
        verdict = verifiers[-1].check(encoded[r], r)
        assert verdict.accepted and len(verdict.bundle.groups) == args.groups, verdict.reason

    dec_rate = rate(verify, args.seconds)
    sample = encoded[0]
    print(f"bundle: {args.groups} groups x {args.responses} responses x ~{args.chars} chars, "
          f"{len(sample)} bytes on the wire")
    print(f"encode+sign:   {enc_rate:8.0f} bundles/s")
    print(f"verify+decode: {dec_rate:8.0f} bundles/s")


if __name__ == "__main__":
    main()
