"""The hivemind record validator of a private swarm: what it seals, opens and refuses.

Run by tests/test_sealing.py in a process of its own (hivemind); prints one JSON object last.
"""

import dataclasses
import json
import random

from hivemind.dht.validation import DHTRecord
from hivemind.utils import MSGPackSerializer as S

from swarmnode.compat.hivemind import record_key_id
from swarmnode.swarm.sealing import Sealer
from swarmnode.swarm.transport.hivemind.layout import announce_key, bundle_key, shard_of
from swarmnode.swarm.transport.hivemind.records import COUNTS, READING, SwarmRecordValidator
from transport_node import identity_for, make_bundle

alice = identity_for(1)
sealer = Sealer.for_swarm("sw", bytes(range(32)))
member = SwarmRecordValidator("sw", sealer=sealer)  # any member's view
signer = SwarmRecordValidator("sw", alice, sealer)  # alice's own DHT
wrong = SwarmRecordValidator("sw", alice, Sealer.for_swarm("sw", bytes(32)))  # a node with another key
public = SwarmRecordValidator("sw", alice)  # the public swarm of the same name
bundle = make_bundle(alice, "sw", 7, 2000, random.Random(0))
space = member.space


def rec(key, value, exp=1e9, subkey=alice.peer_id):
    return DHTRecord(record_key_id(key), S.dumps(subkey), S.dumps(value), exp)


def sealed_by(validator, record):
    return dataclasses.replace(record, value=validator.sign_value(record))


out = {"space": space, "public ids differ": record_key_id(bundle_key(space, alice.peer_id, 7))
       != record_key_id(bundle_key("sw", alice.peer_id, 7))}
reading = READING.set(True)  # a node reading records: each is checked whole
own = rec(bundle_key(space, alice.peer_id, 7), bundle)
sealed = sealed_by(signer, own)
out["sealed bundle"] = member.validate(sealed)
out["bundle not in the clear"] = bundle[40:200] not in sealed.value
out["strip opens it"] = S.loads(member.strip_value(sealed)) == bundle
out["plain bundle"] = member.validate(own)
out["another key's"] = member.validate(sealed_by(wrong, own))
out["tampered"] = member.validate(dataclasses.replace(sealed, value=sealed.value[:-1] + bytes([sealed.value[-1] ^ 1])))
out["cut short"] = member.validate(dataclasses.replace(sealed, value=sealed.value[:20]))
out["moved to another key"] = member.validate(dataclasses.replace(sealed, key=record_key_id(
    bundle_key(space, alice.peer_id, 8))))
out["oversized"] = member.validate(dataclasses.replace(sealed, value=b"\x01" + bytes(400_000)))
home = announce_key(space, shard_of(alice.peer_id))
head = sealed_by(signer, rec(home, 7, exp=123.5))
out["sealed head"] = member.validate(head)
out["strip opens the head"] = S.loads(member.strip_value(head)) == 7
out["public head at the keyed key"] = member.validate(sealed_by(public, rec(home, 7, exp=123.5)))
out["head with a later expiration"] = member.validate(dataclasses.replace(head, expiration_time=999.0))
out["counted"] = dict(sorted(COUNTS.refused.items()))
# What the public swarm signs and stores is byte for byte what it was: nothing sealed.
out["public values unsealed"] = public.sign_value(rec(bundle_key("sw", alice.peer_id, 7), bundle)) == S.dumps(bundle)
READING.reset(reading)
out["stored: opened before the header"] = [member.validate(sealed), member.validate(own),
                                           member.check_stored(sealed), member.check_stored(own)]
print(json.dumps(out))
