"""A hivemind bootstrap peer caught mid-start: its p2pd accepts connections before its DHT answers.

A node starting (``hivemind.DHT``) brings up p2pd first and registers the DHT protocol a moment
later, longer on a loaded machine; a peer that dials in between gets a connection but no DHT
reply. Run as::

    python tests/halfstarted_peer.py --seed 0 --listen /ip4/127.0.0.1/tcp/PORT --spool DIR

It prints ``{"event": "ready", ...}`` with only p2pd running; the line ``dht`` on stdin then
starts the DHT on that same p2pd, publishes one signed bundle as a swarmnode node does, and
prints ``{"event": "published", "digest": ...}``. It runs until stdin closes. Its key and bundle
are written in DIR (the test's temporary directory: the test kills it, so it cleans nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hivemind.dht.node import DHTNode  # noqa: E402
from hivemind.p2p import P2P  # noqa: E402

from swarmnode.swarm.bundle import open_envelope  # noqa: E402
from swarmnode.swarm.transport.hivemind.dht_process import store_round  # noqa: E402
from swarmnode.swarm.transport.hivemind.records import SwarmRecordValidator  # noqa: E402
from transport_node import SWARM, identity_for, make_bundle  # noqa: E402


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def _serve(seed: int, listen: str, spool: str) -> None:
    identity = identity_for(seed)
    key_file = os.path.join(spool, "identity.key")
    Path(key_file).write_bytes(identity.private_key_protobuf())
    p2p = await P2P.create(host_maddrs=[listen], identity_path=key_file)
    _emit({"event": "ready", "peer_id": identity.peer_id})
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    node = None
    while line := await reader.readline():
        if line.strip() == b"dht" and node is None:
            node = await DHTNode.create(p2p=p2p, record_validator=SwarmRecordValidator(SWARM, identity))
            data = make_bundle(identity, SWARM, 1, 2_000, random.Random(seed))
            path = os.path.join(spool, "bundle")
            Path(path).write_bytes(data)
            await store_round(None, node, swarm=SWARM, peer_id=identity.peer_id, round_no=1, path=path,
                              created=open_envelope(data)[1]["created"])
            _emit({"event": "published", "digest": hashlib.sha256(data).hexdigest()})
    if node is not None:
        await node.shutdown()
    await p2p.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--spool", required=True)
    args = parser.parse_args()
    asyncio.run(_serve(args.seed, args.listen, args.spool))


if __name__ == "__main__":
    main()
