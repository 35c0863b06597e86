"""The ``hivemind`` transport (the default): bundles as records of a hivemind DHT.

The rules, without I/O: :mod:`.layout` (record keys, shards, expiries), :mod:`.reads`
(``HivemindPull``: which shards a poll reads, what it fetches), :mod:`.announce` (where an
announcement is stored), :mod:`.records` (what a node's DHT stores and reads). The I/O around
them: :mod:`.transport` (``HivemindTransport``), :mod:`.dht_process` (what runs inside
hivemind's DHT process), :mod:`.storage` (the DHT's local storage within bounds),
:mod:`.server` (a DHT server without torch, for ``swarmnode relay``).

Importing this package imports no network stack; its I/O modules import hivemind, so only a
process that runs this transport imports them.

Part of the swarm layer. May import: base, compat.
"""
