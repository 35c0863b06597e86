"""swarmnode.compat.libp2p's allow_redial on two real hosts: prints one JSON object of checks.

Run by tests/test_compat.py in a process of its own (hivemind and py-libp2p cannot share one).
"""

import json
import socket
import threading

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr

from swarmnode.compat.libp2p import allow_redial


async def dial(host, info):
    try:
        with trio.fail_after(5):
            await host.connect(info)
        return True
    except Exception:
        return False


async def main():
    out = {}
    threads = threading.active_count()
    a, b = new_host(key_pair=create_new_key_pair(b"a" * 32)), new_host(key_pair=create_new_key_pair(b"b" * 32))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = multiaddr.Multiaddr(f"/ip4/127.0.0.1/tcp/{port}")
    info = info_from_p2p_addr(multiaddr.Multiaddr(f"{address}/p2p/{b.get_id()}"))
    async with a.run([multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
        out["dial, nobody listening"] = await dial(a, info)
        async with b.run([address]):
            out["dial again, now listening"] = await dial(a, info)
            allow_redial(a, info.peer_id)
            out["dial after allow_redial"] = await dial(a, info)
    out["threads left"] = threading.active_count() - threads
    print(json.dumps(out))


trio.run(main)
