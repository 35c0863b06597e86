"""Sealing a private swarm's messages: keys, derivation, seal and open, and what is refused."""

from __future__ import annotations

import json
import os
import pickle
from collections import Counter

import pytest

import programs
from swarmnode.config import NodeConfig
from swarmnode.swarm.sealing import (
    ANNOUNCE,
    BUNDLE,
    LAN,
    NAMES,
    OVERHEAD,
    Sealer,
    SealRefused,
    SwarmKeyError,
    format_swarm_key,
    lan_name,
    new_swarm_key,
    parse_swarm_key,
    sealer_for,
)
from swarmnode.swarm.transport.libp2p.holding import BUNDLE_PROTOCOL
from swarmnode.swarm.transport.libp2p.peer_exchange import PEERS_PROTOCOL
from swarmnode.swarm.transport.libp2p.sealed import ANSWER, PLAIN, REQUEST, StreamSeal
from swarmnode.swarm.transport.libp2p.spread import ANNOUNCE_PROTOCOL, SAMPLE_PROTOCOL

SECRET = bytes(range(32))
SEALER = Sealer.for_swarm("home-lab", SECRET)


def refused(sealer: Sealer, purpose: str, sealed: bytes, limit: int = 1024, context: bytes = b"") -> str:
    with pytest.raises(SealRefused) as caught:
        sealer.open(purpose, sealed, limit, context)
    return caught.value.reason


def test_key_text_round_trip_and_typos():
    key = new_swarm_key()
    assert key.startswith("snk1.") and parse_swarm_key(f" {key}\n") == parse_swarm_key(key)
    assert parse_swarm_key(format_swarm_key(SECRET)) == SECRET
    assert new_swarm_key() != key
    for i in range(5, len(key)):
        swapped = "B" if key[i] != "B" else "C"
        with pytest.raises(SwarmKeyError):
            parse_swarm_key(key[:i] + swapped + key[i + 1:])
    with pytest.raises(SwarmKeyError, match="bytes"):
        parse_swarm_key(key[:-2])


def test_seal_opens_under_the_same_swarm_key_purpose_and_context():
    plain = os.urandom(3000)
    sealed = SEALER.seal(BUNDLE, plain, b"ctx")
    assert len(sealed) == len(plain) + OVERHEAD and plain not in sealed
    assert sealed != SEALER.seal(BUNDLE, plain, b"ctx")  # a random nonce each time
    assert Sealer.for_swarm("home-lab", SECRET).open(BUNDLE, sealed, len(plain), b"ctx") == plain
    assert SEALER.open(ANNOUNCE, SEALER.seal(ANNOUNCE, b""), 0) == b""


def test_what_does_not_open_is_refused_as_wrong_key():
    sealed = SEALER.seal(BUNDLE, b"a signed bundle", b"ctx")
    assert refused(SEALER, ANNOUNCE, sealed, context=b"ctx") == "wrong_key"  # another purpose
    assert refused(SEALER, BUNDLE, sealed) == "wrong_key"  # another context
    assert refused(Sealer.for_swarm("home-lab", bytes(32)), BUNDLE, sealed, context=b"ctx") == "wrong_key"
    assert refused(Sealer.for_swarm("other-lab", SECRET), BUNDLE, sealed, context=b"ctx") == "wrong_key"
    for i in range(len(sealed)):  # any byte changed: version, nonce, ciphertext or tag
        tampered = sealed[:i] + bytes([sealed[i] ^ 1]) + sealed[i + 1:]
        assert refused(SEALER, BUNDLE, tampered, context=b"ctx") == "wrong_key"
    for n in (0, 1, OVERHEAD - 1, OVERHEAD, len(sealed) - 1):  # cut short
        assert refused(SEALER, BUNDLE, sealed[:n], context=b"ctx") == "wrong_key"
    assert refused(SEALER, BUNDLE, b"a signed bundle, not sealed at all: a public node's") == "wrong_key"


def test_size_is_checked_before_decryption():
    sealed = SEALER.seal(BUNDLE, bytes(100))
    assert SEALER.open(BUNDLE, sealed, 100) == bytes(100)
    assert refused(SEALER, BUNDLE, sealed, limit=99) == "too_large"
    # Garbage over the cap is refused as too large whatever it is (nothing decrypted).
    assert refused(SEALER, BUNDLE, os.urandom(10 ** 6), limit=1000) == "too_large"


def test_keys_differ_per_purpose_and_swarm_and_names_are_keyed():
    assert len(set(SEALER.keys.values())) == len(SEALER.keys)
    assert Sealer.for_swarm("other-lab", SECRET).keys[BUNDLE] != SEALER.keys[BUNDLE]
    name = SEALER.name("home-lab/v2/announce/3")
    assert name == Sealer.for_swarm("home-lab", SECRET).name("home-lab/v2/announce/3")
    assert name != Sealer.for_swarm("home-lab", bytes(32)).name("home-lab/v2/announce/3")
    assert "home-lab" not in name and len(name) == 33
    assert SEALER.name("home-lab", NAMES) != SEALER.name("home-lab", "lan")


def test_sealer_travels_to_another_process_and_hides_its_keys():
    assert pickle.loads(pickle.dumps(SEALER)) == SEALER
    assert SECRET.hex() not in repr(SEALER) and all(k.hex() not in repr(SEALER) for k in SEALER.keys.values())
    assert sealer_for("home-lab", None) is None
    assert sealer_for("home-lab", format_swarm_key(SECRET)) == SEALER


def test_the_lan_shows_a_private_swarms_keyed_name_only():
    private = lan_name(NodeConfig(swarm="home-lab", swarm_key=format_swarm_key(SECRET)))
    assert private == SEALER.name("home-lab", LAN) and "home-lab" not in private
    assert lan_name(NodeConfig(swarm="home-lab")) == "home-lab"


def test_libp2p_streams_sealed_by_protocol_and_direction():
    counts: Counter[str] = Counter()
    seal, other = StreamSeal(SEALER, counts), StreamSeal(Sealer.for_swarm("home-lab", bytes(32)), Counter())
    request = seal.close(BUNDLE_PROTOCOL, REQUEST, b'{"author": "x", "round": 1}')
    assert seal.open(BUNDLE_PROTOCOL, REQUEST, request, 512) == b'{"author": "x", "round": 1}'
    assert seal.limit(BUNDLE_PROTOCOL, 512) == 512 + OVERHEAD and PLAIN.limit(BUNDLE_PROTOCOL, 512) == 512
    # Not as an answer, not on another protocol, not under another key, not in the clear.
    assert seal.open(BUNDLE_PROTOCOL, ANSWER, request, 512) is None
    assert seal.open(ANNOUNCE_PROTOCOL, REQUEST, request, 512) is None
    assert other.open(BUNDLE_PROTOCOL, REQUEST, seal.close(BUNDLE_PROTOCOL, REQUEST, b"x"), 512) is None
    assert seal.open(BUNDLE_PROTOCOL, REQUEST, b'{"author": "x", "round": 1}', 512) is None
    assert seal.open(BUNDLE_PROTOCOL, ANSWER, seal.close(BUNDLE_PROTOCOL, ANSWER, bytes(600)), 512) is None
    assert counts == {"wrong_key": 3, "too_large": 1}  # the other key's refusal counts there
    # An empty request is sealed (an outsider's sample ask is refused); an empty answer is "nothing".
    empty_ask = seal.close(SAMPLE_PROTOCOL, REQUEST, b"")
    assert len(empty_ask) == OVERHEAD and seal.open(SAMPLE_PROTOCOL, REQUEST, empty_ask, 0) == b""
    assert seal.open(SAMPLE_PROTOCOL, REQUEST, b"", 0) is None
    assert seal.close(SAMPLE_PROTOCOL, ANSWER, b"") == b"" and seal.open(SAMPLE_PROTOCOL, ANSWER, b"", 10) == b""
    # The peer exchange, and every stream of a public swarm, go as they are.
    assert seal.close(PEERS_PROTOCOL, ANSWER, b"[]") == b"[]" and PLAIN.close(BUNDLE_PROTOCOL, REQUEST, b"r") == b"r"
    assert PLAIN.open(BUNDLE_PROTOCOL, ANSWER, b"bundle", 10) == b"bundle"


@pytest.mark.slow
def test_the_hivemind_validator_of_a_private_swarm():
    out = json.loads(programs.output("hivemind_sealed_records").splitlines()[-1])
    assert out["space"].startswith("p") and "sw" not in out["space"] and out["public ids differ"]
    assert out["sealed bundle"] and out["bundle not in the clear"] and out["strip opens it"]
    assert out["sealed head"] and out["strip opens the head"]
    for refused in ("plain bundle", "another key's", "tampered", "cut short", "moved to another key", "oversized",
                    "public head at the keyed key", "head with a later expiration"):
        assert out[refused] is False, refused
    # wrong_key before any other check; the size before decryption; the signed expiry inside the seal
    assert out["counted"] == {"bad_signature": 1, "too_large": 1, "wrong_key": 6}
    assert out["public values unsealed"]
    assert out["stored: opened before the header"] == [True, False, None, "wrong_key"]
