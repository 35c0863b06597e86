"""A libp2p node with six peers answers a seventh's peer exchange ten times: prints one JSON
object (how many peers each answer names, whether it names the asker, how many distinct
peers came first).

Run by tests/test_libp2p_pull.py in a process of its own (py-libp2p cannot share one with
hivemind). In the order its peers connected, every joiner would dial the same first few,
which become hubs (docs/scale.md).
"""

import asyncio
import json

from swarmnode.swarm.address import peer_id_of
from swarmnode.swarm.transport.libp2p.streams import ask_peers
from swarmnode.swarm.transport.libp2p.transport import Libp2pTransport
from transport_node import identity_for
from waiting import wait_until_async


async def main() -> None:
    hub = Libp2pTransport(identity_for(1), "sw", listen="/ip4/127.0.0.1/tcp/0")
    await hub.start()
    others = [Libp2pTransport(identity_for(2 + i), "sw", bootstrap=hub.addresses()[:1], listen="/ip4/127.0.0.1/tcp/0")
              for i in range(7)]
    for t in others:
        await t.start()
    await wait_until_async(lambda: len(hub.peers()) >= 7, 60, "seven peers to join the hub")
    asker = others[-1]
    answers = [[peer_id_of(a) for a in await asker._bridge.run(ask_peers, asker._host, hub._host.get_id())]
               for _ in range(10)]
    print(json.dumps({"peers named": sorted({len(set(a)) for a in answers}),
                      "asker named": any(asker.identity.peer_id in a for a in answers),
                      "first named": len({a[0] for a in answers})}))
    for t in [*others, hub]:
        await t.stop()


asyncio.run(main())
