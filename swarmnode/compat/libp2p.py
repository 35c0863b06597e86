"""py-libp2p internals that the libp2p transport relies on, each behind one function.

Only :mod:`swarmnode.swarm.transport.libp2p_gossip` may import this module: it imports
py-libp2p, which cannot share a process with hivemind (see :mod:`swarmnode.compat`). The
functions run in the transport's trio thread. Every contract was checked on the releases in
:data:`CHECKED_ON` by ``tests/test_compat.py`` and the transport contract tests;
``pyproject.toml`` admits exactly :data:`CHECKED_RANGE`.
"""

from __future__ import annotations

import os
from typing import Any, AsyncContextManager

from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service

# The py-libp2p (PyPI: libp2p) releases pyproject.toml admits, and the ones these contracts were run on.
CHECKED_RANGE = ">=0.8.1,<0.9"
CHECKED_ON = ("0.8.1",)


def run_service(service: Any) -> AsyncContextManager[Any]:
    """Run a py-libp2p service (``Pubsub``, ``GossipSub``) for the duration of an ``async with`` block.

    Contract (checked on 0.8.1): ``libp2p.tools.anyio_service.background_trio_service``, the
    runner py-libp2p's own examples and tests use; it lives in a ``tools`` package and is not
    part of a documented API.
    """
    return background_trio_service(service)


def stop_seen_cache(pubsub: Pubsub) -> None:
    """Stop the sweeper thread of ``pubsub``'s cache of seen message ids; call once the pubsub is done.

    Contract (checked on 0.8.1): ``pubsub.seen_messages`` is a ``LastSeenCache`` whose
    background thread outlives the host unless ``stop()`` is called; stopping the service
    does not stop it.
    """
    pubsub.seen_messages.stop()


def allow_redial(host: Any, peer: ID) -> None:
    """Let ``host`` dial ``peer`` at once even if an earlier dial failed.

    Contract (checked on 0.8.1): the swarm (``host.get_network()``) keeps a negative cache of
    peers whose dial failed and refuses to dial them for minutes; ``unblock_peer(peer_id)``
    evicts one. Not part of the host interface.
    """
    host.get_network().unblock_peer(peer)


def subscribers(pubsub: Pubsub, topic: str) -> set[ID]:
    """The connected peers that told ``pubsub`` they subscribe to ``topic``.

    Contract (checked on 0.8.1): ``pubsub.peer_topics`` maps each topic to the set of peers
    whose subscriptions pubsub received, whether or not this node subscribes to it; it is an
    attribute of ``Pubsub``, not a method of its documented interface.
    """
    return set(pubsub.peer_topics.get(topic, ()))


def batch_window_updates() -> None:
    """Halve the WINDOW_UPDATE frames yamux sends on a stream of small messages (one a read by default).

    Contract (checked on 0.8.1): yamux reads ``PY_YAMUX_RELEASE_ON_READ`` from the environment
    at every stream read. On (its default), every read sends a WINDOW_UPDATE frame back, so
    each gossip message a node receives costs it an encrypted frame to send. Off, a read sends
    one only while the stream's credit is short, which for a stream of small messages is every
    other read: on 32 nodes a node's bytes fall by a quarter (docs/scale.md). Sets it for this
    process; a value already set wins.
    """
    os.environ.setdefault("PY_YAMUX_RELEASE_ON_READ", "0")


class LeanPubsub(Pubsub):
    """``Pubsub`` that sends no signed peer record with its RPCs, and no public key a message's
    origin already carries.

    Contract (checked on 0.8.1): every RPC pubsub and gossipsub send, forwarded messages and
    control messages alike, goes through ``Pubsub.write_msg``, and py-libp2p sets the sender's
    signed peer record (``senderRecord``, about 230 bytes) on each; a receiver verifies its
    signature and stores it. Gossipsub's spec has no such field, identify already tells a
    peer our addresses, and swarmnode uses no peer exchange in PRUNE, which is what the
    record serves. It was about 40 % of a node's RPC bytes in a 32-node run, and each one a
    signature check at the receiver. A receiver of any version accepts an RPC with
    no record (an empty one it would refuse, so the field is cleared, not emptied).

    A signed message also carries its origin's public key (``key``, 36 bytes) although an
    Ed25519 PeerID is an identity multihash of that key (its first byte 0x00): the signature
    covers neither field, and py-libp2p's validator (like the spec's) takes the key from the
    PeerID first. Such keys are cleared; any other key (RSA, not inline) is sent.
    """

    async def write_msg(self, stream: Any, rpc_msg: Any) -> bool:
        rpc_msg.ClearField("senderRecord")
        for message in rpc_msg.publish:
            if message.from_id[:1] == b"\x00":
                message.ClearField("key")
        return await super().write_msg(stream, rpc_msg)


class BackoffGossipSub(GossipSub):
    """``GossipSub`` that backs off from the peers its heartbeat prunes, as the spec says.

    Contract (checked on 0.8.1): ``mesh_heartbeat()`` returns ``(peers_to_graft,
    peers_to_prune)``, each mapping a peer to its topics, and records no backoff for the peers
    it prunes, so a later heartbeat may graft one of them again within seconds. That peer
    recorded our PRUNE (``handle_prune``) and takes such a GRAFT within 10 s for a "GRAFT
    flood": it lowers our score (``penalize_graft_flood``) and prunes us again; enough of
    those and it graylists us, ignoring what we send and sending us nothing. ``_add_back_off``
    is the router's own record, which its graft selection already consults.
    """

    def mesh_heartbeat(self) -> Any:
        to_graft, to_prune = super().mesh_heartbeat()
        for peer, topics in to_prune.items():
            for topic in topics:
                self._add_back_off(peer, topic, False)
        return to_graft, to_prune
