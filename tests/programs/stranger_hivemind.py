"""A stranger with many free keys against one hivemind peer: a stock ``hivemind.DHT`` client
(its own process) that stores valid layout 2 bundle records on ``--target`` with ``call_store``.

For ``tests/test_strangers.py`` and ``benchmarks/strangers.py`` (through ``tests/strangerlab.py``).
Keys and bundles come from :mod:`stranger_keys` (written from ``docs/protocol.md``, no
swarmnode code); the records go
under each key's own bundle key ``<swarm>/v2/bundle/<PeerID>/<round>``, subkey the PeerID,
expiring at the bundle's signed ``created`` + 300 s, so every one of them is valid and only
a byte budget can stop them. For each round 0..``--rounds``-1, every key stores one bundle
(``--groups`` x ``--responses`` random responses of ``--chars`` characters: about 116 KB on
the wire by default), ``--concurrency`` calls at a time. With ``--as-nodes``, each key first
pings the target as a DHT server of its own (a node id of its own, as a stranger running one
hivemind DHT per key would), so the target takes every key for a new neighbour::

    python tests/programs/stranger_hivemind.py --target MADDR --swarm S --keys 120 --rounds 6

Prints JSON lines: ``{"event": "ready"}`` once joined, ``{"event": "progress", ...}`` after
every ``--report`` records and ``{"event": "done", ...}`` at the end (records sent, stored,
refused, unanswered, wire bytes, seconds), then waits until stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import hivemind
from hivemind.dht.routing import DHTID
from hivemind.p2p import PeerID
from hivemind.proto import dht_pb2
from hivemind.utils import MSGPackSerializer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for its shared modules

from stranger_keys import Key, add_stranger_options, bundle  # noqa: E402

BUNDLE_TTL = 300.0


async def _store_round(_dht: Any, node: Any, *, target: str, swarm: str, label: str, keys: range, round_no: int,
                       shape: dict[str, int], concurrency: int, as_nodes: bool) -> dict[str, int]:
    """Every key of ``keys`` stores its bundle of ``round_no`` on ``target``; runs in the DHT process
    (hivemind's command pipe cannot carry the bundles)."""
    peer = PeerID.from_base58(target)
    counts = {"sent": 0, "stored": 0, "refused": 0, "unanswered": 0, "bytes": 0}
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        key = Key.numbered(label, i)
        wire, created = bundle(key, swarm, round_no, **shape)
        value = MSGPackSerializer.dumps(wire)
        async with gate:
            if as_nodes and round_no == 0:
                node_id = DHTID.generate(source=key.peer_id).to_bytes()
                hello = dht_pb2.PingRequest(peer=dht_pb2.NodeInfo(node_id=node_id))
                await node.protocol.get_stub(peer).rpc_ping(hello, timeout=30)
            record_key = DHTID.generate(source=f"{swarm}/v2/bundle/{key.peer_id}/{round_no}")
            ok = await node.protocol.call_store(peer, [record_key], [value], [created + BUNDLE_TTL],
                                                subkeys=[key.peer_id])
        counts["sent"] += 1
        counts["bytes"] += len(value)
        counts["unanswered" if ok is None else "stored" if ok[0] else "refused"] += 1

    await asyncio.gather(*(one(i) for i in keys))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser()
    add_stranger_options(parser)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--as-nodes", action="store_true", help="each key first joins the target as a DHT node")
    parser.add_argument("--report", type=int, default=240, help="records between progress lines")
    parser.add_argument("--label", default="stranger", help="names the keys (the same label makes the same keys)")
    args = parser.parse_args()

    dht = hivemind.DHT(initial_peers=[args.target], client_mode=True, start=True,
                       host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    print(json.dumps({"event": "ready"}), flush=True)
    target = args.target.rsplit("/p2p/", 1)[1]
    shape = {"groups": args.groups, "responses": args.responses, "chars": args.chars}
    total = {"sent": 0, "stored": 0, "refused": 0, "unanswered": 0, "bytes": 0}
    t0 = time.monotonic()
    step = max(1, min(args.report, args.keys))
    for round_no in range(args.rounds):
        for first in range(0, args.keys, step):
            counts = dht.run_coroutine(partial(_store_round, target=target, swarm=args.swarm, label=args.label,
                                               keys=range(first, min(first + step, args.keys)), round_no=round_no,
                                               shape=shape, concurrency=args.concurrency, as_nodes=args.as_nodes))
            for name, n in counts.items():
                total[name] += n
            print(json.dumps({"event": "progress", **total, "seconds": time.monotonic() - t0}), flush=True)
    print(json.dumps({"event": "done", **total, "seconds": time.monotonic() - t0}), flush=True)
    sys.stdin.read()
    dht.shutdown()


if __name__ == "__main__":
    main()
