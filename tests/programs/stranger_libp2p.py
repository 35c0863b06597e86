"""A stranger with many free keys against one libp2p peer (protocol 3): stock py-libp2p hosts,
one per key, in one process.

For ``tests/test_strangers.py`` and ``benchmarks/strangers.py`` (through ``tests/strangerlab.py``). Keys, bundles and
announcements come from :mod:`stranger_keys` (written from ``docs/protocol.md``, no swarmnode
code). Every key runs its own host (its PeerID is the key's), dials ``--target`` and, for
each round 0..``--rounds``-1: makes a valid bundle (about 116 KB by default), pushes it on
``/swarmnode/hold/2.0.0`` (a public target holds bundles its pushers signed; ``--no-hold``
skips it), then pushes its signed announcement on ``/swarmnode/announce/3.0.0`` naming
itself (and the target, if it answered ``held``) as holders, and waits ``--interval``
seconds (a receiver reads one push a second a peer). It serves its bundles on
``/swarmnode/bundle/2.0.0`` to whoever pulls them, stays connected ``--linger`` seconds
after its last round, then closes its connection. ``--concurrency`` keys run at once::

    python tests/programs/stranger_libp2p.py --target MADDR --swarm S --keys 120 --rounds 6

Prints JSON lines: ``{"event": "ready"}``, ``{"event": "progress", ...}`` after every
``--report`` keys, ``{"event": "done", ...}``: records sent (holds pushed), stored (held),
refused, unanswered (no stream), wire bytes, announcements pushed, bundles pulled from it,
seconds; then waits until stdin closes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.peerinfo import info_from_p2p_addr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for its shared modules

from stranger_keys import Key, add_stranger_options, announcement, bundle  # noqa: E402

ANNOUNCE = TProtocol("/swarmnode/announce/3.0.0")
HOLD = TProtocol("/swarmnode/hold/2.0.0")
BUNDLE = TProtocol("/swarmnode/bundle/2.0.0")
STREAM_TIMEOUT = 10.0


async def _read_all(stream, limit: int) -> bytes:
    chunks, size = [], 0
    while size <= limit:
        try:
            chunk = await stream.read(limit + 1 - size)
        except EOFError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


async def _ask(host, peer, protocol: TProtocol, request: bytes, limit: int) -> bytes | None:
    """One request/response stream (request, close our side, read the answer); None if it failed."""
    try:
        with trio.fail_after(STREAM_TIMEOUT):
            stream = await host.new_stream(peer, [protocol])
            await stream.write(request)
            await stream.close_write()
            answer = await _read_all(stream, limit)
            await stream.close()
            return answer
    except Exception:
        return None


class Stranger:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.target = info_from_p2p_addr(multiaddr.Multiaddr(args.target))
        self.shape = {"groups": args.groups, "responses": args.responses, "chars": args.chars}
        self.counts = {"sent": 0, "stored": 0, "refused": 0, "unanswered": 0, "bytes": 0, "announced": 0,
                       "pulled": 0, "keys_done": 0}
        self.t0 = time.monotonic()

    def report(self, event: str) -> None:
        print(json.dumps({"event": event, **self.counts, "seconds": time.monotonic() - self.t0}), flush=True)

    async def key_life(self, i: int) -> None:
        args = self.args
        key = Key.numbered(args.label, i)
        host = new_host(key_pair=create_new_key_pair(key.seed))
        if str(host.get_id()) != key.peer_id:
            raise SystemExit(f"py-libp2p derived {host.get_id()} from the key, the spec {key.peer_id}")
        served: dict[int, bytes] = {}

        async def serve(stream) -> None:
            try:
                with trio.fail_after(STREAM_TIMEOUT):
                    wanted = json.loads(await _read_all(stream, 512) or b"{}")
                    data = served.get(wanted.get("round")) if wanted.get("author") == key.peer_id else None
                    if data:
                        await stream.write(data)
                        self.counts["pulled"] += 1
                    await stream.close()
            except Exception:
                pass

        host.set_stream_handler(BUNDLE, serve)
        target_id = self.target.peer_id
        async with host.run([multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
            try:
                with trio.fail_after(STREAM_TIMEOUT):
                    await host.connect(self.target)
            except Exception:
                self.counts["unanswered"] += args.rounds
                return
            for round_no in range(args.rounds):
                tick = trio.current_time()
                wire, _ = bundle(key, args.swarm, round_no, **self.shape)
                served[round_no] = wire
                served.pop(round_no - 2, None)
                holders = [key.peer_id]
                if args.hold:
                    answer = await _ask(host, target_id, HOLD, wire, 16)
                    self.counts["sent"] += 1
                    self.counts["bytes"] += len(wire)
                    if answer is None:
                        self.counts["unanswered"] += 1
                    elif answer == b"held":
                        self.counts["stored"] += 1
                        holders.append(str(target_id))
                    else:
                        self.counts["refused"] += 1
                if await _ask(host, target_id, ANNOUNCE, announcement(key, args.swarm, round_no, wire, holders), 16) \
                        is not None:
                    self.counts["announced"] += 1
                await trio.sleep(max(0.0, args.interval - (trio.current_time() - tick)))
            await trio.sleep(args.linger)
            # A key that is done leaves: py-libp2p 0.8.1's host.run() exit would leave the socket open.
            with trio.move_on_after(STREAM_TIMEOUT):
                await host.disconnect(target_id)
        self.counts["keys_done"] += 1
        if self.counts["keys_done"] % args.report == 0:
            self.report("progress")

    async def run(self) -> None:
        limiter = trio.CapacityLimiter(self.args.concurrency)

        async def limited(i: int) -> None:
            async with limiter:
                await self.key_life(i)

        print(json.dumps({"event": "ready"}), flush=True)
        async with trio.open_nursery() as nursery:
            for i in range(self.args.keys):
                nursery.start_soon(limited, i)
        self.report("done")
        await trio.to_thread.run_sync(sys.stdin.read)


def main() -> None:
    parser = argparse.ArgumentParser()
    add_stranger_options(parser)
    parser.add_argument("--concurrency", type=int, default=60, help="keys (hosts) running at once")
    parser.add_argument("--interval", type=float, default=1.1, help="seconds between one key's rounds")
    parser.add_argument("--linger", type=float, default=5.0, help="seconds a key stays after its last round")
    parser.add_argument("--no-hold", dest="hold", action="store_false")
    parser.add_argument("--report", type=int, default=60, help="keys between progress lines")
    parser.add_argument("--label", default="stranger", help="names the keys (the same label makes the same keys)")
    trio.run(Stranger(parser.parse_args()).run)


if __name__ == "__main__":
    main()
