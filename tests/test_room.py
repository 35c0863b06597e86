"""Room, the split of a bounded store over signers, and the libp2p held store built on it."""

from __future__ import annotations

import copy
import random
import threading

from swarmnode.swarm.transport.libp2p.holding import BundleStore
from swarmnode.swarm.transport.room import PROBATION_SLOTS, SLOT_S, TIE_BYTES, Room


def _establish(room: Room, signer: str, t0: float = 0.0) -> float:
    """Store a record of ``signer`` in PROBATION_SLOTS slots, then tick into the next: it is promoted."""
    now = t0
    for slot in range(PROBATION_SLOTS):
        now = t0 + slot * SLOT_S
        room.tick(now)
        room.add(signer, f"{signer}-probation-{slot}", 10, now)
        room.remove(signer, f"{signer}-probation-{slot}")
    now += SLOT_S
    room.tick(now)
    assert room.established(signer)
    return now


def test_a_crowd_of_new_keys_shares_a_quarter_and_never_displaces_an_established_signer():
    room: Room[str] = Room(100_000, 40_000)
    now = _establish(room, "honest")
    for i in range(3):
        assert room.make_room("honest", f"h{i}", 10_000) == ([], None)
        room.add("honest", f"h{i}", 10_000, now + i)
    refused = 0
    for i in range(1000):
        signer, item = f"new{i:04d}", f"n{i}"
        if room.refused_outright(signer, 8_000, item) is not None:
            refused += 1
            continue
        gone, reason = room.make_room(signer, item, 8_000)
        assert reason is None and all(s != "honest" for s, _ in gone)
        room.add(signer, item, 8_000, now)
    assert room.stats().newcomer_bytes <= room.newcomer_room == 25_000
    assert room.items("honest") == ["h0", "h1", "h2"]
    assert refused == 1000 - 3  # three fit in the quarter; the rest are refused before any check


def test_refused_outright_never_refuses_what_make_room_would_keep():
    rng = random.Random(7)
    room: Room[int] = Room(60_000, 12_000)
    now = 0.0
    for step in range(3000):
        now += rng.uniform(0, 3)
        room.tick(now)
        signer, item, size = f"s{rng.randrange(40)}", rng.randrange(200), rng.randrange(500, 6000)
        outright = room.refused_outright(signer, size, item)
        trial = copy.deepcopy(room, {id(room.standing._lock): threading.Lock()})
        _, reason = trial.make_room(signer, item, size)
        if outright is not None:
            assert reason == outright, (step, outright, reason)
        if reason is None and outright is None:
            gone, _ = room.make_room(signer, item, size)
            room.add(signer, item, size, now)
        assert room.total <= room.budget
        assert room.stats().newcomer_bytes <= room.newcomer_room or room.stats().established == 0


def test_over_its_bound_a_signer_loses_its_first_record_and_a_writer_that_would_hold_the_most_gives_way():
    room: Room[str] = Room(30_000, 10_000, newcomer_share=1.0)
    for i in range(2):
        room.add("a", f"a{i}", 4_000, float(i))
    gone, reason = room.make_room("a", "a2", 4_000)
    assert (gone, reason) == ([("a", "a0")], None)  # its first (least order) record
    room.add("a", "a2", 4_000, 2.0)
    for i in range(2):
        room.add("b", f"b{i}", 4_000, float(i))
    room.add("c", "c0", 10_000, 0.0)
    assert room.total == 26_000
    assert room.make_room("d", "d0", 5_000) == ([("c", "c0")], None)  # the largest holder gives way
    room.add("d", "d0", 5_000, 0.0)
    room.add("c", "c1", 9_000, 1.0)
    # ... but not to a writer that would hold within TIE_BYTES as much: it gives way itself
    assert room.make_room("f", "f0", 9_000 - TIE_BYTES + 1) == ([], "newcomers_full")
    # a fresh writer that would hold the most of a full store is refused before any check
    assert room.refused_outright("e", 9_000, "e0") == "newcomers_full"  # here, every signer is a newcomer
    assert room.make_room("e", "e0", 9_000)[1] == "newcomers_full"


def test_the_held_store_keeps_rounds_an_author_and_refuses_a_crowd_beyond_its_share_before_any_check():
    clock = [0.0]
    store = BundleStore(2, 40_000, per_signer=8_000, clock=lambda: clock[0])
    assert store.put("a", 1, b"x" * 1000) is None and store.put("a", 2, b"y" * 1000) is None
    assert store.put("a", 3, b"z" * 1000) is None
    assert store.get("a", 1) is None and store.get("a", 3) == b"z" * 1000 and store.evicted == 1
    refused = []
    for i in range(10):
        refused.append(store.refused_outright(f"k{i}", 4_000))
        if refused[-1] is None:
            assert store.put(f"k{i}", 0, b"k" * 4_000) is None
    assert refused.count(None) == 2  # the newcomers' quarter: 10,000 bytes, a's 2,000 beside two of 4,000
    assert store.room.stats().newcomer_bytes <= 10_000
