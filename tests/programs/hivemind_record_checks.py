"""The hivemind record validator's verdicts and counters on valid and forged layout-2 records.

Run by tests/test_transport_contract.py in a process of its own; prints one JSON object last.
"""

import dataclasses
import json
import random
import time

import zstandard
from hivemind.dht.validation import DHTRecord
from hivemind.utils import MSGPackSerializer as S
from hivemind.utils import get_dht_time

from swarmnode.compat.hivemind import record_key_id
from swarmnode.swarm.bundle import MAGIC, SIGNING_DOMAIN, VERSION, canonical_json, encode_bundle
from swarmnode.swarm.transport.hivemind.layout import ANNOUNCE_SHARDS, BUNDLE_TTL, announce_key, bundle_key, shard_of
from swarmnode.swarm.transport.hivemind.records import COUNTS, READING, SwarmRecordValidator
from transport_node import identity_for, make_bundle

alice, mallory = identity_for(1), identity_for(2)
reading = READING.set(True)  # a node reading records: each is checked whole
checker = SwarmRecordValidator("sw")  # any node's view
signer = SwarmRecordValidator("sw", alice)  # alice's own DHT, which signs her announcements
bundle = make_bundle(alice, "sw", 7, 2000, random.Random(0))


def rec(key, subkey, value, exp=1e9):
    return DHTRecord(record_key_id(key), S.dumps(subkey), S.dumps(value), exp)


out = {}
out["valid bundle"] = checker.validate(rec(bundle_key("sw", alice.peer_id, 7), alice.peer_id, bundle))
out["someone else's subkey"] = checker.validate(rec(bundle_key("sw", alice.peer_id, 7), mallory.peer_id, bundle))
out["another round's key"] = checker.validate(rec(bundle_key("sw", alice.peer_id, 8), alice.peer_id, bundle))
out["another swarm"] = SwarmRecordValidator("other").validate(
    rec(bundle_key("other", alice.peer_id, 7), alice.peer_id, bundle)
)
out["garbage"] = checker.validate(
    rec(bundle_key("sw", alice.peer_id, 7), alice.peer_id, b"SNB\x02" + alice.public_key + bytes(200))
)
out["not bytes"] = checker.validate(rec(bundle_key("sw", alice.peer_id, 7), alice.peer_id, 12))
out["no subkey"] = checker.validate(rec(bundle_key("sw", alice.peer_id, 7), None, bundle))
home = announce_key("sw", shard_of(alice.peer_id))
head = rec(home, alice.peer_id, 7, exp=123.5)
signed = dataclasses.replace(head, value=signer.sign_value(head))
out["signed head"] = checker.validate(signed)
out["unsigned head"] = checker.validate(head)
out["head with a later expiration"] = checker.validate(dataclasses.replace(signed, expiration_time=999.0))
out["head moved to another subkey"] = checker.validate(
    dataclasses.replace(
        signed, subkey=S.dumps(mallory.peer_id), key=record_key_id(announce_key("sw", shard_of(mallory.peer_id)))
    )
)
away = rec(announce_key("sw", (shard_of(alice.peer_id) + 1) % ANNOUNCE_SHARDS), alice.peer_id, 7, exp=123.5)
out["head in another shard"] = checker.validate(dataclasses.replace(away, value=signer.sign_value(away)))
old_head = rec("sw/heads", alice.peer_id, 7, exp=123.5)
out["version 1 head"] = checker.validate(old_head)
out["version 1 rounds record"] = checker.validate(rec("sw/rounds/7", alice.peer_id, bundle))
forged = rec(home, mallory.peer_id, 7)
out["others' heads are not signed"] = signer.sign_value(forged) == forged.value
out["strip restores the value"] = S.loads(checker.strip_value(signed)) == 7

# Bounds: expiry, size, payload, the unsigned expiry of a rounds record.
now = get_dht_time()
three_years = now + 3 * 365 * 86400
out["bundle, expiry in TTL"] = checker.validate(
    rec(bundle_key("sw", alice.peer_id, 7), alice.peer_id, bundle, exp=now + BUNDLE_TTL)
)
out["bundle, expiry 3 years ahead"] = checker.validate(
    rec(bundle_key("sw", alice.peer_id, 7), alice.peer_id, bundle, exp=three_years)
)
old = encode_bundle(alice, swarm="sw", round_no=7, model="m", groups=[], created=time.time() - 600)
out["old bundle re-stored with a fresh expiry"] = checker.validate(
    rec(bundle_key("sw", alice.peer_id, 7), alice.peer_id, old, exp=now + 200)
)
out["old bundle with its own expiry"] = checker.validate(
    rec(bundle_key("sw", alice.peer_id, 7), alice.peer_id, old, exp=now - 300 + 30)
)
body = canonical_json({"sender": alice.peer_id, "swarm": "sw", "round": 7, "junk": "x" * 1000})
not_a_bundle = (
    MAGIC
    + bytes([VERSION])
    + alice.public_key
    + alice.sign(SIGNING_DOMAIN + body)
    + zstandard.ZstdCompressor().compress(body)
)
out["signed envelope, not a bundle"] = checker.validate(
    rec(bundle_key("sw", alice.peer_id, 7), alice.peer_id, not_a_bundle, exp=now + 100)
)
out["oversized record"] = checker.validate(
    rec(bundle_key("sw", alice.peer_id, 7), alice.peer_id, b"x" * 400_000, exp=now + 100)
)
far_head = rec(home, alice.peer_id, 7, exp=three_years)
out["head expiring in 3 years"] = checker.validate(dataclasses.replace(far_head, value=signer.sign_value(far_head)))
out["counted"] = dict(sorted(COUNTS.refused.items()))
# Storing, the validator checks only what costs nothing; the storage runs the whole check
# (check_stored) once it has room.
READING.reset(reading)
wrong_round = rec(bundle_key("sw", alice.peer_id, 8), alice.peer_id, bundle)
out["stored: header only"] = [
    checker.validate(wrong_round),
    checker.check_stored(wrong_round),
    checker.validate(rec(bundle_key("sw", alice.peer_id, 7), mallory.peer_id, bundle)),
    checker.check_stored(rec(bundle_key("sw", alice.peer_id, 7), alice.peer_id, bundle)),
    checker.check_stored(signed),
]
print(json.dumps(out))
