"""What a node says about itself on the local network, and what it keeps of what others say.

A node advertises a DNS-SD service of type :data:`SERVICE_TYPE` (mDNS) named by its PeerID;
its TXT record (:func:`encode_txt`) holds, one ``key=value`` string each: ``v`` the version of
this record (:data:`LAN_VERSION`), ``s`` the swarm name, ``t`` the transport, ``id`` the PeerID,
``a0`` .. ``a3`` the node's dialable multiaddrs, each ending in ``/p2p/<id>``, and ``w0`` ..
``w2`` its *way in*: the bootstrap peers (or relays) through which it reaches the wider swarm.
A node behind NAT (``reachability`` private) gives no address, only its way in.

The way in is what lets a LAN behind a NAT reach the whole swarm with one invite: a node there
with no bootstrap list of its own, which found the swarm only on its LAN, takes a neighbour's
way in as its bootstrap list, and when that neighbour is behind NAT it is too (they share the
router), so it goes private (:class:`~swarmnode.swarm.transport.base.Transport` does both, once).
Without it such a node would take itself for the public node others join through and
advertise a home address no one outside can dial: its bundles would never leave its LAN. The
alternative, LAN neighbours holding and passing on each other's bundles, would add a relay
role and a protocol to every node for what the swarm's relays already do for any node behind
NAT; libp2p's AutoNAT (peers dialing back to tell a node whether it is reachable) needs a
peer outside the NAT to ask, which this node has not reached yet.

Version 1 records (addresses only, the previous release's) are still read; a version 1 node
ignores version 2 records (``version``), but a version 2 node dials it, and one connection
between them is all the join needs.

Anyone on the network can answer mDNS queries, so nothing read here is trusted:
:func:`decode_txt` bounds and checks the shape, :meth:`LanRecord.refusal` drops other
swarms, transports and versions, and what is left is only a candidate to dial. The dial is
what counts: both transports dial a multiaddr's ``/p2p/<PeerID>`` and their security
handshake fails against a host holding another key (a forged answer that names someone
else's address). A way in is a bootstrap list like any other: each address is held to its
PeerID by the dial, and what comes through it is verified like everything a node learns. A
record without addresses cannot be held to its own PeerID, so what it says of its advertiser
(that it sits behind this NAT) is taken on the word of the LAN, as mDNS itself is; the worst a
forger on the LAN gets is a node that dials the forger's addresses and leaves its bundles with
the peers it dialed. :class:`LanPeers` holds the candidates and ways in in bounded memory and
counts every answer it drops, by reason. It imports no network stack.
"""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from swarmnode.swarm.address import peer_id_of
from swarmnode.swarm.bootstrap import multiaddr_problem

SERVICE_TYPE = "_swarmnode._tcp.local."
LAN_VERSION = 2
READ_VERSIONS = (1, 2)  # version 1: the previous release's records, without a way in
# RFC 6763 section 6.2: a TXT record up to 1,300 bytes still fits one Ethernet frame's mDNS
# answer. Four addresses and three ways in of 120 bytes and a 64-character name fit.
MAX_TXT_BYTES = 1300
MAX_ADDRESSES = 4
MAX_WAY_IN = 3
MAX_SWARM_CHARS = 200

# Per-peer dials: again after this long while it is not connected; dropped after this many failures.
REDIAL_S = 30.0
MAX_FAILURES = 3


class LanRejected(ValueError):
    """A TXT record that is not a valid advertisement; ``reason`` is a short code for counters."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class LanRecord:
    """One node's advertisement."""

    swarm: str
    transport: str
    peer_id: str
    addresses: tuple[str, ...]
    version: int = LAN_VERSION
    way_in: tuple[str, ...] = ()

    @property
    def behind_nat(self) -> bool:
        """The advertiser gives no address: it is behind NAT, and so is its LAN."""
        return not self.addresses

    def refusal(self, swarm: str, transport: str, own_peer_id: str) -> str | None:
        """Why a node of ``swarm`` over ``transport`` with PeerID ``own_peer_id`` ignores this
        record (``own``, ``version``, ``other_swarm``, ``other_transport``), or None."""
        if self.peer_id == own_peer_id:
            return "own"
        if self.version not in READ_VERSIONS:
            return "version"
        if self.swarm != swarm:
            return "other_swarm"
        if self.transport != transport:
            return "other_transport"
        return None


@dataclass(frozen=True)
class WayIn:
    """The bootstrap peers a LAN neighbour reaches the swarm through, and whether it is behind NAT."""

    addresses: tuple[str, ...]
    behind_nat: bool


def advertised(addresses: Iterable[str], limit: int = MAX_ADDRESSES) -> tuple[str, ...]:
    """The addresses worth advertising on a LAN (own ones, or with ``limit`` :data:`MAX_WAY_IN`
    a way in): dialable (as :func:`decode_txt` checks), not loopback, at most ``limit``."""
    return tuple(a for a in addresses
                 if not a.startswith(("/ip4/127.", "/ip6/::1/")) and multiaddr_problem(a) is None)[:limit]


def encode_txt(record: LanRecord) -> bytes:
    """The TXT record's wire form (DNS character-strings: a length byte, then the string)."""
    fields = [f"v={record.version}", f"s={record.swarm}", f"t={record.transport}", f"id={record.peer_id}"]
    fields += [f"a{i}={a}" for i, a in enumerate(record.addresses[:MAX_ADDRESSES])]
    fields += [f"w{i}={a}" for i, a in enumerate(record.way_in[:MAX_WAY_IN])]
    out = bytearray()
    for text in fields:
        raw = text.encode("utf-8")
        if len(raw) > 255:
            raise ValueError(f"TXT field {text[:40]!r}... is over 255 bytes")
        out += bytes([len(raw)]) + raw
    if len(out) > MAX_TXT_BYTES:
        raise ValueError(f"TXT record of {len(out)} bytes is over {MAX_TXT_BYTES}")
    return bytes(out)


def _strings(raw: bytes) -> dict[str, str]:
    """The ``key=value`` strings of a TXT record; LanRejected for a truncated one or a repeated key."""
    out: dict[str, str] = {}
    i = 0
    while i < len(raw):
        n = raw[i]
        if i + 1 + n > len(raw):
            raise LanRejected("malformed")
        try:
            key, _, value = raw[i + 1:i + 1 + n].decode("utf-8").partition("=")
        except UnicodeDecodeError:
            raise LanRejected("malformed") from None
        if key in out:
            raise LanRejected("malformed")
        out[key] = value
        i += 1 + n
    return out


def decode_txt(raw: bytes) -> LanRecord:
    """The advertisement in TXT wire bytes ``raw``; :class:`LanRejected` with reason ``oversized``
    (over :data:`MAX_TXT_BYTES`), ``malformed`` (not the shape :func:`encode_txt` writes) or
    ``peer_id_mismatch`` (an address naming another PeerID than ``id``). Never anything else."""
    if len(raw) > MAX_TXT_BYTES:
        raise LanRejected("oversized")
    fields = _strings(raw)
    try:
        version = int(fields["v"])
        swarm, transport, peer_id = fields["s"], fields["t"], fields["id"]
    except (KeyError, ValueError):
        raise LanRejected("malformed") from None
    if not swarm or len(swarm) > MAX_SWARM_CHARS or not transport or not peer_id:
        raise LanRejected("malformed")
    if version not in READ_VERSIONS:  # a later version may say more: only what identifies it is read
        return LanRecord(swarm, transport, peer_id, (), version)
    addresses = tuple(fields[f"a{i}"] for i in range(MAX_ADDRESSES) if f"a{i}" in fields)
    way_in = tuple(fields[f"w{i}"] for i in range(MAX_WAY_IN) if f"w{i}" in fields) if version > 1 else ()
    # Version 1 has addresses; version 2 addresses, a way in or both.
    if not (addresses if version == 1 else addresses or way_in):
        raise LanRejected("malformed")
    if any(multiaddr_problem(a) for a in addresses + way_in) or any(peer_id_of(a) == peer_id for a in way_in):
        raise LanRejected("malformed")
    if any(peer_id_of(a) != peer_id for a in addresses):
        raise LanRejected("peer_id_mismatch")
    return LanRecord(swarm, transport, peer_id, addresses, version, way_in)


@dataclass
class _Candidate:
    addresses: tuple[str, ...]
    next_dial: float = 0.0
    failures: int = 0
    joined: bool = False


class LanPeers:
    """The peers of this node's swarm found on the LAN, at most ``max_peers``, the ways in they
    advertise (as many, the longest-unseen dropped first), and the count of every answer
    dropped (``refused``: reason -> count). Not thread-safe: one event loop owns it.

    A full table takes a newcomer only in place of the longest-unseen peer it has never joined
    with, so a flood of forged services can neither grow memory nor push out a peer that answered.
    """

    def __init__(self, swarm: str, transport: str, own_peer_id: str, *, max_peers: int = 64,
                 clock=time.monotonic, rng: random.Random | None = None):
        self.swarm = swarm
        self.transport = transport
        self.own_peer_id = own_peer_id
        self.max_peers = max_peers
        self.clock = clock
        self.rng = rng or random.Random()
        self._peers: collections.OrderedDict[str, _Candidate] = collections.OrderedDict()
        self.refused: collections.Counter[str] = collections.Counter()
        self.joins = 0
        self._ways: collections.OrderedDict[str, WayIn] = collections.OrderedDict()
        self.taken: WayIn | None = None  # the way in this node took (take_way_in), once

    def __len__(self) -> int:
        return len(self._peers)

    def refuse(self, reason: str) -> None:
        self.refused[reason] += 1

    def offer_txt(self, raw: bytes) -> bool:
        """Take one advertisement's TXT bytes; True when it named a new or changed candidate."""
        try:
            record = decode_txt(raw)
        except LanRejected as exc:
            self.refuse(exc.reason)
            return False
        reason = record.refusal(self.swarm, self.transport, self.own_peer_id)
        if reason is not None:
            if reason != "own":
                self.refuse(reason)
            return False
        return self.offer(record)

    def offer(self, record: LanRecord) -> bool:
        """Take one checked record; True when it named a new or changed candidate or way in. A
        record without addresses (its advertiser behind NAT) is no candidate to dial."""
        way_changed = self._offer_way(record)
        if record.behind_nat:
            self._peers.pop(record.peer_id, None)
            return way_changed
        return self._offer_candidate(record) or way_changed

    def _offer_way(self, record: LanRecord) -> bool:
        way = WayIn(record.way_in, record.behind_nat) if record.way_in else None
        if way is not None and self._ways.get(record.peer_id) == way:
            self._ways.move_to_end(record.peer_id)
            return False
        self._ways.pop(record.peer_id, None)
        if way is None:
            return False
        self._ways[record.peer_id] = way
        while len(self._ways) > self.max_peers:
            self._ways.popitem(last=False)
        return True

    def _offer_candidate(self, record: LanRecord) -> bool:
        known = self._peers.get(record.peer_id)
        if known is not None:
            self._peers.move_to_end(record.peer_id)
            if known.addresses == record.addresses:
                return False
            known.addresses, known.failures, known.next_dial = record.addresses, 0, 0.0
            return True
        if len(self._peers) >= self.max_peers:
            victim = next((p for p, c in self._peers.items() if not c.joined), None)
            if victim is None:
                self.refuse("table_full")
                return False
            del self._peers[victim]
            self.refuse("evicted")
        self._peers[record.peer_id] = _Candidate(record.addresses)
        return True

    def remove(self, peer_id: str) -> None:
        """The peer withdrew its service (it stopped)."""
        self._peers.pop(peer_id, None)
        self._ways.pop(peer_id, None)

    def take_way_in(self, connected: Collection[str]) -> WayIn | None:
        """The way in for a node that has none of its own, once (None after, or while no
        neighbour advertises one): of a neighbour a handshake vouched for
        (:meth:`verified`) if there is one, else of any, drawn at random so that a flood of
        forged records found first does not decide it."""
        if self.taken is not None or not self._ways:
            return None
        vouched = [p for p in self.verified(connected) if p in self._ways]
        self.taken = self._ways[self.rng.choice(vouched or list(self._ways))]
        return self.taken

    def to_dial(self, connected: Collection[str], limit: int) -> list[str]:
        """Up to ``limit`` candidates not connected now whose next dial is due, drawn at random
        (so a flood found first cannot keep the real peers waiting behind it), one address of
        each (the first that has not failed yet), and marks them dialed."""
        now = self.clock()
        due = [p for p, c in self._peers.items() if p not in connected and c.next_dial <= now]
        out = []
        for peer_id in self.rng.sample(due, min(limit, len(due))) if limit > 0 else []:
            c = self._peers[peer_id]
            c.next_dial = now + REDIAL_S
            out.append(c.addresses[c.failures % len(c.addresses)])
        return out

    def verified(self, connected: Collection[str]) -> set[str]:
        """The PeerIDs in the table that a handshake vouched for: a dial from the table reached
        them, or they are connected now (they dialed this node)."""
        return {p for p, c in self._peers.items() if c.joined or p in connected}

    def dialed(self, maddr: str, answered: bool) -> None:
        """The outcome of dialing ``maddr`` (from :meth:`to_dial`): a peer that never answers,
        or whose handshake shows another key, is dropped after :data:`MAX_FAILURES` tries."""
        peer_id = peer_id_of(maddr)
        c = self._peers.get(peer_id or "")
        if c is None:
            return
        if answered:
            self.joins += not c.joined
            c.failures, c.joined = 0, True
            return
        c.failures += 1
        c.next_dial = self.clock() + min(REDIAL_S, 2.0 ** c.failures)
        if c.failures >= MAX_FAILURES:
            del self._peers[peer_id]  # type: ignore[arg-type]
            self.refuse("unanswered")

    def candidates(self) -> dict[str, tuple[str, ...]]:
        """Every candidate's PeerID and addresses, sorted by PeerID."""
        return {p: self._peers[p].addresses for p in sorted(self._peers)}

    def counts(self) -> dict[str, int]:
        """``lan_joins``, ``lan_way_in_taken`` (1 once this node took a neighbour's way in) and
        ``lan_refused_<reason>``: counters for metrics."""
        return {"lan_joins": self.joins, "lan_way_in_taken": int(self.taken is not None),
                **{f"lan_refused_{r}": n for r, n in sorted(self.refused.items())}}
