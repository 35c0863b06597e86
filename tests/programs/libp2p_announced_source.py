"""A pull from a source a node met only in an announcement, on four real hosts on 127.0.0.1:
prints one JSON object of checks.

Run by tests/test_libp2p_pull.py in a process of its own (py-libp2p cannot share one with
hivemind). A hub, an author, a private node and a puller; the others join through the hub
only, and the peer exchange is off, so the puller has no address of the author. The author
publishes; its announcement reaches the puller in a sample of the hub's, with the author's
address in it, and the puller dials the author by that address to pull the bundle, then
closes that connection (it was opened only for the pull), which gives the author's inbound
slot back. The private node leaves its bundle with the hub, and the puller pulls it there:
the hub, which the puller dialed to join, stays connected.
"""

import asyncio
import json
import random

import trio
from libp2p.peer.id import ID

import swarmnode.swarm.transport.libp2p.transport as libp2p_pull
from swarmnode.swarm.transport.libp2p.streams import dialable
from swarmnode.swarm.transport.libp2p.transport import Libp2pTransport
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
    home = Libp2pTransport(identity_for(4), SW, boot, LISTEN, private=True, fetch_per_round=0)
    puller = Libp2pTransport(identity_for(3), SW, boot, LISTEN)
    got, rejected = [], []
    puller.set_handler(got.append)
    puller.set_reject_handler(lambda peer, reason: rejected.append([peer, reason]))
    for t in (author, home, puller):
        await t.start()
    await wait_until_async(lambda: len(hub.peers()) == 3 and all(hub.identity.peer_id in t.peers()
                                                                 for t in (author, home, puller)),
                           30, "the author, the private node and the puller to join the hub")
    author_id, puller_id = ID.from_base58(author.identity.peer_id), ID.from_base58(puller.identity.peer_id)

    async def puller_knows_author() -> list[str]:
        return dialable(puller._host, author_id)

    async def puller_connected_to_author() -> bool:
        return author_id in puller._host.get_connected_peers()

    async def author_lets_puller_go() -> tuple[bool, int]:
        """Whether the author's host dropped the puller (within 5 s), and its inbound slots taken then."""
        host = author._host
        with trio.move_on_after(5):
            while puller_id in host.get_connected_peers():
                await trio.sleep(0.05)
        return puller_id in host.get_connected_peers(), host.get_network()._inbound_limiter.borrowed_tokens

    out["address known before"] = await puller._bridge.run(puller_knows_author)
    out["connected before"] = await puller._bridge.run(puller_connected_to_author)
    bundle = make_bundle(author.identity, SW, 1, 4000, random.Random(0))
    await author.publish(1, bundle)
    await wait_until_async(lambda: bundle in got, 60, "the puller to pull the author's bundle")
    detail = puller._pull.plan.detail(author.identity.peer_id)
    out["announced"] = list(detail.addresses_of(author.identity.peer_id))
    out["author listens"] = author.addresses()
    out["connected after"] = await puller._bridge.run(puller_connected_to_author)
    out["author still connected"], out["author's inbound slots taken"] = await author._bridge.run(author_lets_puller_go)
    held = make_bundle(home.identity, SW, 1, 4000, random.Random(1))
    await home.publish(1, held)
    await wait_until_async(lambda: held in got, 60, "the puller to pull the private node's bundle at the hub")
    out["held by"] = list(puller._pull.plan.detail(home.identity.peer_id).holders)
    out["hub"] = hub.identity.peer_id
    out["hub connected after"] = hub.identity.peer_id in [str(p) for p in puller._host.get_connected_peers()]
    out["rejected"] = rejected
    for t in (puller, home, author, hub):
        await t.stop()
    print(json.dumps(out))


asyncio.run(main())
