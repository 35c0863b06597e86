"""The LAN advertisement's TXT codec, the bounded table of peers found on the LAN, and the key that turns it on."""

from __future__ import annotations

import asyncio
import hashlib
import random

import pytest

from swarmnode.swarm.identity import Identity
from swarmnode.swarm.lanrecord import (
    MAX_FAILURES,
    MAX_TXT_BYTES,
    MAX_WAY_IN,
    LanPeers,
    LanRecord,
    LanRejected,
    WayIn,
    advertised,
    decode_txt,
    encode_txt,
)
from swarmnode.swarm.transport.lan import LanDiscovery
from test_rejoin import _FakeTransport


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
    (txt(["x=" + "y" * 250] * 6), "oversized"),
])
def test_bad_records_are_rejected_with_a_reason(raw, reason):
    with pytest.raises(LanRejected) as exc:
        decode_txt(raw)
    assert exc.value.reason == reason


def test_a_later_version_is_read_as_far_as_its_identity():
    """A record of a later version may say more; the node reads who it is, then ignores it."""
    raw = txt(["v=3", "s=home", "t=libp2p", f"id={pid(1)}", "x=something new"])
    rec = decode_txt(raw)
    assert rec.version == 3 and rec.refusal("home", "libp2p", pid(0)) == "version"


def test_the_previous_versions_record_is_read():
    """Version 1 (addresses, no way in): what the previous release advertises."""
    raw = txt(["v=1", "s=home", "t=libp2p", f"id={pid(1)}", f"a0=/ip4/192.168.1.9/tcp/1/p2p/{pid(1)}",
               f"w0=/ip4/1.2.3.4/tcp/1/p2p/{pid(2)}"])  # a key version 1 does not have: not read
    rec = decode_txt(raw)
    assert (rec.version, rec.addresses, rec.way_in) == (1, (f"/ip4/192.168.1.9/tcp/1/p2p/{pid(1)}",), ())
    assert rec.refusal("home", "libp2p", pid(0)) is None
    with pytest.raises(LanRejected):  # version 1 always had addresses
        decode_txt(txt(["v=1", "s=home", "t=libp2p", f"id={pid(1)}", f"w0=/ip4/1.2.3.4/tcp/1/p2p/{pid(2)}"]))


def way(n: int) -> str:
    return f"/ip4/203.0.113.{n}/tcp/31337/p2p/{pid(50 + n)}"


def test_a_way_in_round_trips_and_a_node_behind_nat_gives_only_that():
    public = LanRecord("home", "libp2p", pid(1), record(1, hosts=4).addresses, way_in=(way(1), way(2), way(3)))
    behind = LanRecord("home", "libp2p", pid(2), (), way_in=(way(1),))
    for rec in (public, behind):
        raw = encode_txt(rec)
        assert len(raw) <= MAX_TXT_BYTES and decode_txt(raw) == rec
    assert (public.behind_nat, behind.behind_nat) == (False, True)
    assert advertised([way(n) for n in range(1, 6)], MAX_WAY_IN) == tuple(way(n) for n in range(1, 4))


@pytest.mark.parametrize("fields", [
    ["v=2", "s=home", "t=libp2p", f"id={pid(1)}"],  # neither an address nor a way in
    ["v=2", "s=home", "t=libp2p", f"id={pid(1)}", "w0=/ip4/1.2.3.4/tcp/1"],  # a way in without /p2p
    ["v=2", "s=home", "t=libp2p", f"id={pid(1)}", f"w0=/ip4/1.2.3.4/tcp/1/p2p/{pid(1)}"],  # through itself
])
def test_bad_ways_in_are_malformed(fields):
    with pytest.raises(LanRejected) as exc:
        decode_txt(txt(fields))
    assert exc.value.reason == "malformed"


def test_a_node_behind_nat_is_no_candidate_but_its_way_in_is_taken_once():
    peers = LanPeers("home", "libp2p", pid(0), clock=Clock())
    assert peers.offer(record(1))
    assert peers.take_way_in(()) is None  # no one offers a way in yet
    assert peers.offer(LanRecord("home", "libp2p", pid(1), (), way_in=(way(1),)))  # it went private
    assert peers.candidates() == {} and peers.to_dial((), 8) == []
    assert peers.take_way_in(()) == WayIn((way(1),), True)
    assert peers.take_way_in(()) is None and peers.counts()["lan_way_in_taken"] == 1


def test_a_way_in_of_a_vouched_for_neighbour_comes_first_and_ways_are_bounded():
    peers = LanPeers("home", "libp2p", pid(0), max_peers=8, clock=Clock(), rng=random.Random(3))
    for n in range(100, 400):  # a flood of forged ways in from nodes behind NAT
        peers.offer(LanRecord("home", "libp2p", pid(n), (), way_in=(way(n % 200),)))
    peers.offer(LanRecord("home", "libp2p", pid(1), record(1).addresses, way_in=(way(250),)))
    assert len(peers._ways) == 8
    assert peers.take_way_in({pid(1)}) == WayIn((way(250),), False)  # it dialed this node: a handshake
    peers.remove(pid(1))
    assert pid(1) not in peers._ways


@pytest.mark.parametrize("neighbour_behind_nat, way_ip, private", [
    (True, "10.77.1.1", True),  # it shares the neighbour's router
    (False, "93.184.216.34", True),  # as if given the neighbour's bootstrap list: auto says private
    (False, "192.168.1.30", False),  # a LAN swarm
])
def test_follow_lan_decides_as_auto_would_with_the_neighbours_way_in(neighbour_behind_nat, way_ip, private):
    from swarmnode.swarm.reachability import follow_lan

    follow = follow_lan("auto", announce=None, bootstrap=(), listen=None, local_addresses=["192.168.1.2"])
    assert follow is not None
    assert follow([f"/ip4/{way_ip}/tcp/1/p2p/{pid(9)}"], neighbour_behind_nat) is private


def test_follow_lan_is_only_for_auto_without_a_way_in_of_its_own():
    from swarmnode.swarm.reachability import follow_lan

    assert follow_lan("public", announce=None, bootstrap=(), listen=None) is None
    assert follow_lan("private", announce=None, bootstrap=(), listen=None) is None
    assert follow_lan("auto", announce="/ip4/203.0.113.1/tcp/1", bootstrap=(), listen=None) is None
    assert follow_lan("auto", announce=None, bootstrap=[way(1)], listen=None) is None


def test_others_are_ignored_and_counted():
    peers = LanPeers("home", "libp2p", pid(0))
    for rec in (record(1, swarm="work"), record(2, transport="hivemind"), record(3, version=3), record(0)):
        assert not peers.offer_txt(encode_txt(rec))
    assert peers.offer_txt(encode_txt(record(4)))
    assert list(peers.candidates()) == [pid(4)]
    # The node's own record is not a refusal.
    assert peers.counts() == {"lan_joins": 0, "lan_way_in_taken": 0, "lan_refused_other_swarm": 1,
                              "lan_refused_other_transport": 1, "lan_refused_version": 1}


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


class _QuietLan(LanDiscovery):
    """LAN discovery without sockets: ``records`` is what it advertised, in order."""

    def _open(self, record: LanRecord | None) -> None:
        self.records = [record]

    def _register(self, record: LanRecord | None) -> None:
        self.records.append(record)


class _LanOnly(_FakeTransport):
    """A node with no bootstrap list; a dial answers when the test put the peer ``up``."""

    def __init__(self) -> None:
        super().__init__([])

    def addresses(self) -> list[str]:
        return [] if self.private else [f"/ip4/192.168.1.2/tcp/4102/p2p/{self.identity.peer_id}"]


async def test_a_lan_only_node_joins_through_a_neighbours_way_in_and_goes_private_behind_its_nat():
    from swarmnode.swarm.reachability import follow_lan

    node = _LanOnly()
    lan = _QuietLan("home", "fake", node.identity.peer_id)
    node.use_lan(lan, follow_lan("auto", announce=None, bootstrap=(), listen=None, local_addresses=["192.168.1.2"]))
    node.up.add(pid(51))  # the relay of way(1)
    await node.start()
    try:
        await wait_for(lambda: lan.running)
        assert lan.records == [LanRecord("home", "fake", node.identity.peer_id, tuple(node.addresses()))]
        assert not node.private  # auto, no bootstrap peer: the node others join through, so far
        # The joiner, behind the home's router, advertises the relay it joined through.
        lan.table.offer(LanRecord("home", "fake", pid(1), (), way_in=(way(1),)))
        lan.changed.set()
        await wait_for(lambda: pid(51) in node.connected)
        assert node.private and node.bootstrap == [way(1)]
        assert lan.records[-1] == LanRecord("home", "fake", node.identity.peer_id, (), way_in=(way(1),))
        assert node.lan_counts()["lan_way_in_taken"] == 1
    finally:
        await node.stop()


async def wait_for(check, seconds: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)
