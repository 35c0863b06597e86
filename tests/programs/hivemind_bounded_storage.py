"""The bounded DHT storage under honest signers, a crowd of newcomers and junk announcements.

Run by tests/test_transport_contract.py in a process of its own; prints one JSON object last.
"""

import json
import time

from hivemind.dht.routing import DHTID

import swarmnode.swarm.transport.hivemind.storage as hs
from swarmnode.swarm.transport.hivemind.records import COUNTS
from swarmnode.swarm.transport.hivemind.storage import ENTRY_OVERHEAD, BoundedStorage
from swarmnode.swarm.transport.room import SLOT_S

clock = [time.time() - 300]  # the storage's clock (hivemind's own expires records by the real one)
hs.get_dht_time = lambda: clock[0]
checked = []


def check(record):
    checked.append(record.key)
    return "not_a_bundle" if record.value.startswith(b"bad") else None


def key(i):
    return DHTID.generate(source=f"k{i}")


def value(n):
    return b"v" * (n - ENTRY_OVERHEAD - 4)  # a record of n bytes as counted, subkey "H..." 4 chars


out = {}
store = BoundedStorage(budget=100 * 1000, per_signer=32 * 1000, check=check)  # newcomers: 25,000 in all
# Hone stores in three slots of the store's standing: it is established from the fourth.
out["honest stores"] = [
    store.store_subkey(key(slot), "Hone", value(7200), clock[0] + 900)
    for slot in range(4)
    if not clock.__setitem__(0, clock[0] + SLOT_S)
]
out["honest established"] = store.room.stats().established == 1
# one signer over its own bound: its record expiring first leaves
out["honest over its bound"] = [
    store.store_subkey(key(10 + i), "Hone", value(7200), clock[0] + 800 + i) for i in range(2)
]
out["honest holds at most its bound"] = store.room.stats().established_bytes <= 32000
held_before = set(store.room.items("Hone"))
# a crowd of 40 new keys, 8,000 bytes each: together they hold at most the newcomers' room;
# the honest signer keeps everything; those refused outright cost no check
checked.clear()
out["crowd stored"] = sum(store.store_subkey(key(100 + i), f"S{i:03d}", value(8000), clock[0] + 250) for i in range(40))
out["crowd checked"] = len(checked)
out["newcomers within their room"] = store.room.stats().newcomer_bytes <= store.room.newcomer_room
out["honest kept all"] = set(store.room.items("Hone")) == held_before
# a newcomer 4 KiB smaller than the crowd's members (TIE_BYTES) makes room from the largest of them
out["a smaller newcomer fits"] = store.store_subkey(key(200), "Tiny", value(3500), clock[0] + 250)
out["a bad record is refused after the room check"] = store.store_subkey(
    key(201), "Tinz", b"bad" + value(3600)[3:], clock[0] + 250
)
# an evicted record takes its key with it: no empty dictionary stays behind
out["no empty keys"] = all(len(v.value.data) for v in store.data.values()) and len(store.data) == len(store._subkeys)
out["total within budget"] = store.total <= store.budget
# established signers over the budget: the one holding the most gives way
for i, name in enumerate(("Estb", "Estc")):
    for slot in range(4):
        clock[0] += SLOT_S
        store.store_subkey(key(300 + 10 * i + slot), name, value(3500), clock[0] + 900)
many = sum(store.store_subkey(key(400 + i), "Estb", value(7200), clock[0] + 900 + i) for i in range(30))
out["budget shared by the established"] = (
    store.total <= store.budget and sum(store.room.held("Hone", k)[0] for k in store.room.items("Hone")) >= 20000
)
out["re-store too soon refused"] = store.store_subkey(key(429), "Estb", value(7200), clock[0] + 929.1)
# refreshing one record keeps hivemind's heaps small
refresh = BoundedStorage(budget=10**6, per_signer=10**6)
for i in range(2000):
    refresh.store_subkey(key(0), "Ref0", b"r", clock[0] + 100 + i)
clock[0] += 2
refresh.store_subkey(key(1), "Ref1", b"r", clock[0] + 100)
out["heaps stay small"] = max(len(refresh.expiration_heap), len(refresh.get(key(0)).value.expiration_heap)) < 200
out["one record over a signer's bound"] = store.store_subkey(key(9), "Hone", value(36000), clock[0] + 100)
out["regular (not subkeyed) value"] = store.store(key(10), b"x", clock[0] + 100)
few = BoundedStorage(budget=10**6, per_signer=10**6, per_key=3)
out["per key"] = [few.store_subkey(key(0), f"P{i}", b"h", clock[0] + 100) for i in range(4)]
out["a held signer refreshes"] = few.store_subkey(key(0), "P0", b"h", clock[0] + 110)
out["another key"] = few.store_subkey(key(1), "P3", b"h", clock[0] + 100)
# announcements have a room of their own (a sixth: 100,000 bytes, newcomers 10 slots): a crowd
# announcing fills its newcomers' slots and leaves the bundles' room alone; every refresh of a
# held announcement fits, whatever its round's length
shards = [key(1000 + s) for s in range(2)]
mixed = BoundedStorage(budget=600 * 1000, per_signer=32 * 1000, announce_keys=shards)
out["own announcement"] = mixed.store_subkey(shards[0], "Ownn", b"\x7f" + b"s" * 64, clock[0] + 100)
out["junk announcements held"] = sum(
    mixed.store_subkey(shards[i % 2], f"J{i:03d}", b"\x01" + b"s" * 64, clock[0] + 100) for i in range(40)
)
out["a newcomer's bundle beside them"] = mixed.store_subkey(key(500), "Ownn", value(7200), clock[0] + 100)
out["own announcement refreshed, longer"] = mixed.store_subkey(
    shards[0], "Ownn", b"\xcc\x80" + b"s" * 64, clock[0] + 101
)
out["refused"] = dict(sorted(COUNTS.refused.items()))
print(json.dumps(out))
