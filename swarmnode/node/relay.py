"""``swarmnode relay``: a network-only node for swarm operators.

A relay joins the swarm's transport as a *public* peer and does nothing else: it is a
bootstrap peer other nodes dial, and it keeps the bundles of nodes that cannot accept
connections where the others can fetch them (hivemind: nodes behind NAT run as DHT clients
and keep their records in its DHT server; libp2p: they leave their bundles with it over the
hold protocol, it serves them to pullers, and it passes on in sample answers the
announcements peers pushed to it). It pulls no bundle itself (``fetch_per_round`` 0). It
loads no model, no task source and no verifier, and never imports torch (on hivemind it runs
:class:`~swarmnode.swarm.transport.hivemind.server.HivemindServer`, a DHT server on its own
event loop, instead of hivemind's torch-backed ``DHT`` process), so it fits a small VPS.

It must not amplify garbage: what it stores or passes on passes the transport's own checks
(hivemind's :class:`~swarmnode.swarm.transport.hivemind.records.SwarmRecordValidator`
accepts only bundles signed by the subkey's owner and announcements signed by theirs;
libp2p holds only bundles signed by the peer that pushed them, and passes on only
announcements their signed author pushed to it itself), and on libp2p the bundles pushed to
it go through a :class:`~swarmnode.swarm.guard.PeerGuard` first, whose ban blocks a
flooding peer in the transport.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from prometheus_client.core import Metric

from swarmnode.config import NodeConfig
from swarmnode.node.api import MetricsApi
from swarmnode.node.prometheus import relay_families
from swarmnode.paths import NodeHome
from swarmnode.swarm.guard import PeerGuard, claimed_sender
from swarmnode.swarm.identity import Identity, IdentityError
from swarmnode.swarm.sealing import config_sealer
from swarmnode.swarm.transport import Transport, TransportError, create_transport

log = logging.getLogger("swarmnode.relay")

STATUS_EVERY_S = 60.0


class RelayError(RuntimeError):
    """The relay cannot start; ``str()`` is one line for the user."""


@dataclass
class RelayCounts:
    """Written in the libp2p host thread (the hold filter), read for the status line and
    ``/metrics``."""

    held: int = 0           # bundles taken to hold (libp2p) from peers in good standing
    dropped: int = 0        # bundles refused from rate-limited or banned peers


def bootstrap_lines(addresses: list[str]) -> str:
    """What to paste into peers' config: a ``bootstrap = [...]`` TOML line and one flag a line."""
    quoted = ", ".join(f'"{a}"' for a in addresses)
    flags = "\n".join(f"  --bootstrap {a}" for a in addresses)
    return f"bootstrap = [{quoted}]\n{flags}" if addresses else "(no address: the transport reports none)"


@runtime_checkable
class HoldFiltering(Protocol):
    """A transport that holds bundles for private peers (libp2p) and lets the relay refuse some."""

    def set_hold_filter(self, admit: Callable[[bytes], bool]) -> None: ...


class Relay:
    """One relay node: :meth:`run` until :meth:`request_stop` (or SIGINT/SIGTERM)."""

    def __init__(self, cfg: NodeConfig, home: NodeHome, bootstrap: list[str]):
        self.cfg = cfg
        self.home = home
        self.bootstrap = bootstrap
        self.counts = RelayCounts()
        self.transport: Transport | None = None
        self._stop = asyncio.Event()
        self._guard: PeerGuard | None = None

    def request_stop(self) -> None:
        self._stop.set()

    def _open_transport(self, identity: Identity) -> Transport:
        # A relay is the public peer NAT'd nodes lean on, whatever `reachability` says.
        sealer = config_sealer(self.cfg)
        if self.cfg.transport == "hivemind":
            from swarmnode.swarm.transport.hivemind.server import HivemindServer

            return HivemindServer(identity, self.cfg.swarm, self.bootstrap, self.cfg.listen, self.cfg.announce,
                                  sealer=sealer)
        return create_transport(self.cfg.transport, identity, self.cfg.swarm, bootstrap=self.bootstrap,
                                listen=self.cfg.listen, announce=self.cfg.announce, private=False,
                                fetch_per_round=0, sealer=sealer)

    def _admit_hold(self, data: bytes) -> bool:
        """Whether to hold a bundle a private peer pushed (already checked to be signed by it)."""
        assert self._guard is not None
        _, reason = self._guard.admit(data)
        if reason is not None:
            self.counts.dropped += 1
            return False
        sender = claimed_sender(data)
        if sender is not None:
            self._guard.judge(sender, None)  # authenticated: it gets its own bucket from now on
        self.counts.held += 1
        return True

    def metric_families(self) -> list[Metric]:
        """``/metrics``: peers, the transport's counters (what it refused, evicted and holds)
        and the holds by outcome."""
        assert self.transport is not None
        return relay_families(len(self.transport.peers()), vars(self.transport.stats), self.transport.counters(),
                              {"held": self.counts.held, "dropped": self.counts.dropped})

    async def run(self, on_ready: Callable[[list[str]], None]) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.request_stop)
        try:
            identity = Identity.load_or_create(self.home.identity_file)
            self.transport = transport = self._open_transport(identity)
        except (IdentityError, TransportError) as exc:
            raise RelayError(str(exc)) from None
        self._guard = PeerGuard(on_ban=lambda peer, seconds, _why: transport.block(peer, seconds))
        if isinstance(transport, HoldFiltering):  # libp2p: what private nodes leave here
            transport.set_hold_filter(self._admit_hold)
        try:
            await transport.start()
        except TransportError as exc:
            raise RelayError(str(exc)) from None
        api = MetricsApi(self.metric_families, home=self.home, port=self.cfg.api_port)
        try:
            try:
                await api.start()
            except OSError as exc:
                raise RelayError(str(exc)) from None
            on_ready(transport.addresses())
            while not self._stop.is_set():
                try:
                    await asyncio.wait_for(self._stop.wait(), STATUS_EVERY_S)
                except asyncio.TimeoutError:
                    refused = sum(transport.refusals().values())
                    log.info("relay: %d peers connected; %d bundles held, %d refused by the guard; %d records "
                             "refused by the transport (see /metrics)", len(transport.peers()),
                             self.counts.held, self.counts.dropped, refused)
            log.info("relay: stopping")
        finally:
            await api.stop()
            await transport.stop()
        return 0
