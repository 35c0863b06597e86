"""One door per third-party stack: every private attribute and undocumented call swarmnode makes.

swarmnode leans on a few internals of its libraries: transformers' cache layers and
checkpointing flags (:mod:`.transformers`, with peft's parameter naming), hivemind's p2pd
client and DHT routing table (:mod:`.hivemind`), py-libp2p's service runner and swarm
internals (:mod:`.libp2p`), the C library's malloc calls (:mod:`.glibc`), and the bounds
on torch's bf16 kernel caches (:mod:`.onednn`). Each lives
here as one small typed function (or a small subclass where transformers must be
subclassed), with its contract and the releases it was checked on; the rest of the code
calls only these. A library upgrade that breaks one shows up here and in
``tests/test_compat.py``, and each module's ``CHECKED_RANGE`` is the bound ``pyproject.toml``
declares for that library (the test keeps the two equal).

The hivemind and libp2p modules import their library: only their own transport may import
them, because the two stacks cannot share a process (both register ``crypto.proto`` in
protobuf's global pool). This package's ``__init__`` imports none of the three.

May import: base.
"""
