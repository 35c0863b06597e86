"""swarmnode.compat.libp2p's keep_own_keys on a real host: prints one JSON object of checks.

A host whose peerstore holds 5 peers meets 10 (addresses added, as identify and the peer
exchange add them), stock and with keep_own_keys; then a client connects and asks it to
identify itself. Run by tests/test_compat.py in a process of its own (hivemind and py-libp2p
cannot share one).
"""

import json
import os
import socket

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.identity.identify.identify import ID as IDENTIFY
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.peer.peerstore import PeerStore

from swarmnode.compat.libp2p import keep_own_keys


def own_key(host) -> bool:
    try:
        return host.get_public_key() is not None
    except Exception:
        return False


async def identified(info) -> bool:
    """A fresh client asks the host to identify itself: True if it answered."""
    client = new_host(key_pair=create_new_key_pair(os.urandom(32)))
    async with client.run([multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
        try:
            with trio.fail_after(5):
                await client.connect(info)
                stream = await client.new_stream(info.peer_id, [IDENTIFY])
                answer = await stream.read()
            await client.disconnect(info.peer_id)
            return bool(answer)
        except Exception:
            return False


async def main():
    out = {}
    for keep in (False, True):
        name = "kept" if keep else "stock"
        host = new_host(key_pair=create_new_key_pair(os.urandom(32)), peerstore_opt=PeerStore(max_peers=5))
        if keep:
            keep_own_keys(host)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        address = multiaddr.Multiaddr(f"/ip4/127.0.0.1/tcp/{port}")
        info = info_from_p2p_addr(multiaddr.Multiaddr(f"{address}/p2p/{host.get_id()}"))
        survived = False
        try:
            async with host.run([address]):
                for i in range(10):
                    peer = ID.from_pubkey(create_new_key_pair(os.urandom(32)).public_key)
                    host.get_peerstore().add_addrs(peer, [multiaddr.Multiaddr(f"/ip4/10.0.0.{i + 1}/tcp/4001")], 3600)
                out[f"{name}: own key after meeting 10 peers"] = own_key(host)
                out[f"{name}: answers identify"] = await identified(info)
                await trio.sleep(0.5)
                survived = True
        except Exception:  # stock: identify's failure ends the host (an ExceptionGroup out of host.run())
            pass
        out[f"{name}: the host survived"] = survived
    print(json.dumps(out))


trio.run(main)
