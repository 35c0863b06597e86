"""A pull from a source a node met only in an announcement, on three real hosts on 127.0.0.1:
prints one JSON object of checks.

Run by tests/test_libp2p_pull.py in a process of its own (py-libp2p cannot share one with
hivemind). A hub, an author and a puller; the author and the puller join through the hub
only, and the peer exchange is off, so the puller has no address of the author. The author
publishes; its announcement reaches the puller in a sample of the hub's, with the author's
address in it, and the puller dials the author by that address to pull the bundle.
"""

import asyncio
import json
import random

from libp2p.peer.id import ID

import swarmnode.swarm.transport.libp2p_pull as libp2p_pull
from swarmnode.swarm.transport.libp2p_pull import Libp2pTransport
from swarmnode.swarm.transport.libp2p_streams import dialable
from transport_node import identity_for, make_bundle
from waiting import wait_until_async

SW, LISTEN = "announced-source-test", "/ip4/127.0.0.1/tcp/0"
libp2p_pull.EXCHANGE_FIRST = 3600.0  # no peer exchange: the puller meets the author only in its announcement


async def main() -> None:
    out = {}
    hub = Libp2pTransport(identity_for(1), SW, listen=LISTEN, fetch_per_round=0)
    await hub.start()
    boot = hub.addresses()[:1]
    author = Libp2pTransport(identity_for(2), SW, boot, LISTEN, fetch_per_round=0)
    puller = Libp2pTransport(identity_for(3), SW, boot, LISTEN)
    got, rejected = [], []
    puller.set_handler(got.append)
    puller.set_reject_handler(lambda peer, reason: rejected.append([peer, reason]))
    for t in (author, puller):
        await t.start()
    await wait_until_async(lambda: len(hub.peers()) == 2 and hub.identity.peer_id in author.peers()
                           and hub.identity.peer_id in puller.peers(), 30, "the author and the puller to join the hub")
    author_id = ID.from_base58(author.identity.peer_id)

    async def puller_knows_author() -> list[str]:
        return dialable(puller._host, author_id)

    async def puller_connected_to_author() -> bool:
        return author_id in puller._host.get_connected_peers()

    out["address known before"] = await puller._bridge.run(puller_knows_author)
    out["connected before"] = await puller._bridge.run(puller_connected_to_author)
    bundle = make_bundle(author.identity, SW, 1, 4000, random.Random(0))
    await author.publish(1, bundle)
    await wait_until_async(lambda: bundle in got, 60, "the puller to pull the author's bundle")
    detail = puller._pull.plan.detail(author.identity.peer_id)
    out["announced"] = list(detail.addresses_of(author.identity.peer_id))
    out["author listens"] = author.addresses()
    out["connected after"] = await puller._bridge.run(puller_connected_to_author)
    out["rejected"] = rejected
    for t in (puller, author, hub):
        await t.stop()
    print(json.dumps(out))


asyncio.run(main())
