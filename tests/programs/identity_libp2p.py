"""py-libp2p's view of an Ed25519 seed (hex, argv[1]): prints its PeerID, then its signature of
b"swarmnode" in hex. Run by tests/test_identity.py apart from hivemind (they cannot share a
process).
"""

import sys

from libp2p.crypto.ed25519 import Ed25519PrivateKey
from libp2p.peer.id import ID

key = Ed25519PrivateKey.from_bytes(bytes.fromhex(sys.argv[1]))
print(ID.from_pubkey(key.get_public_key()).to_base58())
print(key.sign(b"swarmnode").hex())
