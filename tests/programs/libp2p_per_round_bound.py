"""The libp2p transport's per-round pull bound with the network stubbed: prints one JSON object.

Run by tests/test_libp2p_pull.py in a process of its own (py-libp2p cannot share one with
hivemind). Three established peers and fifty fresh keys announce every round; nobody serves
anything. For each of five rounds it reports how many pulls were made, how many went to the
established peers and to the fresh keys, and how many repeated; then what the transport
rejected and how the bundle request parser reads a good and four bad requests.
"""

import asyncio
import json
import time
from collections import Counter

from swarmnode.swarm.bundle import canonical_json
from swarmnode.swarm.transport.libp2p.announce import Announcement
from swarmnode.swarm.transport.libp2p.holding import Pulled, parse_request
from swarmnode.swarm.transport.libp2p.transport import Libp2pTransport
from swarmnode.swarm.transport.pull import FETCH_PER_ROUND
from transport_node import identity_for

HONEST = [identity_for(100 + i).peer_id for i in range(3)]
SYBILS = [identity_for(200 + i).peer_id for i in range(50)]


async def main() -> None:
    t = Libp2pTransport(identity_for(0), "sw")
    t.set_established(lambda p: p in HONEST)
    rejected: Counter[str] = Counter()
    t.set_reject_handler(lambda author, reason: rejected.update([reason]))
    asked: list[list[str]] = []

    async def fake_fetch(wanted):  # the network: nobody serves anything
        asked.append([author for author, _ in wanted])
        return [Pulled(None) for _ in wanted]

    t._fetch = fake_fetch
    per_round = []
    for round_no in range(5):
        t._heard([Announcement(peer, "sw", round_no, 1000, "00" * 32, (peer,)) for peer in HONEST + SYBILS])
        before = len(asked)
        for _ in range(4):  # several pull-loop turns in one round of this node
            await t._pull_once()
        pulled = [p for batch in asked[before:] for p in batch]
        per_round.append({"total": len(pulled), "honest": len(set(pulled) & set(HONEST)),
                          "sybils": len(set(pulled) & set(SYBILS)), "repeats": len(pulled) - len(set(pulled))})
        t._pull.next_round(time.monotonic())  # what _publish does after announcing
    alice = HONEST[0]
    requests = [parse_request(r) for r in (canonical_json({"author": alice, "round": 2}), b"{}",
                                           canonical_json({"author": "x", "round": 2}),
                                           canonical_json({"author": alice, "round": -2}), b"[" * 600)]
    print(json.dumps({"k": FETCH_PER_ROUND, "per_round": per_round, "rejected": dict(rejected),
                      "pulled": sum(len(b) for b in asked), "requests": requests, "alice": alice}))


asyncio.run(main())
