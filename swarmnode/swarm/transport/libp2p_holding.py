"""Serving, holding and pulling bundles on libp2p (protocol 3): the rules, without I/O.

* ``/swarmnode/bundle/2.0.0`` (:data:`BUNDLE_PROTOCOL`) serves bundles: request
  ``{"author": PeerID, "round": R}`` (:func:`bundle_request`), answer the bundle bytes or
  nothing. A node serves its own last :data:`OWN_ROUNDS` rounds and, if public, what private
  nodes left with it (:class:`BundleStore`).
* ``/swarmnode/hold/2.0.0`` (:data:`HOLD_PROTOCOL`): a private node (behind NAT: no one dials
  it, and two of them never connect) pushes each bundle to :func:`choose_holders`, up to
  :data:`HOLDERS` connected public peers, which keep it if :func:`hold_rejection` finds
  nothing wrong (:data:`HELD_ROUNDS` rounds an author, :data:`HELD_BYTES` in all) and serve
  it; its announcement lists them.
* A pull asks the announcement's :func:`pull_sources` in turn (the author, then its holders)
  until one answers with a bundle that passes :func:`pulled_rejection`: no longer than
  announced (else ``too_large``, read no further), hashing to the announced digest (else
  ``digest_mismatch``) and signed by the announcer (else the bundle reason). A pull that
  finds nothing is ``missing_payload``; all are counted against the announcer.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Collection, Iterable

from swarmnode.swarm.bundle import BundleRejected, canonical_json, open_envelope
from swarmnode.swarm.transport.announce import Announcement, is_count, is_peer_id
from swarmnode.swarm.transport.base import relay_rejection

BUNDLE_PROTOCOL = "/swarmnode/bundle/2.0.0"
HOLD_PROTOCOL = "/swarmnode/hold/2.0.0"
MAX_REQUEST_BYTES = 512
HOLDERS = 2                 # public peers a private node leaves each bundle with
# Rounds a node serves of its own and holds for a private author: a pull can come up to
# SHARE_TTL + PLAN_TTL (80 s, libp2p_spread) after the announcement, over 5 rounds of the
# benchmark's 15 s.
OWN_ROUNDS = 8
HELD_ROUNDS = 8
HELD_BYTES = 8 * 1024 * 1024
HELD_ACK = b"held"


def bundle_request(author: str, round_no: int) -> bytes:
    return canonical_json({"author": author, "round": round_no})


def parse_request(raw: bytes) -> tuple[str, int] | None:
    """(author, round) of a bundle request, or None for anything malformed. Never raises."""
    if len(raw) > MAX_REQUEST_BYTES:
        return None
    try:
        fields = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(fields, dict) or set(fields) != {"author", "round"}:
        return None
    author, round_no = fields["author"], fields["round"]
    return (author, round_no) if is_peer_id(author) and is_count(round_no) else None


class BundleStore:
    """Bundles a node serves, by (author, round): at most ``per_author`` rounds an author and
    ``max_bytes`` in all, oldest out. Thread-safe: written on the asyncio loop and in the host
    thread, read in the host thread."""

    def __init__(self, per_author: int, max_bytes: int):
        self.per_author = per_author
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, author: str, round_no: int, data: bytes) -> None:
        with self._lock:
            self._drop((author, round_no))
            self._items[(author, round_no)] = data
            self._bytes += len(data)
            rounds = [key for key in self._items if key[0] == author]
            for key in rounds[:max(0, len(rounds) - self.per_author)]:
                self._drop(key)
            while self._bytes > self.max_bytes:
                self._drop(next(iter(self._items)))

    def get(self, author: str, round_no: int) -> bytes | None:
        with self._lock:
            return self._items.get((author, round_no))

    def __len__(self) -> int:
        return len(self._items)

    def _drop(self, key: tuple[str, int]) -> None:
        data = self._items.pop(key, None)
        if data is not None:
            self._bytes -= len(data)


def round_of(data: bytes) -> int | None:
    """The signed round of a bundle envelope, None when it has none."""
    try:
        round_no = open_envelope(data)[1].get("round")
    except BundleRejected:
        return None
    return round_no if is_count(round_no) else None


def hold_rejection(pusher: str, data: bytes) -> tuple[int | None, str | None]:
    """(round, None) for a bundle ``pusher`` may leave here (signed by it, with a round), else
    (None, the reason counted against it: a bundle reason, or ``malformed``)."""
    reason = relay_rejection(pusher, data)
    if reason is not None:
        return None, reason
    round_no = round_of(data)
    return (round_no, None) if round_no is not None else (None, "malformed")


def choose_holders(public: Iterable[str], bootstrap: Collection[str]) -> list[str]:
    """The peers a private node leaves a bundle with: of the connected peers it can dial
    (``public``, in order), bootstrap peers first, at most :data:`HOLDERS`."""
    return sorted(public, key=lambda p: p not in bootstrap)[:HOLDERS]


def pull_sources(own_peer_id: str, author: str, announcement: Announcement) -> list[str]:
    """Whom a pull asks, in turn: the author, then each holder the announcement lists, not this node."""
    return [p for p in dict.fromkeys((author, *announcement.holders)) if p != own_peer_id]


def pulled_rejection(author: str, announcement: Announcement, data: bytes) -> str | None:
    """Why a pulled answer is not ``author``'s announced bundle (``too_large``,
    ``digest_mismatch``, a bundle reason), or None when it is."""
    if len(data) > announcement.size:
        return "too_large"
    if hashlib.sha256(data).hexdigest() != announcement.digest:
        return "digest_mismatch"
    return relay_rejection(author, data)


@dataclass
class Pulled:
    """What one pull got: the bundle (None when no source served one that checked out) and
    why the last rejected answer failed (see :func:`pulled_rejection`), if one did."""

    data: bytes | None
    reason: str | None = None
