"""swarmnode.compat.hivemind's doors on two real DHT nodes: prints one JSON object of checks.

Run by tests/test_compat.py in a process of its own (hivemind and py-libp2p cannot share one).
"""

import asyncio
import json

from hivemind.dht.node import DHTNode
from hivemind.dht.validation import RecordValidatorBase
from hivemind.utils import get_dht_time

from swarmnode.compat.hivemind import (
    DHTID,
    DHTLocalStorage,
    DictionaryDHTValue,
    connect,
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
    print(json.dumps(out))


asyncio.run(main())
