"""Signed rollout bundles: what one node shares with the swarm in one round.

Wire format, version 2 (the full specification is ``docs/protocol.md``)::

    b"SNB" | version byte 0x02 | 32-byte Ed25519 public key | 64-byte signature | zstd(payload)

The payload is canonical JSON (sorted keys, no spaces, UTF-8, no NaN/Infinity). The signature
covers the version's signing domain + payload. Version 2 adds each group's difficulty
``level``; a node sends version 2 and still accepts version 1 (groups without a level).
A receiver trusts nothing before it has checked sizes
(with a hard cap on decompression), canonical form, the signature, that the key belongs to
the claimed sender PeerID, then every field's type and size, the swarm, the round window and
replay. No pickle, nothing executed on decode.

Failures are :class:`BundleRejected` with a short stable reason code (``REASONS``); the node
counts them against the sender and goes on.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import zstandard

from swarmnode.records import Group, Question
from swarmnode.swarm.identity import Identity, peer_id_from_public_key, verify_signature

MAGIC = b"SNB"
VERSION = 2
# The signing domain of each version this node accepts; it sends VERSION.
SIGNING_DOMAINS = {1: b"swarmnode-bundle-v1\x00", 2: b"swarmnode-bundle-v2\x00"}
SIGNING_DOMAIN = SIGNING_DOMAINS[VERSION]
HEADER_BYTES = len(MAGIC) + 1 + 32 + 64
_ZSTD_LEVEL = 3
_PAYLOAD_KEYS = frozenset({"swarm", "round", "sender", "model", "created", "groups"})
_GROUP_KEYS_V1 = frozenset({"family", "question", "answer", "metadata", "responses", "rewards"})
_GROUP_KEYS = {1: _GROUP_KEYS_V1, 2: _GROUP_KEYS_V1 | {"level"}}
# A claimed level outside this range is a malformed group (no ladder is anywhere near as long).
MAX_ABS_LEVEL = 1000

# Every reason a bundle can be rejected for; stable strings (they appear in metrics and the peer table).
REASONS = (
    "too_large",           # wire bytes over max_bytes, or the payload decompresses past max_payload_bytes
    "malformed",           # not a bundle: short, bad magic, bad zstd, not UTF-8 JSON, not an object
    "bad_version",         # a format version this node does not speak (it speaks 1 and 2)
    "non_canonical",       # the payload is not in canonical JSON form
    "bad_signature",       # the signature does not verify
    "peer_id_mismatch",    # the payload's sender is not the PeerID of the signing key
    "own_bundle",          # this node's own bundle came back
    "bad_field",           # a field missing, unknown, or of the wrong type or shape
    "wrong_swarm",         # another swarm's bundle
    "round_window",        # older than the sender's newest accepted round minus round_past
    "stale",               # created longer ago than max_age_s
    "future",              # created further ahead than max_clock_skew_s (a far-future bundle)
    "too_many_groups",
    "too_many_responses",
    "response_too_long",
    "question_too_long",
    "field_too_long",      # swarm, model, family or answer longer than allowed
    "metadata_too_large",  # metadata over max_metadata_bytes or nested deeper than max_metadata_depth
    "replay",              # this exact signed payload was accepted before
)


@dataclass(frozen=True)
class BundleLimits:
    """What a receiver accepts. The defaults leave room for 16 groups of 32 long responses."""

    max_bytes: int = 256 * 1024             # wire size (compressed)
    max_payload_bytes: int = 2 * 1024 * 1024  # decompressed payload; decompression stops here
    max_groups: int = 16
    max_responses: int = 32
    max_response_chars: int = 8192
    max_question_chars: int = 8192
    max_answer_chars: int = 2048
    max_name_chars: int = 256               # swarm, model and family names
    max_metadata_bytes: int = 16 * 1024     # canonical JSON size of one group's metadata
    max_metadata_depth: int = 8
    # Round numbers are per node (nodes run at their own pace), so the round window is per sender:
    # a bundle more than round_past rounds behind that sender's newest accepted one is stale.
    round_past: int = 5
    max_age_s: float = 3600.0               # older bundles are stale whatever their round
    max_clock_skew_s: float = 300.0         # how far a sender's clock may run ahead of ours


class BundleRejected(Exception):
    """A bundle failed a check; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str = ""):
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


@dataclass
class Bundle:
    """A verified bundle. ``groups`` carry the sender's rewards (informational) and source=sender."""

    swarm: str
    round: int
    sender: str
    model: str
    created: float
    groups: list[Group]
    # Replay key: sha256 hex of the signed message (domain + canonical payload). Not of the wire
    # bytes: anyone can recompress a bundle into new wire bytes with the same valid signature.
    digest: str


@dataclass
class Verdict:
    accepted: bool
    reason: str | None
    sender: str | None  # the authenticated sender; None when the signature was never verified
    bundle: Bundle | None


def canonical_json(value: Any) -> bytes:
    """The one byte encoding of a JSON value that bundles use; ValueError for NaN/Infinity."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def group_fields(g: Group) -> dict[str, Any]:
    """A group as a bundle carries it (its rewards as they stand); :func:`parse_group` reads it back."""
    return {"family": g.question.family, "question": g.question.question, "answer": g.question.answer,
            "metadata": dict(g.question.metadata), "responses": list(g.responses),
            "rewards": [float(r) for r in g.rewards], "level": g.level}


def encode_bundle(identity: Identity, *, swarm: str, round_no: int, model: str, groups: list[Group],
                  created: float | None = None) -> bytes:
    """The signed wire bytes of a bundle of ``groups`` (their rewards go along as the sender's).

    Raises ValueError for values JSON cannot carry exactly (NaN or infinite rewards).
    """
    return signed_bundle(identity, swarm=swarm, round_no=round_no, model=model, groups=groups, created=created)[0]


def signed_bundle(identity: Identity, *, swarm: str, round_no: int, model: str, groups: list[Group],
                  created: float | None = None) -> tuple[bytes, str]:
    """:func:`encode_bundle`'s bytes and the bundle's digest (what :attr:`Bundle.digest` will be)."""
    payload = {
        "swarm": swarm,
        "round": int(round_no),
        "sender": identity.peer_id,
        "model": model,
        "created": float(time.time() if created is None else created),
        "groups": [group_fields(g) for g in groups],
    }
    body = canonical_json(payload)
    message = SIGNING_DOMAIN + body
    wire = (MAGIC + bytes([VERSION]) + identity.public_key + identity.sign(message)
            + zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(body))
    return wire, hashlib.sha256(message).hexdigest()


def _decompress(blob: bytes, cap: int) -> bytes:
    """Decompress one zstd frame, reading at most ``cap + 1`` bytes whatever the frame claims."""
    out = bytearray()
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob)) as reader:
        while len(out) <= cap:
            chunk = reader.read(cap + 1 - len(out))
            if not chunk:
                break
            out += chunk
    if len(out) > cap:
        raise BundleRejected("too_large", f"payload decompresses past {cap} bytes")
    return bytes(out)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not allowed")


def _open(data: object, limits: BundleLimits) -> tuple[str, dict, str, int]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BundleRejected("malformed", "not bytes")
    data = bytes(data)
    if len(data) > limits.max_bytes:
        raise BundleRejected("too_large", f"{len(data)} bytes > {limits.max_bytes}")
    if len(data) <= HEADER_BYTES or data[:len(MAGIC)] != MAGIC:
        raise BundleRejected("malformed", "not a swarmnode bundle")
    version = data[len(MAGIC)]
    if version not in SIGNING_DOMAINS:
        raise BundleRejected("bad_version", f"version {version}")
    public_key = data[4:36]
    signature = data[36:100]
    try:
        body = _decompress(data[HEADER_BYTES:], limits.max_payload_bytes)
    except zstandard.ZstdError as exc:
        raise BundleRejected("malformed", f"zstd: {exc}") from None
    try:
        payload = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
        canonical = canonical_json(payload)
    except (ValueError, RecursionError) as exc:  # UnicodeError and JSONDecodeError are ValueErrors
        raise BundleRejected("malformed", f"payload is not JSON: {type(exc).__name__}") from None
    if canonical != body:
        raise BundleRejected("non_canonical")
    message = SIGNING_DOMAINS[version] + body
    if not verify_signature(public_key, message, signature):
        raise BundleRejected("bad_signature")
    if not isinstance(payload, dict) or not isinstance(payload.get("sender"), str):
        raise BundleRejected("bad_field", "payload is not an object with a sender")
    sender = payload["sender"]
    if sender != peer_id_from_public_key(public_key):
        raise BundleRejected("peer_id_mismatch", f"claims {sender!r:.80}")
    return sender, payload, hashlib.sha256(message).hexdigest(), version


def open_envelope(data: object, limits: BundleLimits = BundleLimits()) -> tuple[str, dict]:
    """Check a bundle's envelope and return ``(sender PeerID, payload dict)``; ``data`` is
    whatever a peer sent (anything but bytes is refused).

    Checks size, magic and version, decompresses under the cap, requires canonical JSON,
    verifies the signature and that the sender is the signing key's PeerID. It does not look
    at the payload's other fields (see :class:`BundleVerifier`). Cheap enough for a record
    validator; raises nothing but :class:`BundleRejected`.
    """
    sender, payload, _, _ = _open_guarded(data, limits)
    return sender, payload


def _open_guarded(data: object, limits: BundleLimits) -> tuple[str, dict, str, int]:
    try:
        return _open(data, limits)
    except BundleRejected:
        raise
    except Exception as exc:  # peer input must never raise anything else; the checks above should cover it
        raise BundleRejected("malformed", f"{type(exc).__name__}") from None


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _depth_within(value: Any, depth: int) -> bool:
    """True when ``value`` nests at most ``depth`` containers deep (recursion bounded by ``depth``)."""
    if isinstance(value, (dict, list)):
        if depth <= 0:
            return False
        children = value.values() if isinstance(value, dict) else value
        return all(_depth_within(v, depth - 1) for v in children)
    return True


def _text(value: Any, limit: int, reason: str, what: str) -> str:
    if not isinstance(value, str):
        raise BundleRejected("bad_field", f"{what} is not a string")
    if len(value) > limit:
        raise BundleRejected(reason, f"{what}: {len(value)} chars > {limit}")
    return value


def parse_group(raw: Any, sender: str, limits: BundleLimits = BundleLimits(), version: int = VERSION) -> Group:
    """The group of a bundle's ``groups`` entry from ``sender`` (source ``sender``), every field's
    type and size checked; raises :class:`BundleRejected`."""
    if not isinstance(raw, dict) or raw.keys() != _GROUP_KEYS[version]:
        raise BundleRejected("bad_field", "a group does not have exactly the group fields")
    level = raw.get("level")
    if level is not None and (isinstance(level, bool) or not isinstance(level, int) or abs(level) > MAX_ABS_LEVEL):
        raise BundleRejected("bad_field", f"level is not null or an integer within +-{MAX_ABS_LEVEL}")
    family = _text(raw["family"], limits.max_name_chars, "field_too_long", "family")
    question = _text(raw["question"], limits.max_question_chars, "question_too_long", "question")
    answer = _text(raw["answer"], limits.max_answer_chars, "field_too_long", "answer")
    metadata = raw["metadata"]
    if not isinstance(metadata, dict):
        raise BundleRejected("bad_field", "metadata is not an object")
    if not _depth_within(metadata, limits.max_metadata_depth):
        raise BundleRejected("metadata_too_large", f"nested deeper than {limits.max_metadata_depth}")
    if len(canonical_json(metadata)) > limits.max_metadata_bytes:
        raise BundleRejected("metadata_too_large", f"over {limits.max_metadata_bytes} bytes")
    responses, rewards = raw["responses"], raw["rewards"]
    if not isinstance(responses, list) or not isinstance(rewards, list) or not responses:
        raise BundleRejected("bad_field", "responses and rewards must be lists, responses not empty")
    if len(responses) > limits.max_responses:
        raise BundleRejected("too_many_responses", f"{len(responses)} > {limits.max_responses}")
    if len(rewards) != len(responses):
        raise BundleRejected("bad_field", "one reward per response")
    for r in responses:
        _text(r, limits.max_response_chars, "response_too_long", "response")
    if not all(_is_number(x) for x in rewards):
        raise BundleRejected("bad_field", "a reward is not a finite number")
    return Group(Question(family, question, answer, metadata, level), list(responses),
                 [float(x) for x in rewards], source=sender)


def parse_payload(payload: dict, digest: str, limits: BundleLimits = BundleLimits(), version: int = VERSION) -> Bundle:
    """A :class:`Bundle` from an authenticated payload of format ``version``, checking every
    field's type and size."""
    if payload.keys() != _PAYLOAD_KEYS:
        raise BundleRejected("bad_field", "the payload does not have exactly the bundle fields")
    swarm = _text(payload["swarm"], limits.max_name_chars, "field_too_long", "swarm")
    model = _text(payload["model"], limits.max_name_chars, "field_too_long", "model")
    round_no, created, groups = payload["round"], payload["created"], payload["groups"]
    if isinstance(round_no, bool) or not isinstance(round_no, int) or round_no < 0:
        raise BundleRejected("bad_field", "round is not an integer >= 0")
    if not _is_number(created):
        raise BundleRejected("bad_field", "created is not a finite number")
    if not isinstance(groups, list):
        raise BundleRejected("bad_field", "groups is not a list")
    if len(groups) > limits.max_groups:
        raise BundleRejected("too_many_groups", f"{len(groups)} > {limits.max_groups}")
    sender = payload["sender"]
    return Bundle(swarm, round_no, sender, model, float(created),
                  [parse_group(g, sender, limits, version) for g in groups], digest)


class BundleVerifier:
    """A node's receiving end: every check of a bundle, and the memory of what it accepted.

    Thread-safe (transports may call it from their own threads). ``replay_cache`` bounds the
    digests (and senders' newest rounds) remembered; the oldest are forgotten first, and a
    bundle that old is rejected as stale by its creation time anyway.
    """

    def __init__(self, *, swarm: str, own_peer_id: str, limits: BundleLimits = BundleLimits(),
                 replay_cache: int = 100_000):
        self.swarm = swarm
        self.own_peer_id = own_peer_id
        self.limits = limits
        self._replay_cache = replay_cache
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._newest_round: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, data: bytes, now: float | None = None) -> Verdict:
        """Accept or reject ``data`` at time ``now`` (default: the wall clock); never raises.
        Only accepted bundles enter the replay memory and move their sender's round window."""
        sender = None
        try:
            sender, payload, digest, version = _open_guarded(data, self.limits)
            bundle = self._check_payload(payload, digest, time.time() if now is None else now, version)
        except BundleRejected as exc:
            return Verdict(False, exc.reason, sender, None)
        except Exception:  # a bug here must cost one bundle, never the node's round
            return Verdict(False, "malformed", sender, None)
        return Verdict(True, None, sender, bundle)

    def _check_payload(self, payload: dict, digest: str, now: float, version: int) -> Bundle:
        if payload["sender"] == self.own_peer_id:
            raise BundleRejected("own_bundle")
        bundle = parse_payload(payload, digest, self.limits, version)
        if bundle.swarm != self.swarm:
            raise BundleRejected("wrong_swarm", bundle.swarm)
        if bundle.created > now + self.limits.max_clock_skew_s:
            raise BundleRejected("future", f"created {bundle.created - now:.0f} s in the future")
        if bundle.created < now - self.limits.max_age_s:
            raise BundleRejected("stale", f"created {now - bundle.created:.0f} s ago")
        with self._lock:
            newest = self._newest_round.get(bundle.sender)
            if newest is not None and bundle.round < newest - self.limits.round_past:
                raise BundleRejected("round_window", f"round {bundle.round}, sender is at {newest}")
            if digest in self._seen:
                self._seen.move_to_end(digest)
                raise BundleRejected("replay")
            self._seen[digest] = None
            while len(self._seen) > self._replay_cache:
                self._seen.popitem(last=False)
            self._newest_round[bundle.sender] = max(bundle.round, newest or 0)
            self._newest_round.move_to_end(bundle.sender)
            while len(self._newest_round) > self._replay_cache:
                self._newest_round.popitem(last=False)
        return bundle
