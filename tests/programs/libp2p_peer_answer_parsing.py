"""The peer exchange's answers parsed defensively: garbage, deep, oversized, too many, too long.

Run by tests/test_transport_contract.py in a process of its own; prints one JSON object last.
"""

import json

from swarmnode.swarm.transport.libp2p.peer_exchange import parse_peer_answer

good = "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWHjcpeecN6FBgGGp3wsFGJHrgcuNa5hBpcbHAViLPpjEB"
cases = {
    "good": json.dumps([good, 7, None, "/ip4/1.2.3.4/tcp/1", "no-slash/p2p/x", good]).encode(),
    "garbage": b"\xff\x00{",
    "not a list": b'{"a": 1}',
    "deep": b"[" * 5000 + b"]" * 5000,
    "oversized": json.dumps([good] * 500).encode(),
    "too many": json.dumps([good] * 300).encode(),
    "too long": json.dumps([good + "/" + "x" * 600]).encode(),
}
print(json.dumps({name: parse_peer_answer(raw) for name, raw in cases.items()}))
