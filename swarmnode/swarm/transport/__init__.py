"""Transports: ``hivemind`` (DHT records, the default) and ``libp2p`` (announcements pushed, bundles pulled).

hivemind and py-libp2p cannot share a process (both register libp2p's ``crypto.proto`` in
protobuf's global pool), so :func:`create_transport` imports only the implementation asked
for, and a process runs one transport.

Each transport's decisions are plain code that imports neither network stack (time passed
in as ``now``, randomness from an injected ``random.Random``), called by the transport and
callable as they are by the simulation of many nodes in ``benchmarks/swarmsim``. Shared by
both: :mod:`.base` (the ``Transport`` interface, the dials of its join loop), :mod:`.pull`
(``PullPlan``, the K fetches of a round), :mod:`.freshness` (its policies ``AwaitNext``,
``OnlyFresh``: how old a round it fetches), :mod:`.room`
(``Room``: how a store of peers' records is split over signers), :mod:`.joining`
(``JoinLoop``: when to dial the bootstrap peers again), :mod:`.lan` (``LanDiscovery``: the
nodes of the swarm on the local network, over mDNS). One subpackage per stack:
:mod:`.hivemind` and :mod:`.libp2p`. ``tests/test_imports.py`` checks that the decision
modules import no network stack.

Part of the swarm layer. May import: base, compat.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Sequence

from swarmnode.config import NodeConfig
from swarmnode.swarm.transport.base import MessageHandler, NodeIdentity, Transport, TransportError, TransportStats

TRANSPORTS = {
    "hivemind": ("swarmnode.swarm.transport.hivemind.transport", "HivemindTransport"),
    "libp2p": ("swarmnode.swarm.transport.libp2p.transport", "Libp2pTransport"),
}

log = logging.getLogger("swarmnode.swarm.transport")

__all__ = ["TRANSPORTS", "MessageHandler", "NodeIdentity", "Transport", "TransportError", "TransportStats",
           "create_transport", "transport_for"]


def create_transport(name: str, identity: NodeIdentity, swarm: str, *, bootstrap: Sequence[str] = (),
                     listen: str | None = None, announce: str | None = None, **extra: Any) -> Transport:
    """A new, not yet started transport ``name`` for ``identity`` in ``swarm``.

    ``extra`` goes to the implementation. Raises TransportError for
    an unknown name or a stack that cannot be imported.
    """
    if name not in TRANSPORTS:
        raise TransportError(f"unknown transport {name!r}; choose one of {', '.join(TRANSPORTS)}")
    module_name, class_name = TRANSPORTS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TransportError(f"the {name} transport cannot be loaded ({exc}); reinstall swarmnode, or pick "
                             f"another with --transport") from None
    except TypeError as exc:  # protobuf's descriptor pool clash: the other stack is already imported
        raise TransportError(f"the {name} transport cannot be loaded in a process that already loaded "
                             f"another network stack ({exc}); run one transport per process") from None
    cls: type[Transport] = getattr(module, class_name)
    return cls(identity, swarm, bootstrap, listen, announce, **extra)


def transport_for(cfg: NodeConfig, identity: NodeIdentity, **extra: Any) -> Transport:
    """The transport a node's config asks for (``transport``, ``swarm``, bootstrap, ``listen``,
    ``announce``, ``reachability`` resolved by :func:`swarmnode.swarm.reachability.is_private`,
    discovery on the local network unless ``lan`` is off (with ``auto`` and no bootstrap list,
    the way in a neighbour there advertises: :func:`~swarmnode.swarm.reachability.follow_lan`),
    sealed under ``swarm_key`` if set).
    Raises ConfigError for a bad bootstrap entry or swarm key, TransportError as above."""
    from swarmnode.swarm.bootstrap import resolve_bootstrap
    from swarmnode.swarm.reachability import follow_lan, is_private
    from swarmnode.swarm.sealing import config_sealer, lan_name

    bootstrap = resolve_bootstrap(cfg)
    private = is_private(cfg.reachability, announce=cfg.announce, bootstrap=bootstrap, listen=cfg.listen)
    if private:
        log.info("reachability %s: this node is taken for one behind NAT; it only dials out and advertises "
                 "no address (set reachability = \"public\" if peers can dial it)", cfg.reachability)
    extra.setdefault("fetch_per_round", cfg.fetch_per_round)
    sealer = config_sealer(cfg)
    transport = create_transport(cfg.transport, identity, cfg.swarm, bootstrap=bootstrap, listen=cfg.listen,
                                 announce=cfg.announce, private=private, sealer=sealer, **extra)
    if cfg.lan:
        from swarmnode.swarm.transport.lan import LanDiscovery

        transport.use_lan(LanDiscovery(lan_name(cfg), cfg.transport, identity.peer_id),
                          follow_lan(cfg.reachability, announce=cfg.announce, bootstrap=bootstrap, listen=cfg.listen))
    return transport
