"""Signed announcements (libp2p protocol 3): what a node tells its peers of each bundle it serves.

An announcement says that ``author``'s bundle of ``round`` (``size`` bytes, sha256
``digest``) in ``swarm`` is served by ``holders``, and where its public sources listen
(``addrs``: for each source the author knows addresses of, at most
:data:`MAX_SOURCE_ADDRESSES` multiaddrs without their ``/p2p/`` part, each at most
:data:`MAX_ADDRESS_CHARS` characters; the field is left out when it would be empty), so a
node that never met a source can still dial it. The author signs it (Ed25519 over
:data:`DOMAIN` + the canonical JSON of its fields), so a peer can pass it on in a sample
answer without being able to alter it or to make one up for another peer's key. On the wire
it is the canonical JSON ``{"announcement": {...fields}, "signature": "<128 hex digits>"}``,
at most :data:`MAX_ANNOUNCEMENT_BYTES`; a sample answer is a JSON list of at most
:data:`SAMPLE_SIZE` of them. How announcements spread is
:mod:`~swarmnode.swarm.transport.libp2p.spread`. This module imports no network stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Iterable, Mapping

from swarmnode.swarm.address import MultiaddrError, parse_multiaddr
from swarmnode.swarm.bundle import canonical_json
from swarmnode.swarm.identity import public_key_from_peer_id, verify_signature
from swarmnode.swarm.transport.base import MAX_MESSAGE_BYTES, NodeIdentity
from swarmnode.swarm.transport.libp2p.wire import loads_bounded

DOMAIN = b"swarmnode-announce-v3\0"
MAX_ANNOUNCEMENT_BYTES = 2048
MAX_HOLDERS = 4             # PeerIDs an announcement may list
MAX_SOURCE_ADDRESSES = 2    # addresses an announcement may give one source
MAX_ADDRESS_CHARS = 64      # characters of one such address
SAMPLE_SIZE = 16            # announcements in one sample answer, at most
MAX_SAMPLE_BYTES = SAMPLE_SIZE * (MAX_ANNOUNCEMENT_BYTES + 1) + 2
_MAX_PEER_ID = 64           # characters; an Ed25519 PeerID has 52
_FIELDS = {"author", "digest", "holders", "round", "size", "swarm"}
_UNSPECIFIED = {"0.0.0.0", "::"}

Addresses = tuple[tuple[str, tuple[str, ...]], ...]  # (source PeerID, its multiaddrs), sorted by PeerID


@dataclass(frozen=True)
class Announcement:
    author: str
    swarm: str
    round: int
    size: int
    digest: str
    holders: tuple[str, ...]
    addresses: Addresses = ()  # see :func:`source_addresses`

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"author": self.author, "digest": self.digest, "holders": list(self.holders),
                               "round": self.round, "size": self.size, "swarm": self.swarm}
        if self.addresses:
            out["addrs"] = {source: list(addrs) for source, addrs in self.addresses}
        return out

    def addresses_of(self, source: str) -> tuple[str, ...]:
        """The multiaddrs (without ``/p2p/``) the announcement gives ``source``; () if none."""
        return next((addrs for peer, addrs in self.addresses if peer == source), ())

    def signed(self, identity: NodeIdentity) -> dict[str, Any]:
        """The wire object, signed by ``identity`` (which must be the author's)."""
        if identity.peer_id != self.author:
            raise ValueError("only its author signs an announcement")
        return {"announcement": self.fields(), "signature": identity.sign(DOMAIN + canonical_json(self.fields())).hex()}


def read_signed(obj: Any, swarm: str) -> Announcement | None:
    """The announcement a wire object (already JSON-decoded) carries, or None: not this
    swarm's, malformed (see :func:`_well_formed`), over :data:`MAX_ANNOUNCEMENT_BYTES`
    encoded, or not signed by its author. Never raises."""
    if not isinstance(obj, dict) or set(obj) != {"announcement", "signature"}:
        return None
    fields, signature = obj["announcement"], obj["signature"]
    if not isinstance(fields, dict) or set(fields) - {"addrs"} != _FIELDS:
        return None
    if not isinstance(signature, str) or len(signature) != 128:
        return None
    try:
        if len(canonical_json(obj)) > MAX_ANNOUNCEMENT_BYTES:
            return None
        addresses = _read_addresses(fields.get("addrs", {}))
        announcement = Announcement(fields["author"], fields["swarm"], fields["round"], fields["size"],
                                    fields["digest"], tuple(fields["holders"]), addresses or ())
        signature_bytes = bytes.fromhex(signature)
    except (ValueError, TypeError, RecursionError):
        return None
    if addresses is None or announcement.swarm != swarm or not _well_formed(announcement):
        return None
    if "addrs" in fields and not addresses:  # one encoding per announcement: no empty field
        return None
    body = DOMAIN + canonical_json(announcement.fields())
    if not verify_signature(public_key_from_peer_id(announcement.author), body, signature_bytes):
        return None
    return announcement


def parse_push(raw: bytes, swarm: str) -> tuple[Announcement, dict[str, Any]] | None:
    """A pushed announcement (one wire object, canonically encoded) and its wire object, or None."""
    obj = loads_bounded(raw, MAX_ANNOUNCEMENT_BYTES)
    if obj is None or canonical_json(obj) != raw:  # one encoding per announcement: no padding
        return None
    announcement = read_signed(obj, swarm)
    return None if announcement is None else (announcement, obj)


def parse_sample(raw: bytes, swarm: str, authors: Collection[str] | None = None) -> tuple[list[Announcement], int]:
    """The announcements of a sample answer (a JSON list of at most :data:`SAMPLE_SIZE` wire
    objects), and how many entries were bad: an answer that is not such a list is all bad (1).
    ``authors``: the only authors asked for (an answer by name); an entry of another is bad."""
    answer = loads_bounded(raw, MAX_SAMPLE_BYTES)
    if not isinstance(answer, list) or len(answer) > SAMPLE_SIZE:
        return [], 1
    good = [a for a in (read_signed(obj, swarm) for obj in answer)
            if a is not None and (authors is None or a.author in authors)]
    return good, len(answer) - len(good)


def source_addresses(known: Mapping[str, Iterable[str]]) -> Addresses:
    """What an author announces of its sources' addresses: for each source of ``known``
    (PeerID -> the multiaddrs its node has of it, with or without the ``/p2p/<PeerID>`` part),
    the first :data:`MAX_SOURCE_ADDRESSES` that are :func:`is_source_address` once that part
    is taken off; a source with none is left out."""
    out = []
    for source, addrs in known.items():
        suffix = f"/p2p/{source}"
        usable = [a[:-len(suffix)] if a.endswith(suffix) else a for a in addrs]
        kept = tuple(dict.fromkeys(a for a in usable if is_source_address(a)))[:MAX_SOURCE_ADDRESSES]
        if kept:
            out.append((source, kept))
    return tuple(sorted(out))


def is_source_address(value: Any) -> bool:
    """A multiaddr a source listens on, as an announcement gives it: a string of at most
    :data:`MAX_ADDRESS_CHARS` characters with a host (not a wildcard) and a TCP port 1-65535,
    and no ``/p2p/`` part (the source names the peer) nor relay circuit."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ADDRESS_CHARS:
        return False
    try:
        parsed = parse_multiaddr(value)
    except MultiaddrError:
        return False
    protocols = {p for p, _ in parsed.parts}
    return (parsed.text == value and parsed.host not in (None, *_UNSPECIFIED) and bool(parsed.tcp_port)
            and not protocols & {"p2p", "ipfs", "p2p-circuit"})


def _read_addresses(obj: Any) -> Addresses | None:
    """The ``addrs`` field as :class:`Announcement` holds it, or None: not an object of
    PeerID -> a list of 1 to :data:`MAX_SOURCE_ADDRESSES` distinct :func:`is_source_address`
    strings. (Which PeerIDs may appear is :func:`_well_formed`'s check.)"""
    if not isinstance(obj, dict):
        return None
    out = []
    for source, addrs in obj.items():
        if (not isinstance(addrs, list) or not 0 < len(addrs) <= MAX_SOURCE_ADDRESSES
                or len(set(map(str, addrs))) != len(addrs) or not all(map(is_source_address, addrs))):
            return None
        out.append((source, tuple(addrs)))
    return tuple(sorted(out))




def _well_formed(a: Announcement) -> bool:
    return (is_count(a.round) and is_count(a.size) and 0 < a.size <= MAX_MESSAGE_BYTES
            and isinstance(a.digest, str) and len(a.digest) == 64 and all(c in "0123456789abcdef" for c in a.digest)
            and is_peer_id(a.author) and 0 < len(a.holders) <= MAX_HOLDERS and all(map(is_peer_id, a.holders))
            and all(source in (a.author, *a.holders) for source, _ in a.addresses))


def is_count(value: Any) -> bool:
    """A JSON integer >= 0 (not a bool): a round or a size."""
    return type(value) is int and value >= 0


def is_peer_id(value: Any) -> bool:
    """An Ed25519 PeerID, the only kind a swarmnode node key has."""
    if not isinstance(value, str) or not 0 < len(value) <= _MAX_PEER_ID:
        return False
    try:
        public_key_from_peer_id(value)
    except ValueError:
        return False
    return True
