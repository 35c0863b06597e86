"""The ``libp2p`` transport, protocol version 3: announcements pushed and sampled, bundles pulled.

The rules, without I/O: :mod:`.announce` (the signed announcement), :mod:`.spread`
(``Libp2pPull``, pushes, ``FirstHand``, samples), :mod:`.holding` (bundle store, holders,
pull sources and checks), :mod:`.named` (asking for a known author's latest announcement),
:mod:`.peer_exchange` (how nodes find each other beyond the bootstrap peers), :mod:`.wire`
(a peer's JSON within a byte limit). The I/O around them: :mod:`.transport`
(``Libp2pTransport``, its asyncio side), :mod:`.host` (its host thread's side: the host, the
streams it answers, its peers), :mod:`.streams` (one request, one answer, in the host's trio thread),
:mod:`.trio_bridge` (a trio program driven from asyncio).

Importing this package imports no network stack; its I/O modules import py-libp2p, so only a
process that runs this transport imports them.

Part of the swarm layer. May import: base, compat.
"""
