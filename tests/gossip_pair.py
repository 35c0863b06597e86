"""Two py-libp2p hosts gossiping on one topic, for checks that run in a fresh interpreter
(``tests/test_compat.py``, ``tests/test_libp2p_pull.py``): py-libp2p cannot share a process
with hivemind."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import multiaddr
import trio
from libp2p.peer.peerinfo import info_from_p2p_addr

from swarmnode.compat.libp2p import run_service, stop_seen_cache


async def exchange(hosts: Sequence[Any], routers: Sequence[Any], pubsubs: Sequence[Any],
                   on_mesh: Callable[[], None] = lambda: None) -> list[str]:
    """Run both hosts with their pubsub and router, connect them, wait until each router has
    the other in its mesh of topic ``t``, call ``on_mesh()``, publish ``from 0`` and ``from 1``
    (one from each), and return the two messages received, sorted."""
    listen = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")
    try:
        async with hosts[0].run([listen]), run_service(pubsubs[0]), run_service(routers[0]), \
                hosts[1].run([listen]), run_service(pubsubs[1]), run_service(routers[1]):
            for p in pubsubs:
                await p.wait_until_ready()
            subs = [await p.subscribe("t") for p in pubsubs]
            other = multiaddr.Multiaddr(f"{hosts[1].get_addrs()[0]}/p2p/{hosts[1].get_id()}")
            await hosts[0].connect(info_from_p2p_addr(other))
            with trio.fail_after(30):
                while not all(r.mesh.get("t") for r in routers):
                    await trio.sleep(0.2)
            on_mesh()
            for i, p in enumerate(pubsubs):
                await p.publish("t", b"from %d" % i)
            with trio.fail_after(10):
                return sorted([(await subs[1].get()).data.decode(), (await subs[0].get()).data.decode()])
    finally:
        for p in pubsubs:
            stop_seen_cache(p)
