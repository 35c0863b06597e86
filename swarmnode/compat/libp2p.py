"""py-libp2p internals that the libp2p transport relies on, each behind one function.

Only :mod:`swarmnode.swarm.transport.libp2p_pull` may import this module: it imports
py-libp2p, which cannot share a process with hivemind (see :mod:`swarmnode.compat`). The
functions run in the transport's trio thread. Every contract was checked on the releases in
:data:`CHECKED_ON` by ``tests/test_compat.py`` and the transport contract tests;
``pyproject.toml`` admits exactly :data:`CHECKED_RANGE`.
"""

from __future__ import annotations

import os
from typing import Any

from libp2p.peer.id import ID

# The py-libp2p (PyPI: libp2p) releases pyproject.toml admits, and the ones these contracts were run on.
CHECKED_RANGE = ">=0.8.1,<0.9"
CHECKED_ON = ("0.8.1",)


def allow_redial(host: Any, peer: ID) -> None:
    """Let ``host`` dial ``peer`` at once even if an earlier dial failed.

    Contract (checked on 0.8.1): the swarm (``host.get_network()``) keeps a negative cache of
    peers whose dial failed and refuses to dial them for minutes; ``unblock_peer(peer_id)``
    evicts one. Not part of the host interface.
    """
    host.get_network().unblock_peer(peer)


def batch_window_updates() -> None:
    """Halve the WINDOW_UPDATE frames yamux sends on a stream of small messages (one a read by default).

    Contract (checked on 0.8.1): yamux reads ``PY_YAMUX_RELEASE_ON_READ`` from the environment
    at every stream read. On (its default), every read sends a WINDOW_UPDATE frame back, so
    each small message a node receives costs it an encrypted frame to send. Off, a read sends
    one only while the stream's credit is short, which for a stream of small messages is every
    other read: on 32 nodes a node's bytes fall by a quarter (docs/scale.md). Sets it for this
    process; a value already set wins.
    """
    os.environ.setdefault("PY_YAMUX_RELEASE_ON_READ", "0")
