"""The records of the ``hivemind`` transport, layout version 2 (``docs/protocol.md`` section 3).

One subkey per peer:

* ``<swarm>/v2/bundle/<PeerID>/<round>`` (:func:`bundle_key`), subkey = that PeerID, value =
  the signed bundle bytes, expiring :data:`BUNDLE_TTL` after the bundle's signed creation
  time (:func:`bundle_expiry`). One key per peer and round, so a reader fetches exactly the
  peers it chose and nothing else, and can fetch a peer's next round by name.
* ``<swarm>/v2/announce/<shard>`` (:func:`announce_key`), subkey = sender PeerID, value = the
  sender's latest round (an int) signed with the node key over key, subkey, round and
  expiration (:func:`announcement_message`), expiring :data:`~swarmnode.swarm.transport.pull.ANNOUNCE_TTL`
  after it was stored (:func:`announce_expiry`, so its age can be read back:
  :func:`announcement_age`). A peer announces in one shard only, :func:`shard_of` its PeerID
  of :data:`ANNOUNCE_SHARDS`, so no key is hot: each holds about N / :data:`ANNOUNCE_SHARDS`
  announcements, at most :data:`SUBKEYS_PER_KEY`.

This module imports no hivemind: it is the layout as plain functions, for the transport, its
record validator and a simulation alike.
"""

from __future__ import annotations

import functools
import hashlib
import struct

from swarmnode.swarm.transport.pull import ANNOUNCE_TTL

LAYOUT_VERSION = 2
BUNDLE_TTL = 300.0
ANNOUNCE_DOMAIN = b"swarmnode-announce-v2\x00"
# 16 divides 256, so one byte of a PeerID's hash picks a shard without bias.
ANNOUNCE_SHARDS = 16
# Signers held under one key (an announcement shard holds one per peer of the shard): every
# read of a key returns all of them, and every store traverses nodes that return them, so
# this bounds what a crowd of keys makes each read cost. Signers already held may always
# refresh their record.
SUBKEYS_PER_KEY = 1024


def bundle_key(swarm: str, peer_id: str, round_no: int) -> str:
    return f"{swarm}/v{LAYOUT_VERSION}/bundle/{peer_id}/{round_no}"


def announce_key(swarm: str, shard: int) -> str:
    return f"{swarm}/v{LAYOUT_VERSION}/announce/{shard}"


@functools.lru_cache(maxsize=1 << 14)  # a hash a call; a node meets a few thousand peers at most
def shard_of(peer_id: str) -> int:
    """The one announcement shard of ``peer_id``."""
    return hashlib.sha256(peer_id.encode()).digest()[0] % ANNOUNCE_SHARDS


def bundle_expiry(created: float) -> float:
    """When a bundle record made at ``created`` (its signed creation time) expires."""
    return created + BUNDLE_TTL


def announce_expiry(stored: float) -> float:
    """When an announcement stored at ``stored`` (DHT time) expires."""
    return stored + ANNOUNCE_TTL


def announcement_age(expiration: float, now: float) -> float:
    """Seconds since an announcement expiring at ``expiration`` was stored, at ``now``."""
    return max(0.0, now - (expiration - ANNOUNCE_TTL))


def announcement_message(key_id: bytes, subkey: bytes, expiration: float, body: bytes) -> bytes:
    """What an announcement's signature covers: the record's key (as the DHT addresses it),
    subkey and expiration, and ``body`` (the round, serialised)."""
    return ANNOUNCE_DOMAIN + key_id + subkey + struct.pack(">d", expiration) + body
