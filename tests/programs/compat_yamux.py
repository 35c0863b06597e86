"""swarmnode.compat.libp2p's batch_window_updates on two real hosts: the WINDOW_UPDATE frames
yamux sends while one reads 20 messages of 100 bytes from the other, before and after it (at
least one a read, then about one every other read: 22 and 13 on py-libp2p 0.8.1). Prints one
JSON object of checks.

Run by tests/test_compat.py in a process of its own (hivemind and py-libp2p cannot share one).
"""

import json
import os

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.stream_muxer.yamux.yamux import YamuxStream

from swarmnode.compat.libp2p import batch_window_updates

os.environ.pop("PY_YAMUX_RELEASE_ON_READ", None)
updates = []
original = YamuxStream.send_window_update


async def counted(self, *args, **kwargs):
    updates.append(self)
    return await original(self, *args, **kwargs)


YamuxStream.send_window_update = counted
counts = []


async def reader(stream):
    before, got = len(updates), 0
    while got < 2000:
        got += len(await stream.read(2000 - got))
    counts.append(len(updates) - before)
    await stream.write(b"ok")
    await stream.close()


async def send_twenty(b, a):
    stream = await b.new_stream(a.get_id(), ["/compat/read/1"])
    for _ in range(20):
        await stream.write(b"x" * 100)
        await trio.sleep(0.02)
    await stream.read(2)


async def main():
    a, b = new_host(key_pair=create_new_key_pair(b"a" * 32)), new_host(key_pair=create_new_key_pair(b"b" * 32))
    a.set_stream_handler("/compat/read/1", reader)
    local = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")
    async with a.run([local]), b.run([local]):
        await b.connect(info_from_p2p_addr(multiaddr.Multiaddr(f"{a.get_addrs()[0]}/p2p/{a.get_id()}")))
        await send_twenty(b, a)
        batch_window_updates()
        await send_twenty(b, a)
    print(json.dumps({"by default, one a read or more": counts[0] >= 20, "batched, at most 15": counts[1] <= 15}))


trio.run(main)
