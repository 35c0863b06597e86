"""py-libp2p internals that the libp2p transport relies on, each behind one function.

Only :mod:`swarmnode.swarm.transport.libp2p.transport` may import this module: it imports
py-libp2p, which cannot share a process with hivemind (see :mod:`swarmnode.compat`). The
functions run in the transport's trio thread. Every contract was checked on the releases in
:data:`CHECKED_ON` by ``tests/test_compat.py`` and the transport contract tests;
``pyproject.toml`` admits exactly :data:`CHECKED_RANGE`.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from libp2p.crypto.keys import KeyPair
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


class InboundConnectionClosed(Exception):
    """Ends py-libp2p's handler of an inbound connection once the connection has closed."""


def release_inbound_slots(host: Any) -> None:
    """Make ``host`` give an inbound connection's slot back when that connection closes.

    Contract (checked on 0.8.1): the swarm (``host.get_network()``) takes a token of its
    ``_inbound_limiter`` (a ``trio.CapacityLimiter`` of ``max_connections - min_connections``
    tokens, 250 by default) in ``_handle_inbound_connection`` for each connection it accepts,
    refuses a connection when none is left, and gives the token back when that handler
    returns. The handler upgrades the connection with ``upgrade_inbound_raw_conn``, which
    returns the muxed connection (``event_closed``: a ``trio.Event`` set when either end closes
    it), and then waits for the swarm's end: stock, a host accepts 250 inbound connections in
    its life. Here ``upgrade_inbound_raw_conn`` of this swarm, called by a task that holds an
    inbound slot, waits until the connection closes and then raises
    :class:`InboundConnectionClosed`, which the handler takes as a connection that ended: it
    closes the raw connection (already closed, quietly), logs at debug and gives the slot back.
    The cap on inbound connections open at once stays. Other callers (hole punching upgrades an
    outbound dial as inbound) get the connection back as before; an upgrade that fails raises
    as before, and the handler closes it quietly.

    Also checked on 0.8.1: a host's listeners outlive ``host.run()`` (the swarm's own shutdown
    closes them after an await its cancelled scope never passes), and a connection accepted
    then is upgraded and fails in ``add_conn`` (``LifecycleError``, logged as a warning with
    its traceback). Here one that arrives once the swarm's service is cancelled or stopped is
    closed before the upgrade, without a word above debug.
    """
    swarm = host.get_network()
    limiter: trio.CapacityLimiter = swarm._inbound_limiter
    upgrade: Callable[[Any, Any], Awaitable[Any]] = swarm.upgrade_inbound_raw_conn

    async def upgrade_until_closed(raw_conn: Any, maddr: Any) -> Any:
        if not swarm.manager.is_running or swarm.manager.is_cancelled:
            await raw_conn.close()
            raise InboundConnectionClosed("the host has stopped")
        muxed_conn = await upgrade(raw_conn, maddr)
        if trio.lowlevel.current_task() not in limiter.statistics().borrowers:
            return muxed_conn
        await muxed_conn.event_closed.wait()
        raise InboundConnectionClosed(f"inbound connection from {muxed_conn.peer_id} closed")

    swarm.upgrade_inbound_raw_conn = upgrade_until_closed


def keep_own_keys(host: Any) -> None:
    """Keep ``host``'s own key pair in its peerstore however many peers it meets.

    Contract (checked on 0.8.1): the peerstore (``host.get_peerstore()``) holds at most
    ``max_peers`` peers (1,000 by default); ``_enforce_peer_limit`` (run as peers are added) and
    ``_cleanup_expired_records`` (every 5 minutes) delete entries, those without addresses
    first, and the host's own entry, which holds only its keys, is among them. After that
    ``host.get_public_key()`` raises ``PeerStoreError``, the next identify request's handler
    fails, and the error ends the whole host: a relay stopped after about a thousand keys had
    dialed it. Here both put the host's keys back as soon as they have deleted them.
    """
    peerstore = host.get_peerstore()
    own = host.get_id()
    key_pair = KeyPair(peerstore.privkey(own), peerstore.pubkey(own))

    def restoring(evict: Callable[[], None]) -> Callable[[], None]:
        def evict_then_restore() -> None:
            evict()
            if not peerstore.has_peer(own):
                peerstore.add_key_pair(own, key_pair)
        return evict_then_restore

    peerstore._enforce_peer_limit = restoring(peerstore._enforce_peer_limit)
    peerstore._cleanup_expired_records = restoring(peerstore._cleanup_expired_records)
