"""Holds and digest checks of the libp2p transport on four real hosts on 127.0.0.1: prints one
JSON object of checks.

Run by tests/test_libp2p_pull.py in a process of its own (py-libp2p cannot share one with
hivemind). A public node, two private ones and a liar (a public node that serves other bytes
than it announced): a private node's bundle held at the public node and pulled there by the
other private node, a hold of a bundle signed by another key, a served bundle whose digest
does not match, and one longer than announced.
"""

import asyncio
import json
import random

from swarmnode.swarm.transport.libp2p.holding import HOLD_PROTOCOL
from swarmnode.swarm.transport.libp2p.streams import exchange
from swarmnode.swarm.transport.libp2p.transport import Libp2pTransport
from transport_node import identity_for, make_bundle
from waiting import wait_until_async

SW = "pull-test"
LISTEN = "/ip4/127.0.0.1/tcp/0"
# What a rejected pull leaves undelivered is checked over this long after the rejection: a
# duration, since nothing marks "no delivery will come".
QUIET_S = 1.5


def watch(t):
    got, rejected = [], []
    t.set_handler(got.append)
    t.set_reject_handler(lambda author, reason: rejected.append([author, reason]))
    return got, rejected


async def main() -> None:
    out = {}
    public = Libp2pTransport(identity_for(1), SW, listen=LISTEN)
    await public.start()
    boot = public.addresses()[:1]
    home, puller = (Libp2pTransport(identity_for(i), SW, boot, LISTEN, private=True) for i in (2, 3))
    liar = Libp2pTransport(identity_for(4), SW, boot, LISTEN)
    nodes = [public, home, puller, liar]
    received = {t.identity.peer_id: watch(t) for t in nodes}
    for t in nodes[1:]:
        await t.start()
    await wait_until_async(lambda: all(public.identity.peer_id in t.peers() for t in nodes[1:]), 30,
                           "every node to join the public one")
    rng = random.Random(0)

    # A private node leaves its bundle with the public node; the other private node, never
    # connected to it, pulls it there.
    bundle = make_bundle(home.identity, SW, 1, 8000, rng)
    await home.publish(1, bundle)
    got, _ = received[puller.identity.peer_id]
    await wait_until_async(lambda: bundle in got, 30, "the puller to get the held bundle")
    out["held at the public node"] = public.held.get(home.identity.peer_id, 1) == bundle
    out["home and puller connected"] = home.identity.peer_id in puller.peers()
    out["a private node holds nothing"] = len(home.held) == 0 and len(puller.held) == 0

    # A bundle signed by someone else is not held, and is reported under the pusher.
    stolen = make_bundle(liar.identity, SW, 2, 2000, rng)
    answer = await home._bridge.run(exchange, home._host, public._host.get_id(), HOLD_PROTOCOL, stolen, 16)
    public_rejected = received[public.identity.peer_id][1]
    await wait_until_async(lambda: public_rejected, 10, "the public node to reject the foreign hold")
    out["foreign hold answer"] = answer.decode()
    out["foreign hold held"] = public.held.get(liar.identity.peer_id, 2) is not None
    out["public rejected"] = list(public_rejected)

    # A node that serves other bytes than it announced: digest_mismatch, nothing delivered.
    announced, served = make_bundle(liar.identity, SW, 3, 3000, rng), make_bundle(liar.identity, SW, 3, 3000, rng)
    while len(served) > len(announced):  # a longer answer is cut off at the announced size, never hashed
        served = make_bundle(liar.identity, SW, 3, 3000, rng)
    keep = liar.served.put
    liar.served.put = lambda author, round_no, data: keep(author, round_no, served)
    await liar.publish(3, announced)
    got, rejected = received[public.identity.peer_id]
    await wait_until_async(lambda: [liar.identity.peer_id, "digest_mismatch"] in rejected, 30,
                           "the public node to reject the mismatched bundle")
    await asyncio.sleep(QUIET_S)
    out["mismatch delivered"] = announced in got or served in got
    out["home pulled the liar"] = sorted({r for a, r in received[home.identity.peer_id][1]
                                          if a == liar.identity.peer_id})

    # A node that serves more bytes than it announced: read one byte past the size, too_large.
    longer = make_bundle(liar.identity, SW, 4, 3000, rng)
    liar.served.put = lambda author, round_no, data: keep(author, round_no, data + b"x" * 4096)
    await liar.publish(4, longer)
    await wait_until_async(lambda: [liar.identity.peer_id, "too_large"] in rejected, 30,
                           "the public node to reject the long bundle")
    await asyncio.sleep(QUIET_S)
    out["too long delivered"] = any(g.startswith(longer) for g in got)
    for t in nodes:
        await t.stop()
        await t.stop()
    print(json.dumps(out))


asyncio.run(main())
