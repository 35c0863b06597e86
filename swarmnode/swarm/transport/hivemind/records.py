"""The record rules of the ``hivemind`` transport: what a node's DHT stores and reads.

:class:`SwarmRecordValidator` runs in every node's DHT (and a relay's) and refuses any record
a peer could forge or that this swarm's protocol does not need (the layout:
:mod:`~swarmnode.swarm.transport.hivemind.layout`): a bundle record must be a valid bundle
(:func:`~swarmnode.swarm.bundle.open_envelope`, then
:func:`~swarmnode.swarm.bundle.parse_payload`) signed by the subkey's PeerID, for this swarm,
under the key of its sender and round, expiring no later than its signed ``created`` +
:data:`~swarmnode.swarm.transport.hivemind.layout.BUNDLE_TTL` (+ :data:`PUBLISH_SLACK`); an
announcement must sit in its signer's shard and carry the subkey owner's signature, which
covers its expiry; no record may expire later than its kind's TTL (+ :data:`MAX_CLOCK_SKEW`)
from now, or exceed its kind's size. Records of the version 1 layout (``<swarm>/heads``,
``<swarm>/rounds/<round>``) are refused as ``old_version``. hivemind runs the validator on
what it stores *and* on what it reads, so it holds no per-signer state; the storage bounds
(:mod:`~swarmnode.swarm.transport.hivemind.storage`) do. Refusals are counted in
:data:`COUNTS` of the process the validator runs in.

A bundle record is checked whole (decompressed, parsed, its signature verified: about
1.5 ms for a 116 KB bundle) only where it matters: on what a node reads (:data:`READING`
is set by the coroutines that read, so a forged record never shadows a genuine one) and,
on what peers store, only once the storage has room for it
(:meth:`SwarmRecordValidator.check_stored`, called by the storage). On a store the
validator itself checks only what costs nothing: size, expiry, and that the bundle's header
carries the subkey's public key. So a record the storage refuses (a crowd of new keys
beyond their share) costs no decompression and no signature.

In a private swarm (a :class:`~swarmnode.swarm.sealing.Sealer`) the record keys are made of
the swarm's keyed name (:attr:`SwarmRecordValidator.space`) and every value is sealed, bound
to its record key: the validator seals what this node stores
(:meth:`~SwarmRecordValidator.sign_value`), opens what it validates and what it hands back
(:meth:`~SwarmRecordValidator.strip_value`), and refuses a value that does not open as
``wrong_key`` (its size checked first, as ``too_large``) before any other check. What is
sealed is the public swarm's value, signature included.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, OrderedDict
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from hivemind.dht.validation import DHTRecord, RecordValidatorBase
from hivemind.utils import MSGPackSerializer, get_dht_time

from swarmnode.compat.hivemind import record_key_id
from swarmnode.swarm.bundle import BundleRejected, open_envelope, parse_payload
from swarmnode.swarm.guard import claimed_sender
from swarmnode.swarm.identity import public_key_from_peer_id, verify_signature
from swarmnode.swarm.sealing import ANNOUNCE, BUNDLE, OVERHEAD, Sealer, SealRefused
from swarmnode.swarm.transport.base import MAX_MESSAGE_BYTES, NodeIdentity
from swarmnode.swarm.transport.hivemind.layout import (
    ANNOUNCE_SHARDS,
    BUNDLE_TTL,
    SUBKEYS_PER_KEY,
    announce_key,
    announcement_message,
    bundle_expiry,
    bundle_key,
    shard_of,
)
from swarmnode.swarm.transport.pull import ANNOUNCE_TTL

SIGNATURE = 64
# How far a writer's clock may run ahead of this node's, for record expirations.
MAX_CLOCK_SKEW = 30.0
# Peers before the signed-expiry rule set a bundle record's expiry to "now + TTL" when they
# store it, a moment after the bundle was created; this much later than created + TTL is allowed.
PUBLISH_SLACK = 60.0
MAX_ANNOUNCE_BYTES = 96  # a msgpack int (at most 9 bytes) and the 64-byte signature, with room
MAX_BUNDLE_RECORD_BYTES = MAX_MESSAGE_BYTES + 16  # a bundle in a msgpack bin
# Announcements already checked (a shard is re-read while candidates are few): as many as the
# shards can hold, about 350 bytes each (5.6 MB at most).
VERIFIED_CACHE = ANNOUNCE_SHARDS * SUBKEYS_PER_KEY


@dataclass
class DhtCounts:
    """Counters of the process the validator and storage run in (the DHT process): records
    refused, by reason, and records evicted to keep within budget."""

    refused: Counter[str] = field(default_factory=Counter)
    evicted: int = 0


COUNTS = DhtCounts()
# True while a coroutine of this process reads records from peers (hivemind's lookups run in
# tasks that inherit it): then bundle records are checked whole by the validator, since
# nothing checks them later in the DHT process; on stores the storage does, once it has room.
READING: ContextVar[bool] = ContextVar("swarmnode_dht_reading", default=False)


def refuse(reason: str) -> bool:
    """Count a refusal for ``reason``; False, the validator's and storage's answer."""
    COUNTS.refused[reason] += 1
    return False


class SwarmRecordValidator(RecordValidatorBase):
    """Accepts only records this swarm's protocol writes, each within its bounds (see the
    module doc); refusals are counted by reason (``far_expiry``, ``too_large``,
    ``bad_signature``, ``bad_envelope``, ``not_a_bundle``, ``foreign_key``, ``wrong_shard``,
    ``old_version``, ``unsigned_expiry``, ``malformed``, and in a private swarm ``wrong_key``).

    ``identity`` (the local node's) signs the local node's announcements; a validator without
    one only checks. ``sealer``: the private swarm's (None: a public swarm). Stateless but for
    a memory of announcements already found valid (a shard is re-read while candidates are
    few; its signatures are not checked again).
    """

    def __init__(self, swarm: str, identity: NodeIdentity | None = None, sealer: Sealer | None = None):
        self.swarm = swarm
        self.sealer = sealer
        # What the record keys are made of: a private swarm's keyed name, so that an outsider
        # cannot find its records.
        self.space = sealer.name(swarm) if sealer is not None else swarm
        self._shards = {record_key_id(announce_key(self.space, shard)): shard for shard in range(ANNOUNCE_SHARDS)}
        self._old_heads_id = record_key_id(f"{self.space}/heads")
        self._identity = identity
        self._own_subkey = MSGPackSerializer.dumps(identity.peer_id) if identity is not None else None
        self._verified: OrderedDict[tuple[bytes, bytes, float], None] = OrderedDict()

    def __getstate__(self) -> dict:  # the memory stays behind when the validator goes to the DHT process
        return {**self.__dict__, "_verified": OrderedDict()}

    def validate(self, record: DHTRecord) -> bool:
        try:
            return self._validate(record)
        except Exception:  # any malformed field from a peer is a refusal, never an error
            return refuse("malformed")

    def _validate(self, record: DHTRecord) -> bool:
        if record.key == self._old_heads_id:
            return refuse("old_version")
        shard = self._shards.get(record.key)
        announcement = shard is not None
        if len(record.value) > self._max_bytes(announcement):
            return refuse("too_large")
        # Checked before the cache: what was valid stays valid as time passes, except this.
        ttl = ANNOUNCE_TTL if announcement else BUNDLE_TTL
        if record.expiration_time > get_dht_time() + ttl + MAX_CLOCK_SKEW:
            return refuse("far_expiry")
        if shard is None:
            reason = self.check_stored(record) if READING.get() else self._check_opened(record, self._check_header)
            return True if reason is None else refuse(reason)
        seen = (record.subkey, record.value, record.expiration_time)  # small: at most 96 bytes (+ the seal)
        if seen in self._verified:
            self._verified.move_to_end(seen)
            return True
        try:
            opened = self._opened(record, ANNOUNCE)
        except SealRefused as exc:
            return refuse(exc.reason)
        ok = self._check_announcement(opened, shard)
        if ok:
            self._verified[seen] = None
            while len(self._verified) > VERIFIED_CACHE:
                self._verified.popitem(last=False)
        return ok

    def _max_bytes(self, announcement: bool) -> int:
        plain = MAX_ANNOUNCE_BYTES if announcement else MAX_BUNDLE_RECORD_BYTES
        return plain + (OVERHEAD if self.sealer is not None else 0)

    def _opened(self, record: DHTRecord, purpose: str) -> DHTRecord:
        """``record`` with its value opened (a private swarm's), or as it is (a public swarm's);
        SealRefused when it does not open."""
        if self.sealer is None:
            return record
        limit = self._max_bytes(purpose == ANNOUNCE) - OVERHEAD
        return dataclasses.replace(record, value=self.sealer.open(purpose, record.value, limit, record.key))

    def _check_opened(self, record: DHTRecord, check: Callable[[DHTRecord], str | None]) -> str | None:
        """``check`` of the bundle record opened, or why it does not open."""
        try:
            return check(self._opened(record, BUNDLE))
        except SealRefused as exc:
            return exc.reason

    def _check_announcement(self, record: DHTRecord, shard: int) -> bool:
        subkey = MSGPackSerializer.loads(record.subkey)
        body, signature = record.value[:-SIGNATURE], record.value[-SIGNATURE:]
        if (not isinstance(subkey, str) or len(signature) != SIGNATURE
                or type(MSGPackSerializer.loads(body)) is not int):
            return refuse("malformed")
        if shard_of(subkey) != shard:  # one shard a peer, or a key could buy a place in every shard
            return refuse("wrong_shard")
        if not verify_signature(public_key_from_peer_id(subkey), self._signed_message(record, body), signature):
            return refuse("bad_signature")
        return True

    @staticmethod
    def _check_header(record: DHTRecord) -> str | None:
        """What costs nothing of a bundle record: a msgpack string subkey, and a msgpack bytes
        value whose bundle header carries the subkey's key (nothing decompressed or verified)."""
        subkey = MSGPackSerializer.loads(record.subkey)
        value = MSGPackSerializer.loads(record.value)
        if not isinstance(subkey, str) or not isinstance(value, bytes):
            return "malformed"
        sender = claimed_sender(value)
        if sender is None:
            return "bad_envelope"
        return None if sender == subkey else "foreign_key"

    def check_stored(self, record: DHTRecord) -> str | None:
        """Why a record about to be stored must not be kept (a refusal reason), or None: for a
        bundle record the whole check, envelope, payload, signer, swarm, key and expiry (an
        announcement was checked whole by :meth:`validate`). Never raises; does not count."""
        if record.key in self._shards:
            return None
        try:
            return self._check_opened(record, self._check_bundle)
        except Exception:  # any malformed field from a peer is a refusal, never an error
            return "malformed"

    def _check_bundle(self, record: DHTRecord) -> str | None:
        reason = self._check_header(record)
        if reason is not None:
            return reason
        subkey = MSGPackSerializer.loads(record.subkey)
        try:
            sender, payload = open_envelope(MSGPackSerializer.loads(record.value))
        except BundleRejected:
            return "bad_envelope"
        try:
            bundle = parse_payload(payload, "")
        except BundleRejected:
            return "not_a_bundle"
        if sender != subkey or bundle.swarm != self.swarm:
            return "foreign_key"
        if record.key != record_key_id(bundle_key(self.space, sender, bundle.round)):
            old = record.key == record_key_id(f"{self.space}/rounds/{bundle.round}")
            return "old_version" if old else "foreign_key"
        # The record's expiry is not signed; the bundle's creation time is.
        if record.expiration_time > bundle_expiry(bundle.created) + PUBLISH_SLACK:
            return "unsigned_expiry"
        return None

    def sign_value(self, record: DHTRecord) -> bytes:
        announcement = record.key in self._shards
        value = record.value
        if self._identity is not None and announcement and record.subkey == self._own_subkey:
            value += self._identity.sign(self._signed_message(record, record.value))
        if self.sealer is None:
            return value
        return self.sealer.seal(ANNOUNCE if announcement else BUNDLE, value, record.key)

    def strip_value(self, record: DHTRecord) -> bytes:
        announcement = record.key in self._shards
        try:
            value = self._opened(record, ANNOUNCE if announcement else BUNDLE).value
        except SealRefused:  # validated before, so never; a value no reader takes
            return MSGPackSerializer.dumps(None)
        return value[:-SIGNATURE] if announcement else value

    @staticmethod
    def _signed_message(record: DHTRecord, body: bytes) -> bytes:
        return announcement_message(record.key, record.subkey, record.expiration_time, body)
