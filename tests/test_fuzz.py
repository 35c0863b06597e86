"""Fuzzing the receive path: every input a peer can send ends accepted, or rejected with a
reason, with bounded memory, and nothing escapes.

Inputs go through the whole receive path of a node (the guard's header peek,
``BundleVerifier.check``, then ``Exchange.receive`` with a real reasoning-gym Scorer), and come
in these kinds: random bytes, random bytes behind a valid header, truncated or bit-flipped
valid bundles, a valid bundle with a forged key or signature, a valid bundle again (replay),
bundles whose signed body is arbitrary bytes (invalid UTF-8, NaN, non-canonical or deeply
nested JSON), and validly signed payloads that are a valid bundle with hostile
changes (wrong types, missing or extra fields, huge or deeply nested fields, fields at and
past every limit, known task families with hostile metadata for the verifier).

``SWARMNODE_FUZZ_EXAMPLES`` sets how many inputs hypothesis generates (default 400, well
under a minute); the long run is ``SWARMNODE_FUZZ_EXAMPLES=10000``. With
``SWARMNODE_FUZZ_REPORT=FILE`` the counts by outcome and the peak memory go to FILE as JSON.
"""

from __future__ import annotations

import json
import os
import random
import time
import tracemalloc
from collections import Counter

import psutil
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmnode.config import NodeConfig
from swarmnode.records import Group, Question
from swarmnode.swarm.bundle import (
    MAGIC,
    REASONS,
    SIGNING_DOMAIN,
    VERSION,
    BundleLimits,
    BundleVerifier,
    canonical_json,
    encode_bundle,
)
from swarmnode.swarm.exchange import Exchange
from swarmnode.swarm.guard import GUARD_REASONS
from swarmnode.swarm.identity import Identity
from swarmnode.train.memtrim import release_free_memory
from swarmnode.train.tasks import Scorer

EXAMPLES = int(os.environ.get("SWARMNODE_FUZZ_EXAMPLES", "400"))
SWARM = "fuzz-swarm"
SENDER = Identity.from_seed(b"f" * 32)
RECEIVER = Identity.from_seed(b"g" * 32)
NOW = 1_700_000_000.0
LIMITS = BundleLimits()
# Families the receiver's Scorer knows (reasoning-gym verifiers run on hostile metadata), and not.
FAMILIES = ["chain_sum", "basic_arithmetic", "calendar_arithmetic", "base_conversion", "propositional_logic",
            "no_such_family"]
# One input may not allocate more than this while being judged (the wire cap is 256 KiB and the
# decompressed payload cap 2 MiB; parsed JSON costs several times its text).
PER_INPUT_PEAK = 48 * 2**20

STATS: Counter[str] = Counter()
PEAKS = {"per_input_bytes": 0}


def valid_groups(n: int = 2) -> list[Group]:
    return [Group(Question("chain_sum", f"What is {i} + 1?", str(i + 1), {"num_terms": 2, "num_digits": 1}),
                  [f"<answer>{i + 1}</answer>", "<answer>0</answer>"], [1.0, 0.0]) for i in range(n)]


VALID = encode_bundle(SENDER, swarm=SWARM, round_no=3, model="m", groups=valid_groups(), created=NOW)
_VALID_PAYLOAD = json.loads(zstandard.ZstdDecompressor().decompress(VALID[100:]))
TOP_KEYS = sorted(_VALID_PAYLOAD)
GROUP_KEYS = sorted(_VALID_PAYLOAD["groups"][0])


def wire(body: bytes, identity: Identity = SENDER) -> bytes:
    """A bundle whose signature is valid over ``body``, whatever ``body`` holds."""
    return (MAGIC + bytes([VERSION]) + identity.public_key + identity.sign(SIGNING_DOMAIN + body)
            + zstandard.ZstdCompressor(level=1).compress(body))


def deep(depth: int, leaf: object = 1) -> object:
    value = leaf
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=25)


def near(limit: int) -> st.SearchStrategy[str]:
    """Strings just under, at and past a limit (and empty)."""
    return st.sampled_from([0, limit - 1, limit, limit + 1]).map(lambda n: "x" * max(n, 0))


@st.composite
def hostile_payloads(draw) -> bytes:
    """A validly signed bundle: a valid payload with a few hostile changes."""
    payload = json.loads(json.dumps(_VALID_PAYLOAD))
    payload["round"] = draw(st.integers(0, 10))
    group = payload["groups"][0]
    group["family"] = draw(st.sampled_from(FAMILIES))
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["top", "group", "metadata", "size", "count", "delete", "add"]))
        if where == "top":
            payload[draw(st.sampled_from(TOP_KEYS))] = draw(json_values)
        elif where == "group":
            group[draw(st.sampled_from(GROUP_KEYS))] = draw(json_values)
        elif where == "metadata":
            group["metadata"] = draw(st.one_of(
                st.dictionaries(st.sampled_from(["num_terms", "num_digits", "expression", "year", "x"]), json_values,
                                max_size=4),
                st.integers(0, 40).map(lambda d: {"nested": deep(d)}),
                st.sampled_from([{"blob": "v" * (LIMITS.max_metadata_bytes + 1)}, {"n": 2**70}])))
        elif where == "size":
            field, limit = draw(st.sampled_from([
                ("question", LIMITS.max_question_chars), ("answer", LIMITS.max_answer_chars),
                ("family", LIMITS.max_name_chars), ("response", LIMITS.max_response_chars),
                ("swarm", LIMITS.max_name_chars), ("model", LIMITS.max_name_chars)]))
            text = draw(near(limit))
            if field == "response":
                group["responses"], group["rewards"] = [text], [1.0]
            elif field in ("swarm", "model"):
                payload[field] = text
            else:
                group[field] = text
        elif where == "count":
            n_groups = draw(st.sampled_from([0, LIMITS.max_groups, LIMITS.max_groups + 1]))
            n_resp = draw(st.sampled_from([1, LIMITS.max_responses, LIMITS.max_responses + 1]))
            group["responses"] = ["<answer>1</answer>"] * n_resp
            group["rewards"] = [1.0] * n_resp
            payload["groups"] = [group] * n_groups
        elif where == "delete":
            target, keys = draw(st.sampled_from([(payload, TOP_KEYS), (group, GROUP_KEYS)]))
            target.pop(draw(st.sampled_from(keys)), None)
        else:
            draw(st.sampled_from([payload, group]))[draw(st.text(min_size=1, max_size=8))] = draw(json_values)
    identity = draw(st.sampled_from([SENDER, SENDER, RECEIVER]))  # RECEIVER: the node's own key
    if identity is RECEIVER and isinstance(payload, dict) and payload.get("sender") == SENDER.peer_id:
        payload["sender"] = RECEIVER.peer_id
    return wire(canonical_json(payload), identity)


@st.composite
def signed_raw_bodies(draw) -> bytes:
    """A valid signature over a body that is not canonical JSON of an object."""
    kind = draw(st.sampled_from(["bytes", "bad_utf8", "constant", "spaced", "deep", "array"]))
    if kind == "bytes":
        body = draw(st.binary(max_size=300))
    elif kind == "bad_utf8":
        body = draw(st.text(max_size=30)).encode() + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80",
                                                                           b"\xf4\x90\x80\x80"]))
    elif kind == "constant":
        body = draw(st.sampled_from([b"NaN", b"Infinity", b'{"round":-Infinity}', b'{"a":NaN}']))
    elif kind == "spaced":
        body = json.dumps(_VALID_PAYLOAD).encode()  # valid JSON, not canonical
    elif kind == "deep":
        depth = draw(st.sampled_from([10, 1000, 100_000]))
        body = b'{"a":' * depth + b"1" + b"}" * depth
    else:
        body = canonical_json(draw(json_values))
    return wire(body)


@st.composite
def mutated_valid(draw) -> bytes:
    data = bytearray(VALID)
    for _ in range(draw(st.integers(0, 4))):
        pos = draw(st.integers(0, len(data) - 1))
        data[pos] ^= draw(st.integers(1, 255))
    return bytes(data[:draw(st.integers(0, len(data)))])


@st.composite
def forged_header(draw) -> bytes:
    """A valid bundle with its key or signature changed: it must not verify."""
    data = bytearray(VALID)
    data[draw(st.integers(4, 99))] ^= draw(st.integers(1, 255))
    return bytes(data)


peer_inputs = st.one_of(
    st.binary(max_size=400),
    st.binary(max_size=400).map(lambda b: MAGIC + bytes([VERSION]) + b),
    mutated_valid(),
    forged_header(),
    st.just(VALID),
    signed_raw_bodies(),
    hostile_payloads(),
)


def make_exchange() -> Exchange:
    scorer = Scorer()
    for family in FAMILIES:  # build each verifier's data set now: a one-time cost, not an input's
        scorer.score(Question(family, "q", "1", {}), "<answer>1</answer>")
    return Exchange(RECEIVER, NodeConfig(swarm=SWARM, solo=False), scorer, "m")


VERIFIER = BundleVerifier(swarm=SWARM, own_peer_id=RECEIVER.peer_id)
EXCHANGE = make_exchange()


def judge(data: bytes) -> None:
    """Run one input through every receiving step; assert it ends in a verdict with a known reason."""
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    admitted = EXCHANGE.admit(data)
    assert admitted is None or admitted in GUARD_REASONS
    verdict = VERIFIER.check(data, NOW)
    assert (verdict.accepted and verdict.reason is None) or (not verdict.accepted and verdict.reason in REASONS)
    received = EXCHANGE.receive(data, NOW)
    assert received.accepted == verdict.accepted and received.reason == verdict.reason
    if received.accepted:
        for g in EXCHANGE.pool.sample(100, random.Random(0), max_peer_share=1.0):
            assert all(0.0 <= r <= 1.0 for r in g.rewards)  # the receiver's own scores, never the claim
    peak = tracemalloc.get_traced_memory()[1] - base
    PEAKS["per_input_bytes"] = max(PEAKS["per_input_bytes"], peak)
    assert peak < PER_INPUT_PEAK
    STATS["inputs"] += 1
    STATS["accepted" if verdict.accepted else f"rejected:{verdict.reason}"] += 1


def _retained_rss_mb() -> float:
    """Resident memory still held once free heap pages are returned to the OS. (The process's
    peak RSS would also count transient allocations and whatever earlier tests left in the
    allocator, which vary from run to run; each input's own peak is bounded by tracemalloc.)"""
    release_free_memory()
    return psutil.Process().memory_info().rss / 2**20


def test_fuzz_receive_path():
    rss_before = _retained_rss_mb()
    started = time.monotonic()
    # Hypothesis builds its table of text characters for the first text strategy it checks
    # (json_values' strings; cached in .hypothesis/ once made): about 1 s here, but 13 s under
    # tracemalloc, which is on to bound each input's memory.
    json_values.validate()
    tracemalloc.start()
    try:
        run_fuzz()
        # hypothesis never repeats an input it has tried, and draws the node's own key only by
        # chance, so a replay and an own bundle are fed by hand: every deep check is reached.
        fresh = encode_bundle(Identity.from_seed(b"replayer" * 4), swarm=SWARM, round_no=3, model="m",
                              groups=valid_groups(), created=NOW)  # a sender with no round window yet
        judge(fresh)
        judge(fresh)
        judge(encode_bundle(RECEIVER, swarm=SWARM, round_no=3, model="m", groups=valid_groups(), created=NOW))
        pool_size = len(EXCHANGE.pool)
    finally:
        tracemalloc.stop()
    rss_growth = _retained_rss_mb() - rss_before
    report = {"inputs": STATS["inputs"], "seconds": round(time.monotonic() - started, 1),
              "per_input_peak_mb": round(PEAKS["per_input_bytes"] / 2**20, 2),
              "retained_rss_growth_mb": round(rss_growth, 1), "pool": pool_size,
              "outcomes": dict(sorted(STATS.items()))}
    print(json.dumps(report))
    if os.environ.get("SWARMNODE_FUZZ_REPORT"):
        with open(os.environ["SWARMNODE_FUZZ_REPORT"], "w") as f:
            json.dump(report, f, indent=1)
    assert STATS["inputs"] >= EXAMPLES * 0.9
    # The generators must reach the deep checks, not only the cheap ones.
    reached = {k.split(":", 1)[1] for k in STATS if k.startswith("rejected:")}
    assert {"malformed", "bad_signature", "non_canonical", "bad_field", "own_bundle", "replay"} <= reached, reached
    assert reached & {"field_too_long", "question_too_long", "response_too_long", "too_many_groups",
                      "too_many_responses", "metadata_too_large"}
    assert STATS["accepted"] > 0
    assert pool_size <= EXCHANGE.pool.max_total
    assert rss_growth < 300, f"retained RSS grew {rss_growth:.0f} MB over {STATS['inputs']} inputs"


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(peer_inputs)
def run_fuzz(data: bytes) -> None:
    judge(data)


def test_hand_made_monsters():
    """The worst single inputs, each once: bombs, depth, size."""
    bomb = MAGIC + bytes([VERSION]) + SENDER.public_key + bytes(64) + zstandard.ZstdCompressor(level=19).compress(
        b" " * (64 * 2**20))
    cases = {
        "decompression bomb (64 MiB of spaces in a few KiB)": (bomb, "too_large"),
        "wire over max_bytes": (MAGIC + bytes([VERSION]) + bytes(LIMITS.max_bytes), "too_large"),
        "100k-deep JSON, validly signed": (wire(b"[" * 100_000 + b"]" * 100_000), "malformed"),
        "invalid UTF-8, validly signed": (wire(b'{"sender":"\xff"}'), "malformed"),
        "metadata nested 200 deep": (wire(canonical_json({**_VALID_PAYLOAD, "groups": [
            {**_VALID_PAYLOAD["groups"][0], "metadata": {"d": deep(200)}}]})), "metadata_too_large"),
        "2 MiB payload of one response": (wire(canonical_json({**_VALID_PAYLOAD, "groups": [
            {**_VALID_PAYLOAD["groups"][0], "responses": ["y" * (2 * 2**20 - 2000)], "rewards": [1]}]})),
            "response_too_long"),
    }
    tracemalloc.start()
    try:
        for name, (data, expected) in cases.items():
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            assert VERIFIER.check(data, NOW).reason == expected, name
            assert EXCHANGE.receive(data, NOW).reason == expected, name
            assert tracemalloc.get_traced_memory()[1] - base < PER_INPUT_PEAK, name
    finally:
        tracemalloc.stop()
