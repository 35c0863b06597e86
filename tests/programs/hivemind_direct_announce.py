"""Announcements stored straight at their shard's replicas, on real hivemind DHTs on 127.0.0.1.

Seven DHT processes with 3 replicas a key. Node 1 publishes rounds with
``hivemind.dht_process.store_round``: the first traverses and learns the replicas, the next go
straight to them; node 6 reads each back with ``read_announcements``. Then two of the three
replicas other than node 1 and node 6 are shut down: the direct store reaches too few and
falls back to a traversal in the same round, which node 6 reads back too. After rounds 1, 3,
4 and 5, what node 1's DHT process reports (``hivemind.dht_process.counters``: announce_direct,
announce_traversal, announce_direct_failed) and whether that is its rule's own count.

Run by tests/test_hivemind_announce.py in a process of its own; prints one JSON object last.
"""

import json
import os
import random
import sys
import tempfile
import time
from functools import partial

from swarmnode.compat.hivemind import start_dht
from swarmnode.swarm.transport.hivemind import dht_process as calls
from swarmnode.swarm.transport.hivemind.layout import announce_key, shard_of
from swarmnode.swarm.transport.hivemind.records import SwarmRecordValidator
from transport_node import identity_for, make_bundle

SWARM = "sw"
REPLICAS = 3


async def replica_state(_dht, _node, *, key):
    """(replicas, direct stores, traversals) of ``key`` in this DHT process."""
    state = calls.SHARD_REPLICAS.get(key)
    return ([str(p) for p in state.replicas], state.directs, state.traversals) if state else ([], 0, 0)


async def rule_counts(_dht, _node, *, key):
    """ShardReplicas.counts() of ``key`` in this DHT process."""
    return calls.SHARD_REPLICAS[key].counts()


async def own_peer(_dht, node):
    return str(node.peer_id)


def call(dht, coro):
    ok, result = dht.run_coroutine(partial(calls.guarded, coro=coro))
    if not ok:
        raise RuntimeError(result)
    return result


def main() -> None:
    spool = tempfile.mkdtemp()
    ids = [identity_for(100 + i) for i in range(7)]
    dhts = []
    for i, ident in enumerate(ids):
        key_file = os.path.join(spool, f"{i}.key")
        calls.write_private(key_file, ident.private_key_protobuf())
        # No initial_peers: with them hivemind checks a key file's identity as an RSA key.
        dht = start_dht(host_maddrs=["/ip4/127.0.0.1/tcp/0"], identity_path=key_file,
                        record_validators=[SwarmRecordValidator(SWARM, ident)], cache_locally=False,
                        cache_nearest=0, num_replicas=REPLICAS)
        call(dht, partial(calls.bound_storage, checker=SwarmRecordValidator(SWARM)))
        dhts.append(dht)
    for dht in dhts:  # everyone learns everyone, as a node's join does
        for other in dhts:
            if other is not dht:
                call(dht, partial(calls.join, maddr=str(other.get_visible_maddrs()[0])))
    author, readers = ids[1].peer_id, [dhts[6]]
    key = announce_key(SWARM, shard_of(author))
    rng = random.Random(0)
    out: dict = {}

    def publish(round_no: int) -> None:
        time.sleep(0.5)  # replicas refuse a record re-stored within MIN_REFRESH (0.25 s) of the last
        path = os.path.join(spool, f"bundle-{round_no}")
        calls.write_private(path, make_bundle(ids[1], SWARM, round_no, 500, rng))
        call(dhts[1], partial(calls.store_round, swarm=SWARM, peer_id=author, round_no=round_no, path=path,
                              created=time.time()))

    def read_round() -> int | None:
        announced, _answered, _peers = call(readers[-1], partial(calls.read_announcements, swarm=SWARM,
                                                            shards=[shard_of(author)]))
        return announced.get(author, (None, 0.0))[0]

    def note_counts(round_no: int) -> None:
        stores = call(dhts[1], calls.counters).announce_stores
        reported = {"announce_direct": stores.direct, "announce_traversal": stores.traversal,
                    "announce_direct_failed": stores.direct_failed}
        rule = call(dhts[1], partial(rule_counts, key=key))
        out[f"reported after round {round_no}"] = [reported[k] for k in rule]
        out[f"reported after round {round_no} is the rule's"] = {k: reported[k] for k in rule} == rule

    publish(1)
    replicas, directs, traversals = call(dhts[1], partial(replica_state, key=key))
    out["first round traverses"] = (directs, traversals) == (0, 1)
    out["replicas learnt"] = len(replicas)
    out["read round 1"] = read_round()
    note_counts(1)
    for r in (2, 3):
        publish(r)
        out[f"read round {r}"] = read_round()
    replicas, directs, traversals = call(dhts[1], partial(replica_state, key=key))
    out["rounds 2 and 3 direct"] = (directs, traversals) == (2, 1)
    note_counts(3)

    # Shut down two replicas other than the author (DHT ids are drawn at start: the reader may
    # be one); a node that stays up and is not the author reads from then on.
    peers = [call(d, own_peer) for d in dhts]
    gone = [i for i, p in enumerate(peers) if p in replicas and i != 1][:2]
    readers.append(next(dhts[i] for i in range(6, 1, -1) if i not in gone))
    out["replicas shut down"] = len(gone)
    for i in gone:
        dhts[i].shutdown()
    publish(4)
    after, directs, traversals = call(dhts[1], partial(replica_state, key=key))
    out["round 4 tried direct, then traversed"] = (directs, traversals) == (3, 2)
    out["round 4's replicas exclude the gone"] = not any(peers[i] in after for i in gone) and len(after) > 0
    out["read round 4"] = read_round()
    note_counts(4)
    publish(5)
    out["read round 5"] = read_round()
    out["round 5 direct again"] = call(dhts[1], partial(replica_state, key=key))[1:] == (4, 2)
    note_counts(5)
    for i, dht in enumerate(dhts):
        if i not in gone:
            dht.shutdown()
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
