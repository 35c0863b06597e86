"""Serving, holding and pulling bundles on libp2p (protocol 3): the rules, without I/O.

* ``/swarmnode/bundle/2.0.0`` (:data:`BUNDLE_PROTOCOL`) serves bundles: request
  ``{"author": PeerID, "round": R}`` (:func:`bundle_request`), answer the bundle bytes or
  nothing. A node serves its own last :data:`OWN_ROUNDS` rounds and, if public, what private
  nodes left with it (:class:`BundleStore`).
* ``/swarmnode/hold/2.0.0`` (:data:`HOLD_PROTOCOL`): a private node (behind NAT: no one dials
  it, and two of them never connect) pushes each bundle to :func:`choose_holders`, up to
  :data:`HOLDERS` connected public peers, which keep it if :func:`hold_rejection` finds
  nothing wrong and serve it (:data:`HELD_ROUNDS` rounds an author, :data:`HELD_BYTES` in
  all split over authors as :class:`~swarmnode.swarm.transport.room.Room` says, so a crowd
  of new keys holds at most a quarter; a bundle the room would refuse is refused before it
  is checked); its announcement lists them.
* A pull asks the announcement's :func:`pull_sources` in turn (the author, then its holders)
  until one answers with a bundle that passes :func:`pulled_rejection`: no longer than
  announced (else ``too_large``, read no further), hashing to the announced digest (else
  ``digest_mismatch``) and signed by the announcer (else the bundle reason). A pull that
  finds nothing is ``missing_payload``; all are counted against the announcer.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from dataclasses import dataclass
from typing import Callable, Collection, Iterable

from swarmnode.swarm.bundle import BundleRejected, canonical_json, open_envelope
from swarmnode.swarm.transport.base import MAX_MESSAGE_BYTES, relay_rejection
from swarmnode.swarm.transport.libp2p.announce import Announcement, is_count, is_peer_id
from swarmnode.swarm.transport.libp2p.wire import loads_bounded
from swarmnode.swarm.transport.room import NEWCOMER_SHARE, Room

BUNDLE_PROTOCOL = "/swarmnode/bundle/2.0.0"
HOLD_PROTOCOL = "/swarmnode/hold/2.0.0"
MAX_REQUEST_BYTES = 512
HOLDERS = 2                 # public peers a private node leaves each bundle with
# Rounds a node serves of its own and holds for a private author: a pull can come up to
# SHARE_TTL + PLAN_TTL (80 s, libp2p.spread) after the announcement, over 5 rounds of the
# benchmark's 15 s.
OWN_ROUNDS = 8
HELD_ROUNDS = 8
HELD_BYTES = 8 * 1024 * 1024
HELD_SIGNER_BYTES = 1024 * 1024  # one author's held bundles (a few large ones, hundreds of usual ones)
HELD_ACK = b"held"


def bundle_request(author: str, round_no: int) -> bytes:
    return canonical_json({"author": author, "round": round_no})


def parse_request(raw: bytes) -> tuple[str, int] | None:
    """(author, round) of a bundle request, or None for anything malformed. Never raises.
    Fields a later release may add are ignored, within :data:`MAX_REQUEST_BYTES`."""
    fields = loads_bounded(raw, MAX_REQUEST_BYTES)
    if not isinstance(fields, dict) or not {"author", "round"} <= set(fields):
        return None
    author, round_no = fields["author"], fields["round"]
    return (author, round_no) if is_peer_id(author) and is_count(round_no) else None


class BundleStore:
    """Bundles a node serves, by (author, round): at most ``per_author`` rounds an author
    (its oldest out), and the bytes, ``max_bytes`` in all and ``per_signer`` an author, split
    over authors by a :class:`~swarmnode.swarm.transport.room.Room` (newcomers, authors not
    yet established with this store, ``newcomer_share`` of it together; a node's own
    bundles take the whole room). Thread-safe: written on the asyncio loop and in the host
    thread, read in the host thread. ``evicted`` counts what left to make room."""

    def __init__(self, per_author: int, max_bytes: int, *, per_signer: int | None = None,
                 newcomer_share: float = NEWCOMER_SHARE, clock: Callable[[], float] = time.monotonic):
        self.per_author = per_author
        self.room: Room[tuple[str, int]] = Room(max_bytes, per_signer or max_bytes, newcomer_share=newcomer_share)
        self.evicted = 0
        self._items: dict[tuple[str, int], bytes] = {}
        self._clock = clock
        self._arrivals = itertools.count()
        self._lock = threading.Lock()

    def refused_outright(self, author: str, size: int) -> str | None:
        """Why a new bundle of ``size`` bytes from ``author`` would be refused whatever it is
        (see :meth:`~swarmnode.swarm.transport.room.Room.refused_outright`), asked before it
        is checked; None when it may fit."""
        with self._lock:
            self.room.tick(self._clock())
            return self.room.refused_outright(author, size, None)

    def put(self, author: str, round_no: int, data: bytes) -> str | None:
        """Keep ``data`` as ``author``'s bundle of ``round_no``; the refusal reason when the room
        rules refuse it (``signer_full``, ``newcomers_full``, ``storage_full``), else None."""
        key = (author, round_no)
        with self._lock:
            room = self.room
            room.tick(self._clock())
            rounds = sorted((k for k in room.items(author) if k != key), key=lambda k: room.order(author, k))
            for old in rounds[:max(0, len(rounds) + 1 - self.per_author)]:
                room.remove(author, old)
                self._items.pop(old, None)
                self.evicted += 1
            gone, reason = room.make_room(author, key, len(data))
            for _, item in gone:
                self._items.pop(item, None)
            self.evicted += len(gone)
            if reason is not None:
                return reason
            self._items[key] = data
            room.add(author, key, len(data), next(self._arrivals))
            return None

    def get(self, author: str, round_no: int) -> bytes | None:
        with self._lock:
            return self._items.get((author, round_no))

    def __len__(self) -> int:
        return len(self._items)


def hold_rejection(pusher: str, data: bytes) -> tuple[int | None, str | None]:
    """(round, None) for a bundle ``pusher`` may leave here (signed by it, with a round), else
    (None, the reason counted against it: a bundle reason, or ``malformed``). Opens the
    envelope once (decompression and signature: the check that costs)."""
    if len(data) > MAX_MESSAGE_BYTES:
        return None, "too_large"
    try:
        sender, payload = open_envelope(data)
    except BundleRejected as exc:
        return None, exc.reason
    if sender != pusher:
        return None, "peer_id_mismatch"
    round_no = payload.get("round")
    return (round_no, None) if is_count(round_no) else (None, "malformed")


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
