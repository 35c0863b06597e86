"""swarmnode.compat.libp2p's release_inbound_slots on real hosts: prints one JSON object of checks.

A server host with 3 inbound slots, stock and with release_inbound_slots (at most 2 connections
from one address), visited by fresh client hosts (a key and a TCP connection each, all from
127.0.0.1) that connect, read one answer on a stream and close; then one more client once the
server host has stopped (its listener outlives it).
Run by tests/test_compat.py in a process of its own (hivemind and py-libp2p cannot share one).
"""

import json
import logging
import os
import socket

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.network.config import ConnectionConfig
from libp2p.peer.peerinfo import info_from_p2p_addr

from swarmnode.compat.libp2p import release_inbound_slots

PROTOCOL = TProtocol("/slots-check/1")
CAP = 3  # inbound slots: max_connections - min_connections
PER_ADDRESS = 2


async def answer(stream) -> None:
    await stream.write(b"ok")
    await stream.close()


def server(release: bool, refused: list[str]):
    config = ConnectionConfig(max_connections=6, min_connections=3, low_watermark=3, high_watermark=6)
    host = new_host(key_pair=create_new_key_pair(os.urandom(32)), connection_config=config)
    host.set_stream_handler(PROTOCOL, answer)
    slots = release_inbound_slots(host, PER_ADDRESS, refused.append) if release else None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = multiaddr.Multiaddr(f"/ip4/127.0.0.1/tcp/{port}")
    return host, slots, address, info_from_p2p_addr(multiaddr.Multiaddr(f"{address}/p2p/{host.get_id()}"))


async def visit(info, leave: trio.Event | None = None) -> bool:
    """A fresh client host: True if it connected and read the answer; holds on until ``leave``."""
    client = new_host(key_pair=create_new_key_pair(os.urandom(32)))
    async with client.run([multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
        try:
            with trio.fail_after(5):
                await client.connect(info)
                stream = await client.new_stream(info.peer_id, [PROTOCOL])
                ok = await stream.read(2) == b"ok"
        except Exception:
            return False
        if leave is not None:
            await leave.wait()
        await client.disconnect(info.peer_id)  # leaving host.run() alone leaves the TCP connection open
    return ok


async def in_turn(host, info, visits: int) -> int:
    """Clients one after another, each closed (and gone from the server) before the next."""
    accepted = 0
    for _ in range(visits):
        for _attempt in range(3):  # the server may give the slot back a moment after the close
            if await visit(info):
                accepted += 1
                break
            await trio.sleep(0.3)
        with trio.move_on_after(5):
            while host.get_network().get_connections():
                await trio.sleep(0.05)
    return accepted


async def at_once(info, slots, clients: int) -> tuple[int, list[str], int, bool]:
    """``clients`` held open together; then one leaves and a new one comes: (accepted at once,
    the addresses ``slots`` says hold slots then, its free slots, new one accepted)."""
    leave = trio.Event()
    results: list[bool] = []

    async def one() -> None:
        results.append(await visit(info, leave))

    async with trio.open_nursery() as nursery:
        for _ in range(clients):
            nursery.start_soon(one)
        with trio.move_on_after(15):
            while len(results) < clients - CAP:  # the refused ones return at once
                await trio.sleep(0.05)
        await trio.sleep(1)
        holding, free = sorted(c.address for c in slots.held()), slots.free()
        leave.set()
    newcomer = False
    for _attempt in range(3):
        if newcomer := await visit(info):
            break
        await trio.sleep(0.3)
    return sum(results), holding, free, newcomer


class Warnings(logging.Handler):
    """The warnings py-libp2p logs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def main():
    out = {}
    warnings = Warnings()
    logging.getLogger("libp2p").addHandler(warnings)
    for release in (False, True):
        refused: list[str] = []
        host, slots, address, info = server(release, refused)
        name = "released" if release else "stock"
        async with host.run([address]):
            out[f"{name}: accepted in turn of {2 * CAP + 2}"] = await in_turn(host, info, 2 * CAP + 2)
            if release:
                (out[f"{name}: accepted at once of {CAP + 2}"], out[f"{name}: held by"], out[f"{name}: free"],
                 out[f"{name}: one more after"]) = await at_once(info, slots, CAP + 2)
                out[f"{name}: refused"] = sorted(set(refused))  # a refused client dials again
        warnings.messages.clear()
        out[f"{name}: a client after the host stopped connects"] = await visit(info)
        await trio.sleep(0.5)
        out[f"{name}: ... and the host logs ADDCONN_FAIL"] = any("ADDCONN_FAIL" in m for m in warnings.messages)
    print(json.dumps(out))


trio.run(main)
