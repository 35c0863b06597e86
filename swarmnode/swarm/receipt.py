"""Signed receipts: a trainer tells the authors of the groups it trained on what they gave it.

After each update a node makes one receipt per author whose groups entered it: its own PeerID
and round, the author's bundles (round and digest), which of their groups (by
:func:`group_key`), the mean reward each scored under the trainer's own verifier and whether it
carried signal. The receipts ride in the trainer's next bundle as a zstd *skippable frame*
placed between the bundle header and the bundle's payload frame (``docs/protocol.md``)::

    bundle header | 0x184D2A5E (LE) | u32 LE length | b"SNR" | 0x01 | canonical JSON | zstd(payload)

A node of the previous release decompresses past a skippable frame, so it reads the same
payload, verifies the same signature and accepts the bundle; the receipts are signed apart
(domain :data:`SIGNING_DOMAIN`, distinct from the bundle's), so whoever strips the section
costs the author its credit and can forge nothing. A receiver checks the section's size
before parsing it and each receipt's fields, size and signature before the author's ledger
(:mod:`swarmnode.swarm.ledger`) looks at it. No pickle; failures are :class:`ReceiptRejected`
with a stable reason of :data:`REASONS`.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from dataclasses import dataclass
from typing import Any

from swarmnode.records import Group
from swarmnode.swarm.bundle import HEADER_BYTES, canonical_json
from swarmnode.swarm.identity import Identity, public_key_from_peer_id, verify_signature

VERSION = 1
SIGNING_DOMAIN = b"swarmnode-receipt-v1\x00"
SECTION_MAGIC = b"SNR"
# A zstd skippable frame's magic (any of 0x184D2A50-0x184D2A5F): decoders skip its content.
SKIPPABLE_MAGIC = struct.pack("<I", 0x184D2A5E)
_FRAME_HEADER = len(SKIPPABLE_MAGIC) + 4
_PAYLOAD_KEYS = frozenset({"swarm", "trainer", "round", "author", "created", "bundles"})
_BUNDLE_KEYS = frozenset({"round", "digest", "groups"})
_GROUP_KEYS = frozenset({"key", "reward", "signal"})
_KEY_CHARS = 32
_DIGEST_CHARS = 64

REASONS = (
    "too_large",        # the section or one receipt over its size cap, or too many receipts
    "malformed",        # not a receipt section: bad magic, not UTF-8 JSON, wrong shape
    "bad_version",      # a receipt section version this node does not speak (it speaks 1)
    "bad_field",        # a field missing, unknown, or of the wrong type or shape
    "bad_signature",    # the signature is not the trainer's key's
    "wrong_trainer",    # the receipt names another trainer than the bundle's sender
    "wrong_swarm",
    "stale",            # created too long ago (or too far in the future)
    "unknown_bundle",   # the author never shared that bundle, or it is no longer in its memory
    "unknown_group",    # the bundle named does not hold one of the groups claimed
    "replay",           # this trainer's receipt of that round was counted already
    "nothing_new",      # every group it credits was credited by this trainer already
    "bundle_full",      # that bundle already has credits from as many trainers as a bundle may
    "pending_full",     # a newcomer's receipt pushed out of the bounded waiting room
    "disk",             # the ledger could not be written (the receipt is lost, the node goes on)
)


@dataclass(frozen=True)
class ReceiptLimits:
    """What an author accepts. One receipt is a few hundred bytes; the caps leave ample room."""

    max_section_bytes: int = 48 * 1024
    max_receipts: int = 64            # receipts in one section (one per author the trainer trained on)
    max_receipt_bytes: int = 4096     # canonical payload of one receipt
    max_bundles: int = 8              # author bundles one receipt credits
    max_groups: int = 16              # groups credited per bundle (a bundle's own cap)
    max_age_s: float = 86_400.0
    max_clock_skew_s: float = 300.0


class ReceiptRejected(Exception):
    """A receipt or section failed a check; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str = ""):
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


@dataclass(frozen=True)
class Credit:
    """One group of an author's bundle as a trainer scored it."""

    key: str
    reward: float
    signal: bool


@dataclass(frozen=True)
class Receipt:
    """A verified receipt: ``trainer`` trained in its round ``round`` on ``author``'s groups,
    ``bundles`` mapping each bundle (round, digest) to its credits."""

    swarm: str
    trainer: str
    round: int
    author: str
    created: float
    bundles: tuple[tuple[int, str, tuple[Credit, ...]], ...]
    signature: str


def group_key(group: Group) -> str:
    """The short stable name of a group's question across nodes: 128 bits of sha256 over
    canonical ``[family, question, answer]`` (what a bundle carries verbatim)."""
    q = group.question
    return hashlib.sha256(canonical_json([q.family, q.question, q.answer])).hexdigest()[:_KEY_CHARS]


def make_receipts(identity: Identity, *, swarm: str, round_no: int, groups: list[Group],
                  created: float) -> list[dict]:
    """The signed receipts of an update on ``groups`` (one per author of the external groups
    that know their bundle), each ``{"payload": ..., "signature": hex}`` ready for a section."""
    by_author: dict[str, dict[tuple[int, str], dict[str, Credit]]] = {}
    for g in groups:
        if g.is_local or g.origin is None:
            continue
        mean = sum(g.rewards) / len(g.rewards) if g.rewards else 0.0
        credits = by_author.setdefault(g.source, {}).setdefault(g.origin, {})
        credits[group_key(g)] = Credit(group_key(g), round(mean, 6), g.has_signal())
    out = []
    for author, bundles in sorted(by_author.items()):
        payload = {"swarm": swarm, "trainer": identity.peer_id, "round": int(round_no), "author": author,
                   "created": float(created),
                   "bundles": [{"round": r, "digest": d,
                                "groups": [{"key": c.key, "reward": c.reward, "signal": c.signal}
                                           for c in sorted(credits.values(), key=lambda c: c.key)]}
                               for (r, d), credits in sorted(bundles.items())]}
        body = canonical_json(payload)
        out.append({"payload": payload, "signature": identity.sign(SIGNING_DOMAIN + body).hex()})
    return out


def attach(bundle: bytes, receipts: list[dict], limits: ReceiptLimits = ReceiptLimits(),
           max_bytes: int | None = None) -> bytes:
    """``bundle`` with ``receipts`` in its skippable frame; the bundle unchanged when there are
    none. Receipts past the section's caps, or that would take the whole past ``max_bytes``
    (a bundle's wire cap, :attr:`BundleLimits.max_bytes`, which every receiver checks first),
    are left out from the last."""
    receipts = receipts[:limits.max_receipts]
    room = limits.max_section_bytes
    if max_bytes is not None:
        room = min(room, max_bytes - len(bundle) - _FRAME_HEADER)
    while receipts:
        content = SECTION_MAGIC + bytes([VERSION]) + canonical_json({"receipts": receipts})
        if len(content) <= room:
            frame = SKIPPABLE_MAGIC + struct.pack("<I", len(content)) + content
            return bundle[:HEADER_BYTES] + frame + bundle[HEADER_BYTES:]
        receipts = receipts[:-1]
    return bundle


def split(data: bytes) -> tuple[bytes, bytes | None]:
    """``(the bundle without its receipt frame, the frame's content or None)``; never raises.
    A frame whose length runs past the data is left in place (the bundle checks then refuse it)."""
    start = HEADER_BYTES
    if len(data) < start + _FRAME_HEADER or data[start:start + 4] != SKIPPABLE_MAGIC:
        return data, None
    (length,) = struct.unpack("<I", data[start + 4:start + 8])
    end = start + _FRAME_HEADER + length
    if end > len(data):
        return data, None
    return data[:start] + data[end:], data[start + _FRAME_HEADER:end]


def open_section(content: bytes, limits: ReceiptLimits = ReceiptLimits()) -> list[Any]:
    """The raw receipt entries of a section's content (not yet verified); :class:`ReceiptRejected`."""
    if len(content) > limits.max_section_bytes:
        raise ReceiptRejected("too_large", f"section of {len(content)} bytes > {limits.max_section_bytes}")
    if content[:len(SECTION_MAGIC)] != SECTION_MAGIC or len(content) <= len(SECTION_MAGIC):
        raise ReceiptRejected("malformed", "not a receipt section")
    if content[len(SECTION_MAGIC)] != VERSION:
        raise ReceiptRejected("bad_version", f"version {content[len(SECTION_MAGIC)]}")
    try:
        section = json.loads(content[len(SECTION_MAGIC) + 1:].decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ReceiptRejected("malformed", f"section is not JSON: {type(exc).__name__}") from None
    if not isinstance(section, dict) or not isinstance(section.get("receipts"), list):
        raise ReceiptRejected("malformed", "section is not an object with a receipts list")
    if len(section["receipts"]) > limits.max_receipts:
        raise ReceiptRejected("too_large", f"{len(section['receipts'])} receipts > {limits.max_receipts}")
    return section["receipts"]


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not allowed")


def verify(entry: Any, *, sender: str, swarm: str, now: float,
           limits: ReceiptLimits = ReceiptLimits()) -> Receipt:
    """A section entry checked whole: shape, sizes, canonical form, the trainer's signature,
    that the trainer is ``sender`` (the bundle's authenticated sender), the swarm and its age.
    Raises :class:`ReceiptRejected`; whether the author shared what it names is the ledger's check."""
    if not isinstance(entry, dict) or entry.keys() != {"payload", "signature"}:
        raise ReceiptRejected("bad_field", "an entry is not {payload, signature}")
    payload, signature = entry["payload"], entry["signature"]
    if not isinstance(payload, dict) or not isinstance(signature, str) or len(signature) != 128:
        raise ReceiptRejected("bad_field", "payload is not an object or signature not 128 hex chars")
    try:
        body = canonical_json(payload)
        sig = bytes.fromhex(signature)
    except ValueError:
        raise ReceiptRejected("bad_field", "signature is not hex") from None
    if len(body) > limits.max_receipt_bytes:
        raise ReceiptRejected("too_large", f"receipt of {len(body)} bytes > {limits.max_receipt_bytes}")
    if payload.keys() != _PAYLOAD_KEYS:
        raise ReceiptRejected("bad_field", "the payload does not have exactly the receipt fields")
    trainer = payload["trainer"]
    if not isinstance(trainer, str):
        raise ReceiptRejected("bad_field", "trainer is not a string")
    if trainer != sender:
        raise ReceiptRejected("wrong_trainer", f"names {trainer!r:.80}")
    try:
        key = public_key_from_peer_id(trainer)
    except ValueError:
        raise ReceiptRejected("bad_field", "trainer is not an Ed25519 PeerID") from None
    if not verify_signature(key, SIGNING_DOMAIN + body, sig):
        raise ReceiptRejected("bad_signature")
    receipt = _parse(payload, signature, limits)
    if receipt.swarm != swarm:
        raise ReceiptRejected("wrong_swarm", receipt.swarm[:80])
    if not now - limits.max_age_s <= receipt.created <= now + limits.max_clock_skew_s:
        raise ReceiptRejected("stale", f"created {now - receipt.created:.0f} s ago")
    return receipt


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_hex(value: Any, n: int) -> bool:
    return isinstance(value, str) and len(value) == n and all(c in "0123456789abcdef" for c in value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _parse(payload: dict, signature: str, limits: ReceiptLimits) -> Receipt:
    swarm, author, round_no, created, bundles = (payload[k] for k in ("swarm", "author", "round", "created", "bundles"))
    if not isinstance(swarm, str) or not isinstance(author, str) or not _is_int(round_no) or not _is_number(created):
        raise ReceiptRejected("bad_field", "swarm, author, round or created of the wrong type")
    if not isinstance(bundles, list) or not bundles or len(bundles) > limits.max_bundles:
        raise ReceiptRejected("bad_field", f"bundles is not a list of 1 to {limits.max_bundles}")
    parsed = []
    for b in bundles:
        if not isinstance(b, dict) or b.keys() != _BUNDLE_KEYS or not _is_int(b["round"]) \
                or not _is_hex(b["digest"], _DIGEST_CHARS) or not isinstance(b["groups"], list) \
                or not 0 < len(b["groups"]) <= limits.max_groups:
            raise ReceiptRejected("bad_field", "a bundle is not {round, digest, groups}")
        credits = []
        for g in b["groups"]:
            if not isinstance(g, dict) or g.keys() != _GROUP_KEYS or not _is_hex(g["key"], _KEY_CHARS) \
                    or not _is_number(g["reward"]) or not isinstance(g["signal"], bool):
                raise ReceiptRejected("bad_field", "a group is not {key, reward, signal}")
            credits.append(Credit(g["key"], float(g["reward"]), g["signal"]))
        parsed.append((b["round"], b["digest"], tuple(credits)))
    return Receipt(swarm, payload["trainer"], round_no, author, float(created), tuple(parsed), signature)
