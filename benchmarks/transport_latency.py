"""Delivery latency of a bundle across N loopback nodes, per transport.

Every node of a real transport is its own OS process (``tests/transport_node.py``) on
127.0.0.1; node 0 is the bootstrap peer of the others. Each round, every node publishes one
signed bundle of about ``--size`` bytes (incompressible random text); the latency of a
delivery is the receiver's clock when its handler runs minus the sender's clock just before
``publish`` (one machine, one clock). Usage, from the repository root::

    PYTHONPATH=. python benchmarks/transport_latency.py [--nodes 8] [--rounds 5] [--size 50000]
        [--transports memory hivemind libp2p] [--json results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from memory_transport import MemoryHub  # noqa: E402
from transport_node import MemNode, ProcNode, wait_for  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def start_nodes(transport: str, n: int) -> tuple[list[Any], Any]:
    """Node 0 first, then the others in parallel, all bootstrapping from node 0."""
    if transport == "memory":
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        hub = MemoryHub()
        return [MemNode(loop, hub, seed).ready() for seed in range(n)], loop
    first = ProcNode(transport, 0).ready()
    others = [ProcNode(transport, seed, bootstrap=first.addresses[:1]) for seed in range(1, n)]
    return [first, *(node.ready(120) for node in others)], None


def measure(transport: str, n: int, rounds: int, size: int) -> dict[str, Any]:
    t0 = time.monotonic()
    nodes, loop = start_nodes(transport, n)
    startup_s = time.monotonic() - t0
    try:
        wait_for(lambda: len(nodes[0].peers()) >= n - 1 and all(node.peers() for node in nodes[1:]), 120,
                 "every node to join")
        time.sleep(2.0)  # let meshes and routing tables settle before timing
        published: dict[str, dict] = {}
        for round_no in range(1, rounds + 1):
            for node in nodes:
                node.send(cmd="publish", round=round_no, size=size)
            for node in nodes:
                event = node.wait_event("published", 60)
                published[event["digest"]] = event
            expected = (n - 1) * len(published)
            try:
                wait_for(lambda: sum(len(node.messages()) for node in nodes) >= expected, 60,
                         f"round {round_no}'s deliveries")
            except AssertionError:
                pass  # counted below as missing deliveries
            time.sleep(1.0)
        latencies = [(m["t_recv"] - published[m["digest"]]["t_pub"]) * 1000
                     for node in nodes for m in node.messages() if m["digest"] in published]
        publish_ms = [e["publish_s"] * 1000 for e in published.values()]
        return {"transport": transport, "nodes": n, "rounds": rounds, "bundle_bytes": size,
                "startup_s": round(startup_s, 1), "deliveries": len(latencies),
                "expected": (n - 1) * n * rounds,
                "latency_ms_median": round(statistics.median(latencies), 1),
                "latency_ms_p95": round(percentile(latencies, 95), 1),
                "latency_ms_max": round(max(latencies), 1),
                "publish_call_ms_median": round(statistics.median(publish_ms), 1)}
    finally:
        for node in nodes:
            try:
                node.stop()
            finally:
                node.kill()
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=50_000, help="approximate wire bytes of one bundle")
    parser.add_argument("--transports", nargs="+", default=["memory", "hivemind", "libp2p"],
                        choices=["memory", "hivemind", "libp2p"])
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    results = []
    print(f"{'transport':<10} {'nodes':>5} {'delivered':>11} {'median ms':>10} {'p95 ms':>8} {'max ms':>8} "
          f"{'publish ms':>10} {'startup s':>9}")
    for transport in args.transports:
        r = measure(transport, args.nodes, args.rounds, args.size)
        results.append(r)
        print(f"{r['transport']:<10} {r['nodes']:>5} {r['deliveries']:>5}/{r['expected']:<5} "
              f"{r['latency_ms_median']:>10.1f} {r['latency_ms_p95']:>8.1f} {r['latency_ms_max']:>8.1f} "
              f"{r['publish_call_ms_median']:>10.1f} {r['startup_s']:>9.1f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
