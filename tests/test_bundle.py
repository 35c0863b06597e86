"""Signed rollout bundles: round trip, and every way a peer's bytes can be refused."""

from __future__ import annotations

import copy
import math
import os
import tracemalloc

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmnode.records import Group, Question
from swarmnode.swarm.bundle import (
    MAGIC,
    REASONS,
    SIGNING_DOMAINS,
    VERSION,
    BundleLimits,
    BundleRejected,
    BundleVerifier,
    canonical_json,
    encode_bundle,
    open_envelope,
)
from swarmnode.swarm.identity import Identity

SWARM = "test-swarm"
SENDER = Identity.from_seed(b"s" * 32)
RECEIVER = Identity.from_seed(b"r" * 32)


def make_groups(n_groups: int = 2, n_responses: int = 4, chars: int = 40) -> list[Group]:
    return [Group(Question("chain_sum", f"What is {i} + {i}?", str(2 * i), {"terms": [i, i], "nested": {"a": 1}}),
                  [f"<answer>{2 * i + j}</answer>" + "x" * chars for j in range(n_responses)],
                  [1.0 if j == 0 else 0.25 * j for j in range(n_responses)])
            for i in range(n_groups)]


CREATED = 1234.5
NOW = CREATED + 1.0  # the receiver's clock in these tests


def encode(round_no: int = 10, groups: list[Group] | None = None, identity: Identity = SENDER,
           created: float = CREATED, **kw) -> bytes:
    return encode_bundle(identity, swarm=kw.pop("swarm", SWARM), round_no=round_no, model="tiny-model",
                         groups=make_groups() if groups is None else groups, created=created, **kw)


def wire(body: bytes, identity: Identity = SENDER, *, version: int = VERSION) -> bytes:
    """Sign arbitrary payload bytes exactly as a sender would, to build hostile bundles."""
    domain = SIGNING_DOMAINS.get(version, SIGNING_DOMAINS[VERSION])
    return (MAGIC + bytes([version]) + identity.public_key + identity.sign(domain + body)
            + zstandard.ZstdCompressor().compress(body))


def payload(**changes) -> dict:
    p = copy.deepcopy(open_envelope(encode())[1])
    p.update(changes)
    return p


def verifier(**limits) -> BundleVerifier:
    return BundleVerifier(swarm=SWARM, own_peer_id=RECEIVER.peer_id, limits=BundleLimits(**limits))


def reason(data: bytes, now: float = NOW, **limits) -> str | None:
    verdict = verifier(**limits).check(data, now)
    assert verdict.accepted == (verdict.reason is None)
    assert verdict.reason is None or verdict.reason in REASONS
    return verdict.reason


def test_round_trip_keeps_every_field():
    groups = make_groups(3, 5)
    data = encode(round_no=7, groups=groups)
    verdict = verifier().check(data, NOW)
    assert verdict.accepted and verdict.sender == SENDER.peer_id
    b = verdict.bundle
    assert (b.swarm, b.round, b.sender, b.model, b.created) == (SWARM, 7, SENDER.peer_id, "tiny-model", 1234.5)
    assert len(b.digest) == 64
    for got, sent in zip(b.groups, groups, strict=True):
        assert got.question == sent.question
        assert got.responses == sent.responses and got.rewards == sent.rewards
        assert got.source == SENDER.peer_id


def test_encoding_is_deterministic_and_compressed():
    assert encode() == encode()
    data = encode(groups=make_groups(4, 8, 200))
    assert len(data) < len(canonical_json(open_envelope(data)[1])) / 2


def test_open_envelope_returns_sender_and_payload():
    sender, p = open_envelope(encode(round_no=3))
    assert sender == SENDER.peer_id and p["round"] == 3 and p["sender"] == sender


def test_unicode_survives():
    groups = [Group(Question("f", "¿Cuánto es 3×4? 🙂", "12", {}), ["<answer>12</answer>", "<answer>١٢"], [1.0, 0.0])]
    bundle = verifier().check(encode(groups=groups), NOW).bundle
    assert bundle.groups[0].question.question == "¿Cuánto es 3×4? 🙂"
    assert bundle.groups[0].responses[1] == "<answer>١٢"


def test_flipped_signature_bit():
    data = bytearray(encode())
    data[4 + 32 + 10] ^= 0x01
    assert reason(bytes(data)) == "bad_signature"


def test_flipped_public_key_bit():
    data = bytearray(encode())
    data[4 + 5] ^= 0x01
    assert reason(bytes(data)) in ("bad_signature", "peer_id_mismatch")


def test_sender_not_matching_key():
    forged = payload(sender=Identity.from_seed(b"x" * 32).peer_id)
    assert reason(wire(canonical_json(forged))) == "peer_id_mismatch"
    with pytest.raises(BundleRejected) as info:
        open_envelope(wire(canonical_json(forged)))
    assert info.value.reason == "peer_id_mismatch"


def test_oversized_wire_bytes():
    data = encode(groups=[Group(Question("f", "q", "a", {}), [os.urandom(3000).hex()] * 2, [0.0, 1.0])])
    assert len(data) > 2048
    assert reason(data, max_bytes=2048) == "too_large"
    assert reason(bytes(300 * 1024)) == "too_large"


def test_zip_bomb_is_cut_at_the_cap():
    cap = 64 * 1024
    cobj = zstandard.ZstdCompressor(level=19).compressobj()
    bomb = [cobj.compress(b'{"groups":"')]
    bomb += [cobj.compress(b"a" * (1 << 20)) for _ in range(64)]  # 64 MiB once decompressed
    bomb.append(cobj.compress(b'"}') + cobj.flush())
    body = b"".join(bomb)
    assert len(body) < 32 * 1024
    data = MAGIC + bytes([VERSION]) + SENDER.public_key + bytes(64) + body
    tracemalloc.start()
    try:
        got = reason(data, max_payload_bytes=cap)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == "too_large"
    assert peak < 8 * cap


def test_declared_content_size_is_not_trusted():
    body = zstandard.ZstdCompressor().compress(b" " * (3 * 1024 * 1024))  # frame header says 3 MiB
    assert zstandard.get_frame_parameters(body).content_size == 3 * 1024 * 1024
    assert reason(MAGIC + bytes([VERSION]) + SENDER.public_key + bytes(64) + body) == "too_large"


def test_too_many_responses_and_groups_and_long_texts():
    assert reason(encode(groups=make_groups(1, 33))) == "too_many_responses"
    assert reason(encode(groups=make_groups(17, 2))) == "too_many_groups"
    assert reason(encode(groups=make_groups(1, 2, chars=9000))) == "response_too_long"
    long_q = [Group(Question("f", "q" * 9000, "a", {}), ["a", "b"], [0.0, 1.0])]
    assert reason(encode(groups=long_q)) == "question_too_long"
    long_a = [Group(Question("f", "q", "a" * 3000, {}), ["a", "b"], [0.0, 1.0])]
    assert reason(encode(groups=long_a)) == "field_too_long"
    assert reason(encode(groups=make_groups(1, 33)), max_responses=33) is None


@pytest.mark.parametrize("data", [b"", b"SNB", os.urandom(200), MAGIC + bytes([VERSION]) + os.urandom(300),
                                  b"\x00" * 101])
def test_garbage_bytes(data: bytes):
    assert reason(data) == "malformed"
    assert verifier().check(data, NOW).sender is None


def test_not_bytes_at_all():
    for junk in (None, "a string", 12, ["list"]):
        assert reason(junk) == "malformed"  # type: ignore[arg-type]


def test_unknown_version():
    for version in (0, 3, 255):
        assert reason(wire(canonical_json(payload()), version=version)) == "bad_version"


def test_levels_travel_in_version_2_and_version_1_bundles_still_arrive_without_them():
    groups = make_groups(3)
    levelled = [Group(Question(g.question.family, g.question.question, g.question.answer, g.question.metadata,
                               level), g.responses, g.rewards) for g, level in zip(groups, (-2, None, 7))]
    got = verifier().check(encode(groups=levelled), NOW).bundle
    assert [g.level for g in got.groups] == [-2, None, 7]
    # what a node before levels sends: version 1, its own signing domain, no level field
    old = payload()
    for g in old["groups"]:
        del g["level"]
    verdict = verifier().check(wire(canonical_json(old), version=1), NOW)
    assert verdict.accepted and [g.level for g in verdict.bundle.groups] == [None, None]


@pytest.mark.parametrize("level", ["1", True, 1.5, 10**6, [1]])
def test_a_malformed_level_claim_is_a_bad_field(level):
    p = payload()
    p["groups"][0]["level"] = level
    assert reason(wire(canonical_json(p))) == "bad_field"


def test_each_version_has_exactly_its_own_group_fields_and_signing_domain():
    assert reason(wire(canonical_json(payload()), version=1)) == "bad_field"  # v1 has no level field
    p = payload()
    del p["groups"][0]["level"]
    assert reason(wire(canonical_json(p))) == "bad_field"
    body = canonical_json(payload())
    cross_signed = (MAGIC + bytes([VERSION]) + SENDER.public_key + SENDER.sign(SIGNING_DOMAINS[1] + body)
                    + zstandard.ZstdCompressor().compress(body))
    assert reason(cross_signed) == "bad_signature"


def test_replay_and_recompressed_replay():
    v = verifier()
    data = encode()
    assert v.check(data, NOW).accepted
    again = v.check(data, NOW)
    assert not again.accepted and again.reason == "replay" and again.sender == SENDER.peer_id
    body = canonical_json(open_envelope(data)[1])
    recompressed = data[:100] + zstandard.ZstdCompressor(level=1, write_content_size=False).compress(body)
    assert recompressed != data
    assert v.check(recompressed, NOW).reason == "replay"
    assert v.check(encode(round_no=11), NOW).accepted  # a new bundle of the same sender is fine


def test_replay_cache_is_bounded():
    v = BundleVerifier(swarm=SWARM, own_peer_id=RECEIVER.peer_id, replay_cache=2)
    first, second, third = (encode(round_no=r) for r in (9, 10, 11))
    for data in (first, second, third):
        assert v.check(data, NOW).accepted
    assert v.check(third, NOW).reason == "replay"
    assert v.check(first, NOW).accepted  # forgotten: the oldest left the cache


def test_round_window_is_per_sender():
    past = BundleLimits().round_past
    v = verifier()
    assert v.check(encode(round_no=100), NOW).accepted
    assert v.check(encode(round_no=100 - past), NOW).accepted
    assert v.check(encode(round_no=100 - past - 1), NOW).reason == "round_window"
    # Rounds count per node: another sender far behind (a slower node) is fine.
    assert v.check(encode(round_no=3, identity=Identity.from_seed(b"o" * 32)), NOW).accepted
    # A rejected bundle does not move its sender's window.
    assert v.check(encode(round_no=101), NOW).accepted


def test_far_future_and_stale_creation_times():
    limits = BundleLimits()
    assert reason(encode(round_no=10**9, created=NOW + 10**6)) == "future"
    assert reason(encode(created=NOW + limits.max_clock_skew_s - 1)) is None
    assert reason(encode(created=NOW - limits.max_age_s - 1)) == "stale"


def test_wrong_swarm_and_own_bundle():
    assert reason(encode(swarm="other-swarm")) == "wrong_swarm"
    assert reason(encode(identity=RECEIVER)) == "own_bundle"


def test_non_canonical_json_is_refused():
    import json
    p = payload()
    assert reason(wire(json.dumps(p).encode())) == "non_canonical"  # spaces, ASCII escapes
    unsorted = json.dumps(dict(reversed(list(p.items()))), separators=(",", ":"), ensure_ascii=False).encode()
    assert reason(wire(unsorted)) == "non_canonical"
    assert reason(wire(canonical_json(p).replace(b'"created":1234.5', b'"created":1.2345e3'))) == "non_canonical"
    assert reason(wire(canonical_json(p) + b" ")) == "non_canonical"


def test_json_constants_and_bad_text_are_malformed():
    p = canonical_json(payload())
    assert reason(wire(p.replace(b'"created":1234.5', b'"created":NaN'))) == "malformed"
    assert reason(wire(p.replace(b'"created":1234.5', b'"created":Infinity'))) == "malformed"
    assert reason(wire(b"\xff\xfe" + p)) == "malformed"
    assert reason(wire(b"[" * 100_000)) == "malformed"
    assert reason(wire(p.replace(b'"model":"tiny-model"', b'"model":"\\ud800"'))) == "malformed"


def bad_group(**changes) -> dict:
    p = payload()
    p["groups"][0].update(changes)
    return p


@pytest.mark.parametrize("p", [
    payload(round="10"),
    payload(round=True),
    payload(round=-1),
    payload(round=10.0),
    payload(created="yesterday"),
    payload(created=10**400),
    payload(model=None),
    payload(groups={"not": "a list"}),
    payload(extra="field"),
    {k: v for k, v in payload().items() if k != "model"},
    ["not", "an", "object"],
    bad_group(rewards=["1.0", "0.0", "0.5", "0.75"]),
    bad_group(rewards=[1.0]),
    bad_group(rewards=[True, False, True, False]),
    bad_group(responses=[1, 2, 3, 4]),
    bad_group(responses="text", rewards="text"),
    bad_group(responses=[], rewards=[]),
    bad_group(metadata=["a list"]),
    bad_group(family=7),
    bad_group(hint="extra"),
])
def test_wrong_types_and_shapes(p):
    assert reason(wire(canonical_json(p))) == "bad_field"


def test_metadata_limits():
    deep: dict = {}
    node = deep
    for _ in range(20):
        node["x"] = {}
        node = node["x"]
    assert reason(wire(canonical_json(bad_group(metadata=deep)))) == "metadata_too_large"
    big = {"k": "v" * 20_000}
    assert reason(wire(canonical_json(bad_group(metadata=big)))) == "metadata_too_large"


def test_encode_refuses_values_json_cannot_carry():
    groups = make_groups(1, 2)
    groups[0].rewards[0] = math.nan
    with pytest.raises(ValueError):
        encode(groups=groups)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600))
def test_random_bytes_never_raise(data: bytes):
    verdict = verifier().check(MAGIC + bytes([VERSION]) + data, NOW)
    assert not verdict.accepted and verdict.reason in REASONS
    assert not verifier().check(data, NOW).accepted


VALID = encode()
VALID_DIGEST = verifier().check(VALID, NOW).bundle.digest


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(1, 255)), min_size=1, max_size=4),
       st.integers(0, len(VALID)))
def test_mutated_bundles_never_raise_nor_pass_as_new(flips, cut):
    data = bytearray(VALID)
    for pos, mask in flips:
        data[pos] ^= mask
    for candidate in (bytes(data), bytes(data[:cut]), VALID[:cut] + b"\x00" + VALID[cut:]):
        verdict = verifier().check(candidate, NOW)
        assert verdict.reason is None or verdict.reason in REASONS
        if verdict.accepted:  # only possible when the signed payload came out unchanged
            assert verdict.bundle.digest == VALID_DIGEST
        try:
            open_envelope(candidate)
        except BundleRejected:
            pass
