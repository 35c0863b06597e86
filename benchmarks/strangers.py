"""A stranger with many free keys against a relay and a training node: memory and honest exchange.

For each target (``swarmnode relay``, and ``swarmnode start`` on the tests' tiny model), on
127.0.0.1: two honest private nodes exchange a bundle every ``--period`` seconds through the
target only (``tests/strangerlab.py``); then ``tests/programs/stranger_<transport>.py`` (keys and
records of its own, made from ``docs/protocol.md``) sends valid records from ``--keys``
keys for ``--rounds`` rounds each (hivemind: ``call_store`` of 116 KB bundles under each
key's own layout 2 bundle key; libp2p: a host per key pushing announcements and holds). It
prints, per process of the target (relay or node, the node's DHT process, p2pd), RSS at the
start (after the honest pair's warm-up), at its peak and at the end (``--after`` seconds
after the flood), what the stranger got stored, the target's own counters from
``/metrics``, and how many of the honest bundles published during and after the flood the
honest reader (and a node target itself) got within one period. Usage, from the repository root::

    python benchmarks/strangers.py [--transport hivemind] [--targets relay node] [--keys 1200] [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from nodeproc import free_port  # noqa: E402
from strangerlab import HonestPair, Memory, Stranger, Target, refusal_counts  # noqa: E402
from tinymodel import build_tiny_model  # noqa: E402


class AcceptedWatch:
    """When a node target first accepted each round of ``peer_id`` (polls its ``/v1/peers``)."""

    def __init__(self, target: Target, peer_id: str):
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(target, peer_id), daemon=True)
        self._thread.start()

    def _run(self, target: Target, peer_id: str) -> None:
        while not self._stop.wait(0.5):
            try:
                newest = target.accepted_round(peer_id)
            except OSError:
                continue
            if newest is not None:
                for r in range(newest + 1):
                    self.seen.setdefault(r, time.time())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _within(latencies: dict[int, float | None], period: float) -> str:
    if not latencies:
        return "none published"
    ok = sum(1 for s in latencies.values() if s is not None and s <= period)
    worst = max((s for s in latencies.values() if s is not None), default=None)
    return f"{ok}/{len(latencies)} within {period:.0f} s (slowest {worst:.1f} s)" if worst is not None else \
        f"0/{len(latencies)}"


def measure(kind: str, args: argparse.Namespace, work: Path, model: Path | None) -> None:
    target = Target(kind, args.transport, work / kind, model, stderr=work / f"{kind}.err",
                    metrics_port=free_port() if kind == "relay" and args.relay_metrics else None)
    pair = stranger = watch = None
    try:
        target.ready()
        pair = HonestPair(args.transport, target.address, args.period, work)
        pair.start()
        watch = AcceptedWatch(target, pair.sender.peer_id) if kind == "node" else None
        time.sleep(3 * args.period)  # warm-up: the honest exchange runs before anything is measured
        memory = Memory(target.processes())
        stranger = Stranger(args.transport, target.address, args.keys, args.rounds, *args.stranger_args,
                            stderr=work / f"stranger-{kind}.err")
        stranger.wait("ready", 180)
        t0 = time.time()
        done = stranger.wait("done", args.timeout)
        t1 = time.time()
        time.sleep(args.after)
        memory.close()
        end = time.time() - args.period - 3  # rounds published after this are not due yet
        counters = refusal_counts(target.metrics())
        print(f"\n### {kind} over {args.transport}: {done['sent']} records from {args.keys} keys "
              f"in {done['seconds']:.0f} s")
        print(f"stranger: {json.dumps({k: v for k, v in done.items() if k != 'event'})}")
        print("| process | RSS start (MB) | peak | end | end - start |")
        print("|---|---|---|---|---|")
        for name in memory.first:
            print(f"| {name} | {memory.first[name]:.0f} | {memory.peak[name]:.0f} | {memory.last[name]:.0f} | "
                  f"{memory.last[name] - memory.first[name]:+.0f} |")
        total = sum(memory.last.values()) - sum(memory.first.values())
        print(f"| all | {sum(memory.first.values()):.0f} | | {sum(memory.last.values()):.0f} | {total:+.0f} |")
        print(f"honest reader, bundles published during the flood: {_within(pair.latencies(t0, t1), args.period)}; "
              f"after it: {_within(pair.latencies(t1, end), args.period)}")
        if watch is not None:
            own = {r: (watch.seen[r] - t if r in watch.seen else None) for r, t in pair.published.items()}
            during = {r: s for r, s in own.items() if t0 <= pair.published[r] < t1}
            after = {r: s for r, s in own.items() if t1 <= pair.published[r] < end}
            print(f"the node itself, accepted: during {_within(during, args.period)}; "
                  f"after {_within(after, args.period)}")
        print(f"target counters: {json.dumps(counters)}", flush=True)
    finally:
        for part in (watch, pair, stranger):
            if part is not None:
                part.close() if hasattr(part, "close") else part.kill()
        target.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=("hivemind", "libp2p"), default="hivemind")
    parser.add_argument("--targets", nargs="+", choices=("relay", "node"), default=["relay", "node"])
    parser.add_argument("--keys", type=int, default=1200)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--period", type=float, default=10.0, help="seconds between the honest sender's bundles")
    parser.add_argument("--after", type=float, default=30.0, help="seconds measured after the flood")
    parser.add_argument("--timeout", type=float, default=1200.0, help="most seconds the flood may take")
    parser.add_argument("--no-relay-metrics", dest="relay_metrics", action="store_false",
                        help="for a relay without --api-port")
    parser.add_argument("stranger_args", nargs="*", help="passed on to the stranger (after --)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="strangers-") as tmp:
        work = Path(tmp)
        model = build_tiny_model(work / "tiny-model") if "node" in args.targets else None
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout
        print(f"commit {commit.strip()}; {args.keys} keys x {args.rounds} rounds over {args.transport}")
        for kind in args.targets:
            measure(kind, args, work, model)


if __name__ == "__main__":
    main()
