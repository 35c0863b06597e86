"""The libp2p transport's protocol version 3: announcements pushed and sampled, bundles pulled.

Signed announcements and the protocol's rules (what spreads, what is held and pulled, whom the
peer exchange dials) are checked in this process: they import no py-libp2p. The rest runs as
programs of ``tests/programs/`` (``libp2p_*.py``), each in a fresh interpreter (py-libp2p
cannot share a process with hivemind, which other tests import): the per-round bound with the network side stubbed (as
``tests/test_hivemind_fetch.py`` does for hivemind), and on real hosts on 127.0.0.1 a pull
whose bytes do not match the digest or run past the announced size, a private node's hold at
a public one, forged, flooding and sampled announcements, the warning about a peer of an
older protocol, and the peer exchange's order.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from swarmnode.swarm.bundle import canonical_json
from swarmnode.swarm.transport.base import MAX_MESSAGE_BYTES
from swarmnode.swarm.transport.libp2p.announce import (
    DOMAIN,
    MAX_ADDRESS_CHARS,
    MAX_ANNOUNCEMENT_BYTES,
    MAX_HOLDERS,
    MAX_SOURCE_ADDRESSES,
    SAMPLE_SIZE,
    Announcement,
    parse_push,
    parse_sample,
    read_signed,
    source_addresses,
)
from swarmnode.swarm.transport.libp2p.holding import (
    MAX_REQUEST_BYTES,
    bundle_request,
    choose_holders,
    hold_rejection,
    parse_request,
    pull_sources,
    pulled_rejection,
)
from swarmnode.swarm.transport.libp2p.named import (
    MAX_NAMED_REQUEST_BYTES,
    MAX_NAMES,
    NAMED_ROUNDS,
    named_answer,
    named_request,
    parse_named_request,
)
from swarmnode.swarm.transport.libp2p.peer_exchange import PEER_TARGET, ExchangeRound, answer_order
from swarmnode.swarm.transport.libp2p.slots import (
    IDLE_GRACE_S,
    PER_ADDRESS,
    SLOT_RESERVE,
    Activity,
    to_close,
)
from swarmnode.swarm.transport.libp2p.spread import (
    ANNOUNCE_PROTOCOL,
    SAMPLE_EVERY,
    SAMPLE_EVERY_MAX,
    FirstHand,
    Libp2pPull,
    PullDials,
    PushPacer,
    SampleSchedule,
    other_release,
    push_targets,
    sources_to_ask,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from programs import output  # noqa: E402
from transport_node import identity_for, make_bundle  # noqa: E402

SW = "sw"


def run_checks(program: str) -> dict:
    """Run ``tests/programs/<program>.py`` in a fresh interpreter; the JSON object its last line prints."""
    return json.loads(output(program, timeout=180, quiet=True).splitlines()[-1])


def _announcement(author: int = 1, **change) -> Announcement:
    peer = identity_for(author).peer_id
    fields = dict(author=peer, swarm=SW, round=3, size=9000, digest="ab" * 32, holders=(peer,))
    return Announcement(**{**fields, **change})


def _wire(announcement: Announcement, signer: int = 1) -> dict:
    """``announcement`` signed by node ``signer``'s key whoever its author is (a forger's wire)."""
    key = identity_for(signer)
    signature = key.sign(DOMAIN + canonical_json(announcement.fields()))
    return {"announcement": announcement.fields(), "signature": signature.hex()}


def test_a_signed_announcement_round_trips_and_anything_else_is_refused():
    good = _announcement()
    wire = good.signed(identity_for(1))
    assert read_signed(wire, SW) == good
    assert parse_push(canonical_json(wire), SW) == (good, wire)
    alice = identity_for(1).peer_id
    tampered = {**wire, "announcement": {**wire["announcement"], "round": 4}}
    cases = {
        "another swarm": read_signed(wire, "other"),
        "tampered after signing": read_signed(tampered, SW),
        "signed by another key": read_signed(_wire(good, signer=2), SW),
        "not an object": read_signed([wire], SW),
        "extra field": read_signed({**wire, "x": 1}, SW),
        "short signature": read_signed({**wire, "signature": "ab"}, SW),
        "signature not hex": read_signed({**wire, "signature": "zz" * 64}, SW),
        "not canonical on the wire": parse_push(json.dumps(wire).encode(), SW),
        "garbage": parse_push(b"\xff\x00{", SW),
        "oversized": parse_push(canonical_json(wire) + b" " * MAX_ANNOUNCEMENT_BYTES, SW),
    }
    for name, change in {"size over the message limit": {"size": MAX_MESSAGE_BYTES + 1}, "size zero": {"size": 0},
                         "negative round": {"round": -1}, "round as a bool": {"round": True},
                         "round as a string": {"round": "3"}, "short digest": {"digest": "ab"},
                         "upper-case digest": {"digest": "AB" * 32}, "no holder": {"holders": ()},
                         "five holders": {"holders": (alice,) * 5}, "holder not a PeerID": {"holders": ("x",)},
                         "author not a PeerID": {"author": "x"}}.items():
        fields = {**good.fields(), **{k: list(v) if isinstance(v, tuple) else v for k, v in change.items()}}
        try:
            signature = identity_for(1).sign(b"swarmnode-announce-v3\0" + canonical_json(fields)).hex()
        except ValueError:
            signature = "00" * 64
        cases[name] = read_signed({"announcement": fields, "signature": signature}, SW)
    assert {name for name, got in cases.items() if got is not None} == set(), "every bad announcement is refused"
    with pytest.raises(ValueError):
        good.signed(identity_for(2))  # only its author signs one


def test_a_later_releases_fields_are_accepted_signed_and_passed_on_unchanged():
    """Protocol 3 grows by fields: a node reads an announcement with fields it does not know
    of (within the size bound) and passes the wire object on as signed, so a later release
    may add one without splitting the swarm."""
    good = _announcement(addresses=((identity_for(1).peer_id, ("/ip4/203.0.113.7/tcp/4001",)),))

    def signed(fields: dict) -> dict:
        return {"announcement": fields, "signature": identity_for(1).sign(DOMAIN + canonical_json(fields)).hex()}

    later = signed({**good.fields(), "receipts": {"n": 2, "of": ["x" * 40]}, "zone": "eu"})
    assert read_signed(later, SW) == good
    assert parse_push(canonical_json(later), SW) == (good, later), "the wire object, extra fields and all"
    assert parse_sample(canonical_json([later, good.signed(identity_for(1))]), SW) == ([good, good], 0)
    stripped = {**later, "announcement": good.fields()}
    assert read_signed(stripped, SW) is None, "the signature covers the fields it does not know of"
    padded = signed({**good.fields(), "pad": "x" * MAX_ANNOUNCEMENT_BYTES})
    assert read_signed(padded, SW) is None, "within the size bound"
    missing = {k: v for k, v in good.fields().items() if k != "digest"}
    assert read_signed(signed({**missing, "digest2": "ab" * 32}), SW) is None, "every field it knows of is there"
    assert read_signed(signed({**good.fields(), "deep": [[[[[[]]]]]] * 3}), SW) == good


def test_an_announcement_carries_its_sources_addresses_bounded_and_checked():
    alice, bob = identity_for(1).peer_id, identity_for(2).peer_id
    given = source_addresses({alice: [f"/ip4/203.0.113.7/tcp/4001/p2p/{alice}", "/ip4/0.0.0.0/tcp/4001",
                                      "/ip4/203.0.113.7/tcp/4001", "/ip6/2001:db8::1/tcp/4001", "/ip4/10.0.0.1/tcp/9"],
                              bob: ["garbage", f"/ip4/198.51.100.2/tcp/4001/p2p/{alice}"],
                              "carol": []})
    assert given == ((alice, ("/ip4/203.0.113.7/tcp/4001", "/ip6/2001:db8::1/tcp/4001")),), \
        "its own /p2p/ part taken off, wildcards, duplicates, garbage and another's /p2p/ dropped, two at most"
    good = _announcement(1, holders=(alice, bob), addresses=given)
    wire = good.signed(identity_for(1))
    assert read_signed(wire, SW) == good and good.addresses_of(alice) == given[0][1] and good.addresses_of(bob) == ()
    assert parse_push(canonical_json(wire), SW) == (good, wire)
    assert "addrs" not in _announcement(1).fields(), "no field of addresses when none is given"

    # The largest announcement there can be fits the wire's bound.
    holders = tuple(identity_for(i).peer_id for i in range(2, 2 + MAX_HOLDERS))
    widest = "/dns4/" + "h" * (MAX_ADDRESS_CHARS - len("/dns4//tcp/65535")) + "/tcp/65535"
    assert len(widest) == MAX_ADDRESS_CHARS
    most = {p: [widest[:-1] + str(i) for i in range(MAX_SOURCE_ADDRESSES)] for p in (alice, *holders)}
    largest = _announcement(1, holders=holders, size=MAX_MESSAGE_BYTES, round=2**53, addresses=source_addresses(most))
    assert len(canonical_json(largest.signed(identity_for(1)))) <= MAX_ANNOUNCEMENT_BYTES
    assert read_signed(largest.signed(identity_for(1)), SW) == largest

    def signed_with(addrs) -> dict:
        fields = {**good.fields(), "addrs": addrs}
        return {"announcement": fields, "signature": identity_for(1).sign(DOMAIN + canonical_json(fields)).hex()}

    bad = {"a source it does not name": {identity_for(7).peer_id: ["/ip4/203.0.113.7/tcp/1"]},
           "too many": {alice: [f"/ip4/203.0.113.{i}/tcp/1" for i in range(MAX_SOURCE_ADDRESSES + 1)]},
           "none": {alice: []}, "an empty field": {}, "not a list": {alice: "/ip4/203.0.113.7/tcp/1"},
           "not an object": [[alice, ["/ip4/203.0.113.7/tcp/1"]]],
           "twice the same": {alice: ["/ip4/1.2.3.4/tcp/1"] * 2},
           "with a /p2p/ part": {alice: [f"/ip4/203.0.113.7/tcp/1/p2p/{alice}"]},
           "a relay circuit": {alice: ["/ip4/203.0.113.7/tcp/1/p2p-circuit"]}, "no port": {alice: ["/ip4/203.0.113.7"]},
           "port 0": {alice: ["/ip4/203.0.113.7/tcp/0"]}, "a wildcard": {alice: ["/ip4/0.0.0.0/tcp/1"]},
           "not a multiaddr": {alice: ["203.0.113.7:4001"]}, "too long": {alice: ["/dns4/" + "h" * 64 + "/tcp/1"]},
           "not a string": {alice: [7]}, "padded": {alice: [" /ip4/203.0.113.7/tcp/1"]}}
    refused = {name: read_signed(signed_with(addrs), SW) for name, addrs in bad.items()}
    assert {name for name, got in refused.items() if got is not None} == set(), "every bad field refuses it all"
    answer = canonical_json([wire, signed_with(bad["too many"]), signed_with(bad["with a /p2p/ part"])])
    assert parse_sample(answer, SW) == ([good], 2), "in a sample, each such entry is dropped and counted"


def test_a_pull_asks_the_sources_it_reaches_then_those_the_announcement_gives_addresses_of():
    a = Announcement("author", SW, 1, 10, "00" * 32, ("author", "h1", "h2", "me"),
                     (("author", ("/ip4/203.0.113.7/tcp/1",)), ("h2", ("/ip4/203.0.113.9/tcp/1",))))
    assert sources_to_ask("me", "author", a, lambda p: p == "h1") == (
        [("author", ("/ip4/203.0.113.7/tcp/1",)), ("h1", ()), ("h2", ("/ip4/203.0.113.9/tcp/1",))], 0)
    assert sources_to_ask("me", "author", a, lambda p: p == "author") == (
        [("author", ()), ("h2", a.addresses[1][1])], 1)
    bare = Announcement("author", SW, 1, 10, "00" * 32, ("author", "h1"))
    assert sources_to_ask("me", "author", bare, lambda p: False) == ([], 2), "no address, no ask; counted"


def test_a_connection_a_pull_dialed_is_closed_after_its_pass_unless_the_node_dialed_the_peer_on_purpose():
    dials = PullDials()
    dials.kept("relay")  # joined through it
    for source in ("author", "holder", "gone", "relay"):
        dials.dialing(source)  # a pull of this pass found it not connected
    dials.kept("holder")  # ... and the peer exchange dialed this one meanwhile
    assert dials.to_close({"relay", "author", "holder", "inbound"}) == ["author"], \
        "only what a pull dialed, is still connected and was not dialed on purpose"
    assert dials.to_close({"author", "holder", "inbound"}) == [], "the next pass closes only what it dialed"
    dials.dialing("relay")  # a kept peer whose connection went (forgotten above), dialed again by a pull
    dials.dialing("holder")  # connected all along since it was kept
    assert dials.to_close({"relay", "holder"}) == ["relay"]


def test_a_sample_answer_keeps_what_checks_out_and_counts_the_rest():
    goods = [_announcement(i).signed(identity_for(i)) for i in range(1, 4)]
    forged = _wire(_announcement(5), signer=6)
    got, bad = parse_sample(canonical_json([*goods, forged, "junk"]), SW)
    assert [a.author for a in got] == [identity_for(i).peer_id for i in range(1, 4)] and bad == 2
    assert parse_sample(canonical_json({"not": "a list"}), SW) == ([], 1)
    assert parse_sample(canonical_json([goods[0]] * (SAMPLE_SIZE + 1)), SW) == ([], 1)
    assert parse_sample(b"[" * 100_000, SW) == ([], 1)
    assert parse_sample(b"[]", SW) == ([], 0)


def test_first_hand_keeps_each_peers_newest_passes_on_a_bounded_uniform_sample_and_forgets():
    table = FirstHand(memory=30, ttl=30.0, rng=random.Random(1))
    for i in range(40):
        a = _announcement(i, round=5)
        assert table.put(a, {"n": i}, now=float(i))
    assert len(table) == 30, "at most memory peers, oldest out"
    older = _announcement(39, round=4)
    assert not table.put(older, {"n": "old"}, now=41.0), "an older round never replaces a newer one"
    sample = table.sample(now=41.0, exclude=[identity_for(39).peer_id])
    assert len(sample) == SAMPLE_SIZE and {"n": 39} not in sample and {"n": "old"} not in sample
    assert all(entry["n"] >= 11 for entry in sample), "only what was pushed within the ttl"
    seen = {e["n"] for _ in range(50) for e in table.sample(now=41.0)}
    assert len(seen) == 29, "drawn over every author held, not the same few"
    assert table.sample(now=100.0) == [] and len(table) == 0


def test_a_crowd_of_new_authors_cannot_push_the_long_heard_ones_out_of_samples():
    table = FirstHand(memory=1000, ttl=20.0, rng=random.Random(2))
    table.put(_announcement(3, round=0), {"n": 3}, now=0.0)
    for t in range(0, 32, 4):  # two authors push every 4 s from the start
        for i in (1, 2):
            table.put(_announcement(i, round=t), {"n": i}, now=float(t))
    for t in (10.0, 20.0):  # then a crowd pushes every 10 s, and another crowd later
        for i in range(100, 200):
            table.put(_announcement(i, round=int(t)), {"n": i}, now=t)
    for i in range(200, 300):
        table.put(_announcement(i, round=25), {"n": i}, now=25.0)
    table.put(_announcement(3, round=25), {"n": 3}, now=25.0)  # silent past the ttl: heard anew
    samples = [table.sample(now=29.0) for _ in range(30)]
    assert all(len(s) == SAMPLE_SIZE and {"n": 1} in s and {"n": 2} in s for s in samples)
    assert not all({"n": 3} in s for s in samples), "an author back after a gap is a newcomer again"
    assert len({e["n"] for s in samples for e in s}) > 100, "the rest drawn over everyone else"
    assert {"n": 1} not in table.sample(now=29.0, exclude=[identity_for(1).peer_id])


@dataclass(frozen=True)
class _Held:
    peer: str
    address: str
    opened: float


def test_idle_inbound_connections_make_room_idlest_first_and_active_ones_never():
    activity = Activity()
    now = 1000.0
    idle = [_Held(f"idle{i}", f"10.0.0.{i}", opened=now - 100 + i) for i in range(40)]
    fresh = [_Held(f"fresh{i}", f"10.1.0.{i}", opened=now - IDLE_GRACE_S / 2) for i in range(40)]
    busy = [_Held(f"busy{i}", f"10.2.0.{i}", opened=now - 500) for i in range(40)]
    for c in busy:
        activity.seen(c.peer, now - 1)
    held = idle + fresh + busy
    assert to_close(held, activity, free=SLOT_RESERVE, now=now) == [], "the reserve is free: nothing to do"
    assert to_close(held, activity, free=SLOT_RESERVE - 3, now=now) == ["idle0", "idle1", "idle2"], "idlest first"
    assert set(to_close(held, activity, free=0, now=now)) == {f"idle{i}" for i in range(SLOT_RESERVE)}
    assert to_close(fresh + busy, activity, free=0, now=now) == [], "never one within its grace, never an active one"
    activity.seen("idle5", now - IDLE_GRACE_S + 1)
    assert "idle5" not in to_close(held, activity, free=0, now=now), "a stream of its peer's makes it active again"

    # One address with more than its share less the reserve loses its idlest, free slots or not.
    crowd = [_Held(f"k{i}", "203.0.113.9", opened=now - 60 - i) for i in range(PER_ADDRESS)]
    closing = to_close(crowd, activity, free=200, now=now)
    assert closing == [f"k{i}" for i in range(PER_ADDRESS - 1, PER_ADDRESS - 1 - SLOT_RESERVE, -1)]
    twice = [_Held("same", "198.51.100.1", now - 60), _Held("same", "198.51.100.1", now - 50)]
    assert to_close(twice, activity, free=0, now=now) == ["same"], "a peer with two connections is closed once"

    bounded = Activity(max_peers=3)
    for i in range(5):
        bounded.seen(f"p{i}", float(i))
    assert [bounded.last(f"p{i}") for i in range(5)] == [None, None, 2.0, 3.0, 4.0], "bounded, quietest out"
    assert bounded.active("p4", 10.0) and not bounded.active("p4", 100.0)


def test_pushes_go_first_to_peers_that_use_their_connection():
    rng = random.Random(0)
    connected = [f"idle{i}" for i in range(100)] + ["a", "b", "c"]
    for _ in range(20):
        chosen = push_targets(connected, rng, lambda p: not p.startswith("idle"))
        assert len(chosen) == 8 and set(chosen[:3]) == {"a", "b", "c"}, "the active ones, then others at random"
    assert sorted(push_targets(["a", "b"], rng, lambda p: False)) == ["a", "b"]
    assert len(set(push_targets(connected, rng))) == 8, "without a view of activity: at random"


def test_pushes_are_read_one_a_second_from_each_peer():
    pacer = PushPacer(memory=100, every=1.0)
    assert pacer.admit("a", 0.0) and pacer.admit("b", 0.1)
    assert not pacer.admit("a", 0.9), "a's second push within the second is dropped unread"
    assert pacer.admit("a", 1.0)


def test_samples_go_round_the_connected_peers_and_are_asked_less_often_while_nobody_is_new():
    schedule = SampleSchedule(random.Random(1))
    peers = ["a", "b", "c"]
    cycle = [schedule.next_peer(peers) for _ in range(6)]
    assert sorted(cycle[:3]) == sorted(cycle[3:]) == peers, "none asked twice before every other once"
    schedule.next_peer(peers)
    assert "c" not in [schedule.next_peer(["a", "b"]) for _ in range(3)], "a peer gone is dropped from the cycle"
    schedule.last = 10.0
    assert schedule.due(10.0 + SAMPLE_EVERY) and not schedule.due(10.0 + SAMPLE_EVERY - 0.1)
    for _ in range(4):
        schedule.answered(0)
    assert schedule.every == SAMPLE_EVERY_MAX
    schedule.new_round()
    assert schedule.every == SAMPLE_EVERY


def test_what_a_node_hears_feeds_its_plan_and_a_sample_is_asked_for_only_when_needed():
    pull = Libp2pPull("me", 2, rng=random.Random(0))

    def heard_of(author: str, round_no: int) -> Announcement:
        return Announcement(author, SW, round_no, 10, "00" * 32, (author,))

    news = pull.heard([heard_of("p", 3), heard_of("me", 9), heard_of("q", 1)], 0.0, blocked=lambda peer: peer == "q")
    assert news == 1 and pull.heard([heard_of("p", 2)], 1.0) == 0, "own, blocked and older rounds are no news"
    assert pull.plan.candidates() == {"p": 3} and pull.plan.detail("p") == heard_of("p", 3)
    def everyone(_peer: str) -> bool:
        return True

    assert pull.sample_peer(1.0, [], everyone) is None, "no one to ask"
    assert pull.sample_peer(1.0, ["x"], everyone) == "x", "one candidate for a budget of two"
    assert pull.sample_peer(1.5, ["x"], everyone) is None, "asked too lately"
    pull.heard([heard_of("r", 1)], 2.0)
    assert pull.sample_peer(9.0, ["x"], everyone) is None, "candidates enough for the budget"


@pytest.mark.parametrize("established, crowd_most", [(0, 8), (3, 5), (10, 2)])
def test_a_crowd_of_fresh_keys_gets_what_the_established_authors_heard_of_leave_of_k(established, crowd_most):
    pull = Libp2pPull("me", 8, rng=random.Random(1))
    honest, crowd = [f"h{i}" for i in range(established)], [f"c{i}" for i in range(50)]
    pull.heard([Announcement(a, SW, 1, 10, "00" * 32, (a,)) for a in honest + crowd], 0.0)
    chosen = []
    for _ in range(6):  # several passes of one round
        chosen += [peer for peer, _ in pull.plan.choose(lambda peer: peer in honest)]
    assert len(chosen) == 8 and len(set(chosen)) == 8, "the round's K is spent, once a peer"
    assert len(set(chosen) & set(crowd)) <= crowd_most
    assert len(set(chosen) & set(honest)) >= min(established, 8 - 2), "the established keep their fetches"


def test_a_request_by_name_names_a_few_peer_ids_and_its_answer_only_newer_rounds_of_those():
    names = [identity_for(i).peer_id for i in range(1, 4)]
    wanted = [(name, 2) for name in names]
    assert parse_named_request(named_request(wanted)) == wanted
    longest = [(identity_for(i).peer_id, 10**19) for i in range(MAX_NAMES)]
    assert parse_named_request(named_request(longest)) == longest, "sixteen names with 20-digit rounds fit"
    bad = {"garbage": b"\xff{", "not a list": canonical_json({"a": names[0]}), "empty": b"[]",
           "too many": named_request([(identity_for(i).peer_id, 0) for i in range(MAX_NAMES + 1)]),
           "twice the same": named_request(wanted[:1] * 2), "not a PeerID": named_request([("x", 1)]),
           "no round": canonical_json([names[0]]), "negative round": named_request([(names[0], -1)]),
           "round as a string": canonical_json([[names[0], "1"]]), "a triple": canonical_json([[names[0], 1, 2]]),
           "not canonical": json.dumps([list(p) for p in wanted]).encode(), "nested": b"[" * 100_000,
           "oversized": named_request(wanted) + b" " * MAX_NAMED_REQUEST_BYTES}
    assert {name for name, raw in bad.items() if parse_named_request(raw) is not None} == set()
    first_hand = FirstHand(ttl=20.0)
    first_hand.put(_announcement(2), {"announcement": {"round": 3}, "n": 2}, now=0.0)
    own = {"announcement": {"round": 3}, "n": 1}
    answer = named_answer(wanted, names[0], own, lambda author: first_hand.latest(author, 5.0))
    assert [e["n"] for e in answer] == [1, 2], "its own, and what the author pushed lately; nothing of the third"
    assert named_answer([(names[1], 3)], names[0], own, lambda author: first_hand.latest(author, 5.0)) == [], \
        "nothing the asker knows of already"
    assert named_answer(wanted[1:2], names[0], own, lambda author: first_hand.latest(author, 25.0)) == [], \
        "only what was pushed within the ttl"
    held = {names[1]: _announcement(2)}
    assert named_answer(wanted, names[0], None, held.get, round_of=lambda a: a.round) == [held[names[1]]], \
        "announcements themselves, their rounds read by round_of (the simulator's)"
    goods = [_announcement(i).signed(identity_for(i)) for i in (1, 2, 5)]
    got, bad_entries = parse_sample(canonical_json(goods), SW, set(names))
    assert [a.author for a in got] == names[:2] and bad_entries == 1, "an author not named is a bad entry"


def test_a_reader_asks_by_name_for_an_established_author_from_half_its_period_on():
    pull = Libp2pPull("me", 8, rng=random.Random(0))

    def heard_of(author: str, round_no: int, holders: tuple[str, ...] = ("relay",)) -> Announcement:
        return Announcement(author, SW, round_no, 10, "00" * 32, (author, *holders))

    def everyone(_peer: str) -> bool:
        return True

    pull.heard([heard_of("p", 1), heard_of("q", 1)], 0.0)
    pull.plan.note_delivered("p")
    pull.heard([heard_of("p", 2), heard_of("q", 2)], 4.0)  # p's bundle arrived before: watched, q's did not
    assert pull.named_asks(8.0, ["relay"], everyone) == {}, "no period measured, and this node's round unknown"
    pull.heard([heard_of("p", 3)], 12.0)  # p's period is 8 s
    assert pull.named_asks(15.9, ["relay"], everyone) == {}, "not half a period yet"
    assert pull.named_asks(16.0, ["relay", "p"], everyone) == {"p": [("p", 3)]}, "the author first"
    assert pull.named_asks(17.0, ["relay"], everyone) == {}, "asked too lately"
    assert pull.named_asks(18.0, ["relay"], everyone) == {"relay": [("p", 3)]}, "then a holder"
    assert pull.named_asks(20.0, [], everyone) == {}, "no source connected"
    assert pull.named_asks(20.0, ["relay"], lambda peer: peer != "p") == {}, "only established authors"
    pull.plan.budget = 0
    assert pull.named_asks(20.0, ["relay"], everyone) == {}, "nothing left to pull this round"
    pull.plan.budget = 8
    pull.heard([heard_of("p", 4)], 20.0)  # heard of at last, by name or otherwise
    assert pull.named_asks(23.9, ["relay"], everyone) == {}
    assert pull.named_asks(20.0 + NAMED_ROUNDS * 8.0 + 0.1, ["relay"], everyone) == {}
    assert len(pull.named) == 0, "silent for its rounds: no longer watched until heard of again"


def test_an_author_that_pushed_its_round_here_is_asked_for_only_once_its_next_push_is_overdue():
    """A round pushed here by its author was heard of as it was made: no newer one exists
    before a period has passed, and a connected author pushes that one here too. So it is
    asked for a period and a retry's wait after (not half a period), and not at all when its
    push comes on time; an author heard of otherwise is asked for from half a period on."""
    pull = Libp2pPull("me", 8, rng=random.Random(0))

    def everyone(_peer: str) -> bool:
        return True

    def heard_of(author: str, round_no: int, t: float, pushed: bool) -> None:
        pull.heard([Announcement(author, SW, round_no, 10, "00" * 32, (author, "relay"))], t, pushed=pushed)

    for author in ("p", "q"):
        pull.plan.note_delivered(author)
        heard_of(author, 1, 0.0, pushed=author == "p")
        heard_of(author, 2, 16.0, pushed=author == "p")  # a period of 16 s; retries 2 s apart
    assert pull.named_asks(24.0, ["p", "q"], everyone) == {"q": [("q", 2)]}, "q was sampled: half a period"
    assert pull.next_named_ask(["p"], everyone) == 16.0 + 16.0 + 2.0
    heard_of("p", 3, 32.0, pushed=True)  # its push came on time: nothing asked
    assert pull.named_asks(33.0, ["p"], everyone) == {}
    assert pull.named_asks(49.9, ["p"], everyone) == {}
    assert pull.named_asks(50.0, ["p"], everyone) == {"p": [("p", 3)]}, "no push this time: asked"
    heard_of("p", 4, 52.0, pushed=False)  # heard of from someone else, a period of 20 s
    assert pull.next_named_ask(["p"], everyone) == 52.0 + 20.0 / 2


def test_a_request_by_name_names_at_most_a_request_full_and_the_steady_authors_first():
    pull = Libp2pPull("me", 8, rng=random.Random(0))
    authors = [f"a{i}" for i in range(MAX_NAMES + 4)]
    for author in authors:
        pull.plan.note_delivered(author)
    for r, t in ((1, 0.0), (2, 4.0)):
        pull.heard([Announcement(a, SW, r, 10, "00" * 32, (a, "relay")) for a in authors], t)
    pull.heard([Announcement("a0", SW, 3, 10, "00" * 32, ("a0", "relay"))], 5.0)
    asks = pull.named_asks(10.0, ["relay"], lambda _peer: True)
    assert len(asks["relay"]) == MAX_NAMES and asks["relay"][0] == ("a0", 3)


def test_when_the_next_ask_by_name_is_due_agrees_with_the_asks_themselves():
    """next_named_ask, for a caller that does not ask every second (the simulator): the time
    named_asks first names someone, given the same peers connected."""
    pull = Libp2pPull("me", 8, rng=random.Random(0))

    def everyone(_peer: str) -> bool:
        return True

    def heard_of(author: str, round_no: int, t: float) -> None:
        pull.heard([Announcement(author, SW, round_no, 10, "00" * 32, (author, "relay"))], t)

    assert pull.next_named_ask(["relay"], everyone) is None, "no one watched"
    heard_of("p", 1, 0.0)
    pull.plan.note_delivered("p")
    heard_of("p", 2, 4.0)
    assert pull.next_named_ask(["relay"], everyone) is None, "no period measured, and this node's round unknown"
    heard_of("p", 3, 12.0)  # a period of 8 s: due from 16 s
    assert pull.next_named_ask(["relay"], everyone) == 16.0
    assert pull.next_named_ask(["elsewhere"], everyone) is None, "no source connected"
    assert pull.next_named_ask(["relay"], lambda peer: peer != "p") is None, "only established authors"
    assert pull.named_asks(15.9, ["relay"], everyone) == {} and pull.named_asks(16.0, ["relay"], everyone)
    assert pull.next_named_ask(["relay"], everyone) == 18.0, "then every 2 s at most (an eighth of 8 s is less)"
    assert pull.named_asks(17.9, ["relay"], everyone) == {} and pull.named_asks(18.0, ["relay"], everyone)
    pull.plan.budget = 0
    assert pull.next_named_ask(["relay"], everyone) is None, "nothing left to pull this round"
    pull.plan.budget = 8
    pull.named_asks(36.5, ["relay"], everyone)
    assert pull.next_named_ask(["relay"], everyone) is None, "past its 3 periods: no longer watched"


def test_holders_sources_and_the_checks_of_a_pulled_bundle():
    author, other = identity_for(1), identity_for(2)
    data = make_bundle(author, SW, 1, 1000, random.Random(0))
    announced = Announcement(author.peer_id, SW, 1, len(data), hashlib.sha256(data).hexdigest(),
                             (author.peer_id, other.peer_id, "me"))
    assert choose_holders(["x", "boot", "y"], {"boot"}) == ["boot", "x"], "bootstrap peers first, two at most"
    assert pull_sources("me", author.peer_id, announced) == [author.peer_id, other.peer_id]
    assert pulled_rejection(author.peer_id, announced, data) is None
    assert pulled_rejection(author.peer_id, announced, data + b"x") == "too_large"
    assert pulled_rejection(author.peer_id, announced, data[:-1] + b"x") == "digest_mismatch"
    assert pulled_rejection(other.peer_id, announced, data) == "peer_id_mismatch"
    assert hold_rejection(author.peer_id, data) == (1, None)
    assert hold_rejection(other.peer_id, data) == (None, "peer_id_mismatch")
    assert parse_request(bundle_request(author.peer_id, 7)) == (author.peer_id, 7)
    assert parse_request(canonical_json({"author": author.peer_id, "round": 7, "later": [1]})) == (author.peer_id, 7), \
        "a field a later release adds is ignored"
    bad = {"garbage": b"\xff{", "nested": b"[" * 100_000, "a list": canonical_json([author.peer_id, 7]),
           "no round": canonical_json({"author": author.peer_id}), "not a PeerID": bundle_request("x", 7),
           "negative round": bundle_request(author.peer_id, -1), "null": b"null",
           "oversized": bundle_request(author.peer_id, 7) + b" " * MAX_REQUEST_BYTES}
    assert {name for name, raw in bad.items() if parse_request(raw) is not None} == set()


def test_a_peer_exchange_asks_only_while_short_of_peers_and_dials_only_strangers_not_bootstrap_peers():
    rng = random.Random(0)
    assert ExchangeRound("me", [], rng).ask == []
    assert ExchangeRound("me", [f"p{i}" for i in range(PEER_TARGET)], rng).ask == []
    turn = ExchangeRound("me", ["a", "b", "c", "d"], rng)
    assert len(turn.ask) == 3 and set(turn.ask) <= {"a", "b", "c", "d"}
    assert not turn.worth_dialing("/ip4/1.2.3.4/tcp/1/p2p/a") and not turn.worth_dialing("/ip4/1.2.3.4/tcp/1/p2p/me")
    assert turn.worth_dialing("/ip4/1.2.3.4/tcp/1/p2p/n0")
    for i in range(PEER_TARGET - 4):  # four connected and itself, then dials up to more than the target
        assert not turn.enough()
        turn.dialed(f"/ip4/1.2.3.4/tcp/1/p2p/n{i}")
    assert turn.enough() and not turn.worth_dialing("/ip4/1.2.3.4/tcp/1/p2p/n0")
    assert sorted(answer_order(["a", "b", "c"], "b", rng)) == ["a", "c"], "everyone but the asker"
    joined = ExchangeRound("me", ["relay1"], rng, bootstrap={"relay1", "relay2"})
    assert not joined.worth_dialing("/ip4/1.2.3.4/tcp/1/p2p/relay2"), "a bootstrap peer is the join loop's to dial"
    assert joined.worth_dialing("/ip4/1.2.3.4/tcp/1/p2p/n0")


@pytest.mark.slow
def test_fifty_announcing_sybils_get_no_more_than_the_pull_plan_allows():
    got = run_checks("libp2p_per_round_bound")
    k = got["k"]
    for i, row in enumerate(got["per_round"]):
        assert row["total"] <= k and row["repeats"] == 0, row
        assert row["honest"] == 3, f"round {i}: every established peer is pulled ({row})"
        # a crowd of fresh keys gets what the three established peers leave of K
        assert row["sybils"] <= k - 3, row
    # a pull that finds nothing is spent and counted against its announcer
    assert got["rejected"] == {"missing_payload": got["pulled"]}
    assert got["requests"] == [[got["alice"], 2], None, None, None, None]


@pytest.mark.slow
def test_holds_and_digest_checks_on_real_hosts():
    got = run_checks("libp2p_two_hosts")
    assert got["held at the public node"] and got["a private node holds nothing"]
    assert not got["home and puller connected"], "the two private nodes never connect"
    assert got["foreign hold answer"] == "" and not got["foreign hold held"]
    assert got["public rejected"] == [[got["public rejected"][0][0], "peer_id_mismatch"]]
    assert not got["mismatch delivered"]
    assert got["home pulled the liar"] in ([], ["digest_mismatch"])
    assert not got["too long delivered"]


@pytest.mark.slow
def test_pushes_are_first_hand_and_paced_and_samples_pass_them_on():
    got = run_checks("libp2p_push_and_sample")
    pusher = identity_for(2).peer_id
    assert got["rejected"] == [[pusher, "bad_announcement"], [pusher, "bad_announcement"]], \
        "another peer's announcement and garbage are counted against the pusher"
    assert got["noted"] == [[pusher, 2]], "only the pusher's own, and one a PUSH_EVERY"
    assert got["noted after the block"] == [], "a blocked peer is disconnected and its pushes go unread"
    assert got["sample authors"] == [True], "the public node passes on what was pushed to it"
    assert got["liar's truth noted"] and got["sampler's reports"] == ["bad_announcement"]
    assert got["named answer"] == [[True, False, False], [False, True, False]], \
        "by name: what the pusher pushed, and the answerer's own; nothing of a peer it did not hear from"
    assert got["nothing newer"] == [], "nothing of a round the asker knows of"
    assert got["garbage request"] == ["", 1], "a request that is not a list of PeerIDs: unanswered, counted"
    assert got["liar's named truth noted"] == 10, "a true entry of an answer is kept"
    assert got["sampler's reports by name"] == ["bad_announcement"] and got["bad named answers"] == 1, \
        "junk and an author not named count once against the answerer"


@pytest.mark.slow
def test_a_node_pulls_from_a_source_it_met_only_in_an_announcement_and_closes_that_connection_after():
    got = run_checks("libp2p_announced_source")
    assert got["address known before"] == [] and not got["connected before"], "the puller had no way to the author"
    listening = [a.rsplit("/p2p/", 1)[0] for a in got["author listens"]]
    assert got["announced"] and set(got["announced"]) <= set(listening), "the author announced where it listens"
    assert not got["connected after"], "the connection dialed only to pull is closed after the pull"
    assert not got["author still connected"], "... at the author's end too"
    assert got["author's inbound slots taken"] == 0, "the author gave the pull's inbound slot back"
    assert got["held by"][1:] == [got["hub"]] and got["hub connected after"], \
        "a peer the puller joined through stays connected after a pull from it"
    assert got["rejected"] == []


@pytest.mark.slow
def test_a_peer_of_an_older_or_a_newer_protocol_is_named_once():
    warnings = run_checks("libp2p_old_peer")["warnings"]
    assert len([w for w in warnings if "older swarmnode" in w]) == 1, warnings
    assert len([w for w in warnings if "newer swarmnode" in w and "/swarmnode/announce/4.0.0" in w]) == 1, warnings


def test_what_a_peers_protocols_say_of_its_release():
    assert other_release({ANNOUNCE_PROTOCOL, "/meshsub/1.1.0", "/swarmnode/announce/4.0.0"}) is None, "it speaks ours"
    assert other_release({"/meshsub/1.1.0", "/ipfs/id/1.0.0"}) == "older"
    assert other_release({"/swarmnode/announce/4.0.0"}) == "newer"
    assert other_release({"/swarmnode/announce/2.0.0", "/swarmnode/announce/x.0"}) is None
    assert other_release(set()) is None, "identify said nothing: no word"


@pytest.mark.slow
def test_a_peer_exchange_answer_names_the_peers_in_random_order():
    got = run_checks("libp2p_peer_answer")
    assert got["peers named"] == [6] and not got["asker named"]
    assert got["first named"] > 1, "ten answers all began with the same peer"


@pytest.mark.slow
def test_a_host_that_ends_on_an_error_is_started_again_with_backoff_and_pulls():
    got = run_checks("libp2p_host_revival")
    assert got == {"host ended": True, "new host": True, "joined again": True, "pulled after": True,
                   "pauses": ["1 s", "2 s"]}, "the pause doubles while the host keeps failing (backoff.Backoff)"
