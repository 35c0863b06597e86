"""A hostile peer: a libp2p node that announces bundles as fast as it can and serves them.

For ``tests/test_flood.py`` and ``benchmarks/flood.py``. It runs the real libp2p transport
(protocol v3: announcements pushed, bundles pulled) with its own outgoing check removed
and, once started, publishes a mix of valid bundles (a new round each), validly signed
hostile bundles (too many groups) and garbage, one publish after the other with no pause
(about 400 a second on one core; a tighter loop inside py-libp2p's trio thread starved the
host's own stream writers and delivered nothing). Each publish pushes an announcement to its
peers (which read one a second of a peer and drop the rest unread); the flooder keeps every
bundle it announced for as long as a peer may pull it (:class:`KeptFor`, :data:`KEEP_S`), so
whatever a peer pulls is junk or a bundle, never nothing. The ``relay`` mix publishes junk at
the pace its peers read (one push a second) and pushes a malformed announcement every eight
publishes::

    python tests/flooder.py [--seconds S] [--start-file F] [--listen MA] [--mix flood|relay] [--hostile H]

It prints ``{"event": "ready", "peer_id": ..., "addresses": [...]}`` once it listens, waits
for ``--start-file`` to exist (if given) and for a peer to connect, prints
``flooding``, and at the end ``{"event": "done", "published": N, "seconds": S}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from swarmnode.records import (
    Group,  # noqa: E402
    Question,  # noqa: E402
)
from swarmnode.swarm.bundle import encode_bundle  # noqa: E402
from swarmnode.swarm.identity import Identity  # noqa: E402
from swarmnode.swarm.transport.libp2p.spread import PLAN_TTL  # noqa: E402

SWARM = "flood-test"
FLOODER_SEED = b"F" * 32
# How long a peer may pull an announced round: its push takes up to a stream time-out
# (libp2p.streams.STREAM_TIMEOUT, 10 s; that module imports py-libp2p, which test_flood's
# process must not) to land, the pull plan keeps it PLAN_TTL from then (its freshness window is
# never longer), and the pull takes up to a stream time-out. At about 400 publishes a second of
# about 500 bytes that is some 16 MB; KEEP_BYTES bounds it should the rate be higher.
KEEP_S = PLAN_TTL + 2 * 10.0
KEEP_BYTES = 128 * 1024 * 1024
BAD_ANNOUNCEMENT = b'{"announcement": {"round": "soon", "size": -1}}'


class KeptFor:
    """What the flooder serves, by (author, round): each bundle for ``seconds`` from its put,
    at most ``max_bytes`` in all (oldest out). The transport's own store keeps a count of
    rounds, which at the flood's rate lasts seconds. Thread-safe: written on the asyncio loop,
    read in the host thread."""

    def __init__(self, seconds: float, max_bytes: int):
        self.seconds = seconds
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, int], tuple[float, bytes]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, author: str, round_no: int, data: bytes) -> None:
        now = time.monotonic()
        with self._lock:
            self._drop((author, round_no))
            self._items[(author, round_no)] = (now, data)
            self._bytes += len(data)
            while self._items and (self._bytes > self.max_bytes
                                   or next(iter(self._items.values()))[0] < now - self.seconds):
                self._drop(next(iter(self._items)))

    def get(self, author: str, round_no: int) -> bytes | None:
        with self._lock:
            kept = self._items.get((author, round_no))
        return kept[1] if kept is not None and kept[0] >= time.monotonic() - self.seconds else None

    def _drop(self, key: tuple[str, int]) -> None:
        kept = self._items.pop(key, None)
        if kept is not None:
            self._bytes -= len(kept[1])


def _groups(n: int) -> list[Group]:
    return [Group(Question("chain_sum", f"What is {i} + 1?", str(i + 1), {"num_terms": 2, "num_digits": 1}),
                  [f"<answer>{i + 1}</answer>", "<answer>7</answer>"], [1.0, 1.0]) for i in range(n)]


def valid_bundle(identity: Identity, round_no: int) -> bytes:
    """A bundle every check accepts (once: a second copy is a replay)."""
    return encode_bundle(identity, swarm=SWARM, round_no=round_no, model="flood", groups=_groups(2))


def hostile_bundle(identity: Identity, round_no: int) -> bytes:
    """Validly signed, structurally invalid (more groups than any receiver takes)."""
    return encode_bundle(identity, swarm=SWARM, round_no=round_no, model="flood", groups=_groups(17))


def flood_mix(identity: Identity, n: int, first_round: int = 0, hostile: int = 2) -> list[bytes]:
    """``n`` messages: 8 - ``hostile`` valid, ``hostile`` hostile and 2 garbage in every 10, all distinct."""
    out = []
    for i in range(first_round, first_round + n):
        kind = i % 10
        if kind < 8 - hostile:
            out.append(valid_bundle(identity, i))
        elif kind < 8:
            out.append(hostile_bundle(identity, i))
        else:
            out.append(b"SNB\x01" + os.urandom(200))
    return out


def relay_junk(identity: Identity, n: int, first_round: int, replayed: bytes) -> list[bytes]:
    """``n`` messages a receiver drops, in turn: garbage, a valid bundle with one flipped
    byte, a bundle signed by another key (a stolen one) sent under ``identity`` (the relay
    check drops these three), and ``replayed`` (a valid bundle) again and again (the first
    copy is delivered, the rest are replays)."""
    stolen = Identity.from_seed(b"S" * 32)
    out = []
    for i in range(first_round, first_round + n):
        kind = i % 4
        if kind == 3:
            out.append(replayed)
            continue
        if kind == 0:
            out.append(b"SNB\x01" + os.urandom(200))
        elif kind == 1:
            data = bytearray(valid_bundle(identity, i))
            data[50] ^= 1  # inside the signature
            out.append(bytes(data))
        else:
            out.append(valid_bundle(stolen, i))
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--start-file")
    ap.add_argument("--listen", default="/ip4/127.0.0.1/tcp/0")
    ap.add_argument("--swarm", default=SWARM, help="the swarm whose nodes to flood")
    ap.add_argument("--hostile", type=int, choices=range(9), default=2,
                    help="flood mix: hostile bundles in every 10 messages")
    ap.add_argument("--mix", choices=("flood", "relay"), default="flood",
                    help="flood: flood_mix (valid, hostile, garbage); relay: relay_junk")
    args = ap.parse_args()
    logging.getLogger("libp2p").setLevel(logging.ERROR)

    from swarmnode.swarm.transport import create_transport

    identity = Identity.from_seed(FLOODER_SEED)
    from libp2p.peer.id import ID

    from swarmnode.swarm.transport.libp2p.spread import ANNOUNCE_PROTOCOL, PUSH_EVERY
    from swarmnode.swarm.transport.libp2p.streams import STREAM_TIMEOUT, exchange

    assert KEEP_S >= PLAN_TTL + 2 * STREAM_TIMEOUT, "KEEP_S: the stream time-out has grown"
    transport = create_transport("libp2p", identity, args.swarm, listen=args.listen)
    transport.served = KeptFor(KEEP_S, KEEP_BYTES)
    await transport.start()
    print(json.dumps({"event": "ready", "peer_id": identity.peer_id, "addresses": transport.addresses()}), flush=True)
    while args.start_file and not os.path.exists(args.start_file):
        await asyncio.sleep(0.1)
    while not transport.peers():
        await asyncio.sleep(0.1)
    print("flooding", json.dumps({"peers": transport.peers()}), flush=True)

    replayed = valid_bundle(identity, 10**6)  # one copy for the whole run: pulls are seconds apart
    published, started = 0, time.monotonic()
    while time.monotonic() - started < args.seconds:
        if args.mix == "flood":
            # Distinct bytes throughout: receivers drop repeats of a message before any check.
            for data in flood_mix(identity, 100, published, args.hostile):
                await transport.publish(published, data)
                published += 1
            continue
        # Paced so that the peers read every push: each kind of junk gets pulled.
        for data in relay_junk(identity, 8, published, replayed):
            await transport.publish(published, data)
            published += 1
            await asyncio.sleep(PUSH_EVERY + 0.1)
        for peer in transport.peers():
            await transport._bridge.run(exchange, transport._host, ID.from_base58(peer), ANNOUNCE_PROTOCOL,
                                        BAD_ANNOUNCEMENT, 0)
        await asyncio.sleep(PUSH_EVERY + 0.1)
    seconds = time.monotonic() - started
    print(json.dumps({"event": "done", "published": published, "seconds": round(seconds, 1),
                      "rate": round(published / seconds)}), flush=True)
    await transport.stop()


if __name__ == "__main__":
    asyncio.run(main())
