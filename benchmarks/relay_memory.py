"""Peak memory of ``swarmnode relay`` serving network-only nodes, per transport.

Starts the relay on 127.0.0.1, then ``--nodes`` network-only nodes
(``tests/transport_node.py``) that join through it and each publish a signed bundle of
``--size`` bytes every ``--interval`` seconds for ``--rounds`` rounds. Prints, per transport,
the relay's peak RSS (VmHWM) summed over its process and its helper processes (hivemind: the
DHT process and p2pd), their PSS at the end (shared pages counted once), and whether torch
was loaded in the relay. Usage, from the repository root::

    python benchmarks/relay_memory.py [--transports libp2p hivemind] [--nodes 4] [--rounds 4]
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from transport_node import SWARM, ProcNode, descendants, wait_for  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _status_kb(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(transport: str, nodes: int, rounds: int, interval: float, size: int) -> dict:
    with tempfile.TemporaryDirectory() as home:
        relay = subprocess.Popen([sys.executable, "-m", "swarmnode", "relay", "--transport", transport,
                                  "--swarm", SWARM, "--home", home, "--listen", "/ip4/127.0.0.1/tcp/0"],
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                 start_new_session=True)
        peers: list[ProcNode] = []
        try:
            address = ""
            while not address:
                line = relay.stdout.readline()
                if not line:
                    raise SystemExit(f"the {transport} relay exited before printing its address")
                found = re.match(r"\s+--bootstrap (\S+)$", line)
                address = found.group(1) if found else ""
            peers = [ProcNode(transport, seed, bootstrap=[address]) for seed in range(nodes)]
            for peer in peers:
                peer.ready(90)
            relay_id = address.rsplit("/p2p/", 1)[1]
            for peer in peers:
                wait_for(lambda: relay_id in peer.peers(), 60, "the nodes to join the relay")
            pids: set[int] = set()
            for r in range(rounds):
                for peer in peers:
                    peer.send(cmd="publish", round=r + 1, size=size)
                for peer in peers:
                    peer.wait_event("published", 60)
                time.sleep(interval)
                pids |= {relay.pid} | descendants(relay.pid)
            torch = "/torch/" in Path(f"/proc/{relay.pid}/maps").read_text()
            return {"transport": transport, "peak_rss_mb": sum(_status_kb(p, "VmHWM") for p in pids) / 1024,
                    "pss_mb": sum(_pss_kb(p) for p in pids) / 1024, "processes": len(pids), "torch": torch,
                    "received": min(len(p.messages()) for p in peers)}
        finally:
            for peer in peers:
                peer.kill()
            if relay.poll() is None:
                relay.send_signal(signal.SIGTERM)
                relay.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transports", nargs="+", default=["libp2p", "hivemind"])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--size", type=int, default=8_000)
    args = parser.parse_args()
    print("| transport | relay processes | peak RSS, summed (MB) | PSS at end (MB) | torch loaded | "
          "fewest bundles a node received |")
    print("|---|---|---|---|---|---|")
    for transport in args.transports:
        m = measure(transport, args.nodes, args.rounds, args.interval, args.size)
        print(f"| {m['transport']} | {m['processes']} | {m['peak_rss_mb']:.0f} | {m['pss_mb']:.0f} | "
              f"{'yes' if m['torch'] else 'no'} | {m['received']} |", flush=True)


if __name__ == "__main__":
    main()
