"""The LAN advertisement's TXT codec, the bounded table of peers found on the LAN, and the key that turns it on."""

from __future__ import annotations

import hashlib
import random

import pytest

from swarmnode.swarm.identity import Identity
from swarmnode.swarm.lanrecord import (
    MAX_FAILURES,
    MAX_TXT_BYTES,
    LanPeers,
    LanRecord,
    LanRejected,
    advertised,
    decode_txt,
    encode_txt,
)


def pid(n: int) -> str:
    return Identity.from_seed(hashlib.sha256(b"lan-%d" % n).digest()).peer_id


def record(n: int, swarm: str = "home", transport: str = "libp2p", version: int = 1, hosts: int = 1) -> LanRecord:
    return LanRecord(swarm, transport, pid(n), tuple(f"/ip4/192.168.1.{20 + h}/tcp/{4000 + n}/p2p/{pid(n)}"
                                                     for h in range(hosts)), version)


def txt(fields: list[str]) -> bytes:
    return b"".join(bytes([len(f.encode())]) + f.encode() for f in fields)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_round_trip():
    rec = record(1, hosts=4)
    raw = encode_txt(rec)
    assert len(raw) <= MAX_TXT_BYTES
    assert decode_txt(raw) == rec


@pytest.mark.parametrize("raw, reason", [
    (b"\x09v=1", "malformed"),  # a length past the end: truncated
    (txt(["v=1", "s=home", "t=libp2p"]), "malformed"),  # no id
    (txt(["v=one", "s=home", "t=libp2p", f"id={pid(1)}", f"a0=/ip4/1.2.3.4/tcp/1/p2p/{pid(1)}"]), "malformed"),
    (txt(["v=1", "s=home", "t=libp2p", f"id={pid(1)}"]), "malformed"),  # no address
    (txt(["v=1", "s=home", "t=libp2p", f"id={pid(1)}", "a0=/ip4/1.2.3.4/tcp/1"]), "malformed"),  # no /p2p
    (txt(["v=1", "s=home", "s=work", "t=libp2p", f"id={pid(1)}"]), "malformed"),  # a key twice
    (b"\x04v=\xff\xfe", "malformed"),  # not UTF-8
    (txt(["v=1", "s=home", "t=libp2p", f"id={pid(1)}", f"a0=/ip4/1.2.3.4/tcp/1/p2p/{pid(2)}"]), "peer_id_mismatch"),
    (txt(["x=" + "y" * 250] * 5), "oversized"),
])
def test_bad_records_are_rejected_with_a_reason(raw, reason):
    with pytest.raises(LanRejected) as exc:
        decode_txt(raw)
    assert exc.value.reason == reason


def test_a_later_version_is_read_as_far_as_its_identity():
    """A record of a later version may say more; the node reads who it is, then ignores it."""
    raw = txt(["v=2", "s=home", "t=libp2p", f"id={pid(1)}", "x=something new"])
    rec = decode_txt(raw)
    assert rec.version == 2 and rec.refusal("home", "libp2p", pid(0)) == "version"


def test_others_are_ignored_and_counted():
    peers = LanPeers("home", "libp2p", pid(0))
    for rec in (record(1, swarm="work"), record(2, transport="hivemind"), record(3, version=2), record(0)):
        assert not peers.offer_txt(encode_txt(rec))
    assert peers.offer_txt(encode_txt(record(4)))
    assert list(peers.candidates()) == [pid(4)]
    assert peers.counts() == {"lan_joins": 0, "lan_refused_other_swarm": 1, "lan_refused_other_transport": 1,
                              "lan_refused_version": 1}  # the node's own record is not a refusal


def test_advertised_leaves_out_loopback_and_caps_the_count():
    addrs = [f"/ip4/127.0.0.1/tcp/1/p2p/{pid(1)}", "/ip4/10.0.0.9/tcp/1"] + \
        [f"/ip4/10.0.0.{i}/tcp/1/p2p/{pid(1)}" for i in range(9)]
    assert advertised(addrs) == tuple(addrs[2:6])  # no loopback, nothing a receiver would refuse


def test_a_flood_cannot_grow_the_table_or_push_out_a_joined_peer():
    peers = LanPeers("home", "libp2p", pid(0), max_peers=8, clock=Clock())
    peers.offer(record(1))
    (first,) = peers.to_dial((), 8)
    peers.dialed(first, answered=True)
    for n in range(100, 400):
        peers.offer(record(n))
    assert len(peers) == 8
    assert pid(1) in peers.candidates() and peers.verified(()) == {pid(1)}
    assert peers.refused["evicted"] == 300 - 7


def test_dials_are_capped_and_drawn_at_random():
    peers = LanPeers("home", "libp2p", pid(0), clock=Clock(), rng=random.Random(1))
    for n in range(1, 41):
        peers.offer(record(n))
    first = peers.to_dial((), 4)
    assert len(first) == 4 and first != [record(n).addresses[0] for n in range(1, 5)]
    assert len(peers.to_dial((), 100)) == 36  # the rest; the first four are not due again yet
    assert peers.to_dial((), 0) == []


def test_a_peer_that_dialed_this_node_is_vouched_for():
    peers = LanPeers("home", "libp2p", pid(0), clock=Clock())
    peers.offer(record(1))
    assert peers.verified(()) == set() and peers.verified({pid(1), pid(7)}) == {pid(1)}


def test_a_full_table_of_joined_peers_refuses_newcomers():
    peers = LanPeers("home", "libp2p", pid(0), max_peers=2, clock=Clock())
    for n in (1, 2):
        peers.offer(record(n))
    for maddr in peers.to_dial((), 8):
        peers.dialed(maddr, answered=True)
    assert not peers.offer(record(3))
    assert peers.refused["table_full"] == 1 and len(peers) == 2


def test_an_address_that_never_answers_is_dropped_after_its_tries():
    """A forged service (another node's address under this PeerID) fails its handshake each time."""
    clock = Clock()
    peers = LanPeers("home", "libp2p", pid(0), clock=clock)
    peers.offer(record(1, hosts=2))
    dialed = []
    for _ in range(MAX_FAILURES):
        clock.now += 60
        (maddr,) = peers.to_dial((), 8)
        dialed.append(maddr)
        peers.dialed(maddr, answered=False)
    assert len(set(dialed)) == 2  # each of its addresses gets a try
    assert len(peers) == 0 and peers.refused["unanswered"] == 1
    assert peers.verified(()) == set()


def test_a_connected_or_recently_dialed_peer_is_not_dialed_again():
    clock = Clock()
    peers = LanPeers("home", "libp2p", pid(0), clock=clock)
    peers.offer(record(1))
    assert peers.to_dial((), 8) and not peers.to_dial((), 8)  # due again only after REDIAL_S
    clock.now += 60
    assert peers.to_dial({pid(1)}, 8) == []
    assert peers.to_dial((), 8) != []


def test_a_withdrawn_or_changed_service():
    peers = LanPeers("home", "libp2p", pid(0), clock=Clock())
    assert peers.offer(record(1))
    assert not peers.offer(record(1))  # the same again changes nothing
    assert peers.offer(record(1, hosts=2))  # new addresses: a candidate again
    peers.remove(pid(1))
    assert len(peers) == 0


@pytest.mark.parametrize("lan", [True, False])
def test_a_nodes_transport_discovers_on_the_lan_unless_turned_off(monkeypatch, lan):
    """``transport_for`` (what the daemon calls) attaches the LAN discovery for ``lan = true``."""
    import swarmnode.swarm.transport as transports
    from memory_transport import MemoryHub, MemoryTransport
    from swarmnode.config import NodeConfig
    from swarmnode.swarm.transport.lan import LanDiscovery

    hub = MemoryHub()
    monkeypatch.setattr(transports, "create_transport",
                        lambda name, identity, swarm, **kw: MemoryTransport(identity, swarm, hub=hub))
    identity = Identity.from_seed(b"\x01" * 32)
    cfg = NodeConfig(lan=lan, swarm="home", transport="libp2p", bootstrap_file=None)
    transport = transports.transport_for(cfg, identity)
    if not lan:
        assert transport.lan is None and transport.lan_counts() == {} and transport.lan_peers() == set()
        return
    assert isinstance(transport.lan, LanDiscovery)
    assert (transport.lan.table.swarm, transport.lan.table.transport, transport.lan.peer_id) == \
        ("home", "libp2p", identity.peer_id)
