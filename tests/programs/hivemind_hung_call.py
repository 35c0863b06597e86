"""A DHT call that hangs ends as an ordinary error within its time-out.

Run by tests/test_transport_contract.py in a process of its own; prints one JSON object last.
"""

import asyncio
import gc
import json

from swarmnode.swarm.transport import create_transport
from swarmnode.swarm.transport.hivemind import dht_process as hivemind_calls
from transport_node import identity_for

hivemind_calls.CALL_TIMEOUT = 2.0


async def hang(_dht, node):
    # What a hang inside hivemind looks like to the DHT process: a future nothing else holds.
    await asyncio.get_running_loop().create_future()


async def collect(_dht, node):
    gc.collect()


async def main():
    t = create_transport("hivemind", identity_for(7), "hung-call", listen="/ip4/127.0.0.1/tcp/0")
    await t.start()
    hung = asyncio.create_task(t._call(hang))
    await asyncio.sleep(0.5)
    for _ in range(3):  # later calls: hivemind keeps a reference to the newest task only
        await t._call(collect)
    try:
        await hung
        error = None
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
    await t._call(collect)  # the DHT process still answers
    await t.stop()
    print(json.dumps({"error": error}))


asyncio.run(main())
