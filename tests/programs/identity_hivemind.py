"""hivemind's view of a key file (argv[1]): starts a DHT on it and prints its PeerID. Run by
tests/test_identity.py apart from py-libp2p (they cannot share a process).
"""

import sys

import hivemind

dht = hivemind.DHT(start=True, identity_path=sys.argv[1], host_maddrs=["/ip4/127.0.0.1/tcp/0"])
print(dht.peer_id.to_base58())
dht.shutdown()
