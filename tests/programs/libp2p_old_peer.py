"""A host that speaks gossipsub (as nodes of protocols 1 and 2 do) connects to a libp2p
transport of this version: prints ``{"warnings": [...]}``, the warnings the transport logged.

Run by tests/test_libp2p_pull.py in a process of its own (py-libp2p cannot share one with
hivemind).
"""

import asyncio
import json
import logging
import threading

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11, GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service

from swarmnode.swarm.transport.libp2p.transport import Libp2pTransport
from transport_node import identity_for
from waiting import wait_until_async

# After the first warning, how long a second one is watched for (a duration: "once" has no event).
QUIET_S = 1.0
warnings = []


class Catch(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())


def old_node(address: str, done: threading.Event) -> None:
    async def main():
        host = new_host(key_pair=create_new_key_pair(b"o" * 32))
        router = GossipSub(protocols=[PROTOCOL_ID_V11], degree=1, degree_low=1, degree_high=2)
        pubsub = Pubsub(host, router)
        async with host.run([multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]), background_trio_service(pubsub), \
                background_trio_service(router):
            await pubsub.subscribe("swarmnode/sw/announce/2")
            await host.connect(info_from_p2p_addr(multiaddr.Multiaddr(address)))
            await trio.to_thread.run_sync(done.wait)
        pubsub.seen_messages.stop()
    trio.run(main)


async def main() -> None:
    logging.getLogger("swarmnode.swarm.transport").addHandler(Catch(level=logging.WARNING))
    node = Libp2pTransport(identity_for(1), "sw", listen="/ip4/127.0.0.1/tcp/0")
    await node.start()
    done = threading.Event()
    thread = threading.Thread(target=old_node, args=(node.addresses()[0], done))
    thread.start()
    try:
        await wait_until_async(lambda: warnings, 10, "a warning about the older peer")
        await asyncio.sleep(QUIET_S)
    finally:
        done.set()
        thread.join()
    await node.stop()
    print(json.dumps({"warnings": warnings}))


asyncio.run(main())
