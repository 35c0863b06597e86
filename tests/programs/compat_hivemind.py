"""swarmnode.compat.hivemind's doors on two real DHT nodes: prints one JSON object of checks.

Run by tests/test_compat.py in a process of its own (hivemind and py-libp2p cannot share one).
"""

import asyncio
import json

from hivemind.dht.node import DHTNode
from hivemind.dht.validation import RecordValidatorBase
from hivemind.proto import dht_pb2
from hivemind.utils import get_dht_time

from swarmnode.compat.hivemind import (
    DHTID,
    DHTLocalStorage,
    DictionaryDHTValue,
    connect,
    guard_routing_table,
    local_storage,
    ping,
    record_key_id,
    replace_storage,
    routed_peers,
)


class Seen(DHTLocalStorage):
    def __init__(self):
        super().__init__()
        self.writes = []

    def store_subkey(self, key, subkey, value, expiration_time):
        self.writes.append(subkey)
        return super().store_subkey(key, subkey, value, expiration_time)


class Keys(RecordValidatorBase):
    def __init__(self):
        self.seen = []

    def validate(self, record):
        self.seen.append(record.key)
        return True


async def main():
    keys = Keys()
    a = await DHTNode.create(host_maddrs=["/ip4/127.0.0.1/tcp/0"], record_validator=keys)
    b = await DHTNode.create(host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    out = {"routed before": a.peer_id in routed_peers(b)}
    address = (await a.get_visible_maddrs())[0]
    await connect(b, a.peer_id, [address.decapsulate(f"/p2p/{a.peer_id}")])
    out["ping"] = await ping(b, a.peer_id)
    for _ in range(50):  # ping schedules the routing-table update as a task
        if a.peer_id in routed_peers(b):
            break
        await asyncio.sleep(0.1)
    out["routed after"] = a.peer_id in routed_peers(b)
    await a.store("compat/key", b"x", get_dht_time() + 60)
    out["key id"] = keys.seen[-1] == record_key_id("compat/key")
    out["other key id"] = keys.seen[-1] == record_key_id("compat/other")
    storage = Seen()
    replace_storage(a, storage, Seen())
    await b.store("compat/signed", b"v", get_dht_time() + 60, subkey="signer")
    out["storage sees subkeyed writes"] = storage.writes == ["signer"] and local_storage(a)[0] is storage
    found = storage.get(DHTID.generate(source="compat/signed"))
    del found.value["signer"]
    after = storage.get(DHTID.generate(source="compat/signed"))
    out["deleting the subkey drops the record"] = (isinstance(found.value, DictionaryDHTValue)
                                                   and (after is None or "signer" not in after.value))
    for node in (a, b):
        await node.shutdown()
    for label, guarded in (("a new node gets a copy by default", False), ("no copy once guarded", True)):
        lone = await DHTNode.create(host_maddrs=["/ip4/127.0.0.1/tcp/0"])
        await lone.store("compat/copy", b"x", get_dht_time() + 60)  # no neighbours: kept by itself
        if guarded:
            guard_routing_table(lone)
        newcomer = await DHTNode.create(host_maddrs=["/ip4/127.0.0.1/tcp/0"])
        address = (await lone.get_visible_maddrs())[0]
        await connect(newcomer, lone.peer_id, [address.decapsulate(f"/p2p/{lone.peer_id}")])
        out["pinged " + label] = await ping(newcomer, lone.peer_id)
        for _ in range(30):
            copied = local_storage(newcomer)[0].get(DHTID.generate(source="compat/copy")) is not None
            if copied:
                break
            await asyncio.sleep(0.1)
        out[label] = copied and not guarded or not copied and guarded
        out["routed " + label] = newcomer.peer_id in routed_peers(lone)
        for _ in range(4):  # the newcomer claims four more node ids, as a stranger may in its pings
            claim = dht_pb2.PingRequest(peer=dht_pb2.NodeInfo(node_id=DHTID.generate().to_bytes()))
            await newcomer.protocol.get_stub(lone.peer_id).rpc_ping(claim, timeout=5)
        await asyncio.sleep(0.5)  # the routing-table updates run as tasks
        table = lone.protocol.routing_table.uid_to_peer_id
        out["ids held of a peer claiming five " + label] = sum(p == newcomer.peer_id for p in table.values())
        for node in (lone, newcomer):
            await node.shutdown()
    print(json.dumps(out))


asyncio.run(main())
