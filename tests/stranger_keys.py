"""Free keys and valid records made from ``docs/protocol.md`` alone, for the strangers that
attack a node or a relay from outside (``tests/programs/stranger_hivemind.py`` and
``stranger_libp2p.py``).

Nothing here imports swarmnode, hivemind or py-libp2p: keys are Ed25519 keys of the
``cryptography`` package, PeerIDs and bundles are written byte for byte as the protocol
document says (section 1, PeerID; section 2, bundle version 2; section 4, libp2p protocol 3
announcements). So a record that a node accepts proves the spec is enough to write one, and
a change to the protocol that the spec does not say fails these strangers first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from dataclasses import dataclass

import zstandard
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
BUNDLE_DOMAIN = b"swarmnode-bundle-v2\0"
ANNOUNCE_V3_DOMAIN = b"swarmnode-announce-v3\0"
# The response text: 64 symbols, 6 bits of entropy a character, so zstd cannot shrink it below 3/4.
_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def base58(data: bytes) -> str:
    """base58btc (Bitcoin alphabet), leading zero bytes as ``1``."""
    n = int.from_bytes(data, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = _B58[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def canonical(value: object) -> bytes:
    """Section 2's canonical JSON."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


@dataclass(frozen=True)
class Key:
    """One free key: its seed, raw public key and PeerID."""

    seed: bytes
    public: bytes
    peer_id: str

    @classmethod
    def from_seed(cls, seed: bytes) -> "Key":
        public = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        # PublicKey protobuf (type 1 = Ed25519, 32 bytes), in an identity multihash (code 0, length 36).
        proto = b"\x08\x01\x12\x20" + public
        return cls(seed, public, base58(b"\x00" + bytes([len(proto)]) + proto))

    @classmethod
    def numbered(cls, label: str, i: int) -> "Key":
        return cls.from_seed(hashlib.sha256(f"{label}-{i}".encode()).digest())

    def sign(self, message: bytes) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(message)

    def key_file(self) -> bytes:
        """The key file of section 1 (a libp2p PrivateKey protobuf: seed then public key)."""
        return b"\x08\x01\x12\x40" + self.seed + self.public


def bundle(key: Key, swarm: str, round_no: int, *, groups: int = 16, responses: int = 4, chars: int = 2400,
           created: float | None = None) -> tuple[bytes, float]:
    """A valid version 2 bundle of ``groups`` x ``responses`` random responses of ``chars``
    characters, and its signed ``created``."""
    created = time.time() if created is None else created
    return signed_bundle(key, swarm, round_no, [{
        "answer": str(g), "family": "chain_sum", "level": 0, "metadata": {"num_terms": 2},
        "question": f"What is {g} + 0?",
        "responses": [_random_text(chars) for _ in range(responses)],
        "rewards": [0.0] * responses,
    } for g in range(groups)], created), created


def signed_bundle(key: Key, swarm: str, round_no: int, groups: list[dict], created: float | None = None) -> bytes:
    """A version 2 bundle of ``groups`` (each a dict of section 2's group fields), signed by ``key``."""
    body = canonical({"created": time.time() if created is None else created, "groups": groups,
                      "model": "stranger", "round": round_no, "sender": key.peer_id, "swarm": swarm})
    return (b"SNB\x02" + key.public + key.sign(BUNDLE_DOMAIN + body)
            + zstandard.ZstdCompressor(level=1).compress(body))


def _random_text(chars: int) -> str:
    return bytes(_ALPHABET[b & 63] for b in os.urandom(chars)).decode("ascii")


def announcement(key: Key, swarm: str, round_no: int, wire: bytes, holders: list[str] | None = None) -> bytes:
    """A pushed libp2p protocol 3 announcement of bundle ``wire`` (section 4), canonical JSON."""
    fields = {"author": key.peer_id, "digest": hashlib.sha256(wire).hexdigest(),
              "holders": holders or [key.peer_id], "round": round_no, "size": len(wire), "swarm": swarm}
    return canonical({"announcement": fields, "signature": key.sign(ANNOUNCE_V3_DOMAIN + canonical(fields)).hex()})


def add_stranger_options(parser: argparse.ArgumentParser) -> None:
    """The options every stranger program takes: whom it attacks, with how many keys and rounds, and
    the size of each bundle (groups x responses x characters)."""
    parser.add_argument("--target", required=True, help="multiaddr of the peer attacked, ending in /p2p/<PeerID>")
    parser.add_argument("--swarm", required=True)
    parser.add_argument("--keys", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--responses", type=int, default=4)
    parser.add_argument("--chars", type=int, default=2400)
