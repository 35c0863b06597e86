"""A libp2p host that ends on an error is started again: prints one JSON object of checks.

Run by tests/test_libp2p_pull.py in a process of its own (py-libp2p cannot share one with
hivemind). A public node and a node that joined it; an error planted in the joined node's host
ends that host (as py-libp2p's own errors did); the node's transport starts a new host, joins
again, and pulls the public node's next bundle.
"""

import asyncio
import json
import random

from swarmnode.swarm.transport.libp2p.transport import Libp2pTransport
from transport_node import identity_for, make_bundle
from waiting import wait_until_async

SW = "revival-test"
LISTEN = "/ip4/127.0.0.1/tcp/0"


async def planted_failure() -> None:
    raise RuntimeError("planted host failure")


async def main() -> None:
    out = {}
    public = Libp2pTransport(identity_for(1), SW, listen=LISTEN)
    await public.start()
    node = Libp2pTransport(identity_for(2), SW, public.addresses()[:1], LISTEN)
    got = []
    node.set_handler(got.append)
    await node.start()
    await wait_until_async(lambda: public.identity.peer_id in node.peers(), 30, "the node to join")
    first_host = id(node._host)  # not the host itself: a reference would keep its sockets open
    node._bridge.start_soon(planted_failure)
    await wait_until_async(lambda: not node._bridge.running(), 10, "the planted failure to end the host")
    out["host ended"] = True
    try:
        await wait_until_async(lambda: node._bridge.running() and id(node._host) != first_host, 30,
                               "a new host")
        out["new host"] = True
        await wait_until_async(lambda: public.identity.peer_id in node.peers(), 30, "the node to join again")
        out["joined again"] = True
        bundle = make_bundle(public.identity, SW, 1, 4000, random.Random(0))
        await public.publish(1, bundle)
        await wait_until_async(lambda: bundle in got, 30, "the node to pull the public node's bundle")
        out["pulled after"] = True
    except Exception as exc:  # the checks so far, and where it stopped
        out["stopped at"] = str(exc).splitlines()[0]
    for t in (node, public):
        await t.stop()
    print(json.dumps(out))


asyncio.run(main())
