"""A hostile peer of a hivemind swarm: a stock ``hivemind.DHT`` with keys it made itself.

For ``tests/test_dht_abuse.py``. It joins the swarm through ``--peer``, then writes, as fast
as hivemind lets it, one of:

* ``announcements``: ``--count`` announcements, each in its signer's shard and validly signed
  by a fresh key over the swarm's announcement format, naming rounds nobody stored; half
  expire three years ahead, half within the announcement TTL (the ones a validator cannot
  refuse by expiry);
* ``rounds``: ``--count`` bundle records of about ``--size`` bytes under their sender's and round's key,
  each a valid bundle signed by one of ``--keys`` keys of its own (the subkey is its
  PeerID), expiring four years ahead; then ``--count // 5`` more with an expiry within the
  bundle TTL (the ones only a byte budget can stop).

It uses hivemind's public API only (``DHT``, ``run_coroutine``, ``DHTNode.store_many``, a
``RecordValidatorBase`` that signs the announcements) and swarmnode's identity, bundle code
and key layout only to make keys, valid bundles and the keys they go under.
Prints ``{"event": "ready"}`` once joined, then
``{"event": "done", "stored": N, "seconds": S}`` and stays up until stdin closes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import struct
import sys
import time
from functools import partial
from pathlib import Path

import hivemind
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import DHTRecord, RecordValidatorBase
from hivemind.utils import MSGPackSerializer, get_dht_time

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from swarmnode.swarm.identity import Identity  # noqa: E402
from swarmnode.swarm.transport.hivemind.layout import (  # noqa: E402
    ANNOUNCE_DOMAIN,
    ANNOUNCE_SHARDS,
    announce_key,
    bundle_key,
    shard_of,
)
from transport_node import make_bundle  # noqa: E402

YEAR = 365 * 86400.0


class AnnouncementSigner(RecordValidatorBase):
    """Signs announcements for whichever of its keys the subkey names, as the swarm's format asks."""

    def __init__(self, swarm: str, keys: dict[bytes, Identity]):
        self.shard_ids = {DHTID.generate(source=announce_key(swarm, s)).to_bytes() for s in range(ANNOUNCE_SHARDS)}
        self.keys = keys

    def validate(self, record: DHTRecord) -> bool:
        return True

    def sign_value(self, record: DHTRecord) -> bytes:
        identity = self.keys.get(record.subkey)
        if record.key not in self.shard_ids or identity is None:
            return record.value
        message = (ANNOUNCE_DOMAIN + record.key + record.subkey
                   + struct.pack(">d", record.expiration_time) + record.value)
        return record.value + identity.sign(message)

    def strip_value(self, record: DHTRecord) -> bytes:
        return record.value


async def _store_announcements(_dht, node, *, swarm: str, first: int, n: int) -> int:
    """Announcements ``first``..``first + n`` (made here: hivemind's command pipe carries little)."""
    rng = random.Random(first)
    now = get_dht_time()
    chunk = [_announcer_key(i) for i in range(first, first + n)]
    expirations = [now + 3 * YEAR if i % 2 else now + 100 for i in range(first, first + n)]
    done = await node.store_many([announce_key(swarm, shard_of(i.peer_id)) for i in chunk],
                                 [rng.randrange(10**6, 10**9) for _ in chunk], expirations,
                                 subkeys=[i.peer_id for i in chunk])
    return sum(bool(v) for v in done.values())


def _announcer_key(i: int) -> Identity:
    return Identity.from_seed(hashlib.sha256(b"junk-head-%d" % i).digest())


async def _store_rounds(_dht, node, *, swarm: str, first: int, n: int, far: bool, size: int, keys: int) -> int:
    """``n`` valid bundles of ~``size`` bytes, rounds ``first``..., made here: hivemind's command
    pipe cannot carry them."""
    rng = random.Random(first)
    stored = 0
    for i in range(n):
        identity = _rounds_key(i % keys)
        round_no = first + i
        data = make_bundle(identity, swarm, round_no, size, rng)
        expiry = get_dht_time() + (4 * YEAR if far else 250.0)
        done = await node.store_many([bundle_key(swarm, identity.peer_id, round_no)], [data], [expiry],
                                     subkeys=[identity.peer_id])
        stored += sum(bool(v) for v in done.values())
    return stored


def _rounds_key(k: int) -> Identity:
    return Identity.from_seed(hashlib.sha256(b"junk-rounds-%d" % k).digest())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--peer", required=True)
    parser.add_argument("--swarm", required=True)
    parser.add_argument("--mode", choices=("announcements", "rounds"), required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--size", type=int, default=143_000)
    parser.add_argument("--keys", type=int, default=60)
    args = parser.parse_args()

    if args.mode == "announcements":
        ids = [_announcer_key(i) for i in range(args.count)]
        signer = AnnouncementSigner(args.swarm, {MSGPackSerializer.dumps(i.peer_id): i for i in ids})
    else:
        signer = AnnouncementSigner(args.swarm, {})
    dht = hivemind.DHT(initial_peers=[args.peer], start=True, record_validators=[signer],
                       host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    print(json.dumps({"event": "ready"}), flush=True)
    t0 = time.monotonic()
    stored = 0
    if args.mode == "announcements":
        for start in range(0, args.count, 500):
            stored += dht.run_coroutine(partial(_store_announcements, swarm=args.swarm, first=start,
                                                n=min(500, args.count - start)))
    else:
        for first, n, far in ((10**9, args.count, True), (2 * 10**9, args.count // 5, False)):
            for start in range(0, n, 100):
                stored += dht.run_coroutine(partial(_store_rounds, swarm=args.swarm, first=first + start,
                                                    n=min(100, n - start), far=far, size=args.size, keys=args.keys))
    print(json.dumps({"event": "done", "stored": stored, "seconds": time.monotonic() - t0}), flush=True)
    sys.stdin.read()
    dht.shutdown()


if __name__ == "__main__":
    main()
