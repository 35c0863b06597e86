"""What a simulated swarm is made of: its nodes' hardware, network and habits, checked.

A :class:`Scenario` names everything a run depends on besides the protocol itself: the
transport, the number of nodes and of relays, the share behind NAT, churn (nodes leaving and
coming back, a rate per hour, as a desktop sleeps), the mix of hardware (each class with its
round length), bandwidth and latency, the bundle size, K, how long to warm up and to measure,
and the seed. :meth:`Scenario.check` refuses a configuration that cannot hold with one line
naming the constraint (:class:`ScenarioError`), before anything runs.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from swarmnode.swarm.transport.joining import JOIN_DIALS
from swarmsim.network import Place

MBIT = 1e6 / 8  # bytes a second in one Mbit/s
TRANSPORTS = ("hivemind", "libp2p")
# py-libp2p 0.8.1's ConnectionConfig defaults: 300 connections, 50 kept for outbound dials,
# so 250 inbound (network/config.py, swarm.py).
LIBP2P_MAX_CONNECTIONS = 300
LIBP2P_MAX_INBOUND = 250
# p2pd's connection manager, as hivemind 1.1.12 starts it (p2pd -h: connLo, connHi, connGrace).
P2PD_LOW, P2PD_HIGH, P2PD_GRACE_S = 256, 512, 120.0


class ScenarioError(ValueError):
    """A configuration that cannot hold; ``str()`` is one line naming the constraint."""


@dataclass(frozen=True)
class Hardware:
    """A class of node: its share of the swarm and the seconds its round takes."""

    name: str
    share: float
    round_s: float


# A community swarm: a few GPU nodes, desktops, and laptops on their CPU (the round lengths of
# docs/scale.md's yardstick: a GPU node's 20 s beside a laptop's 5 minutes).
HARDWARE = (Hardware("gpu", 0.15, 20.0), Hardware("desktop", 0.35, 60.0),
            Hardware("cpu desktop", 0.30, 150.0), Hardware("laptop", 0.20, 300.0))
# One-way backbone latency between three regions (seconds): within one, and across oceans.
REGIONS_S = ((0.010, 0.040, 0.080), (0.040, 0.010, 0.060), (0.080, 0.060, 0.015))


@dataclass(frozen=True)
class Scenario:
    transport: str = "libp2p"
    nodes: int = 1000  # nodes that train, publish and fetch
    relays: int = 8  # public nodes without a model: bootstrap peers, DHT servers or holders
    nat_share: float = 0.7  # of the nodes, behind NAT (dial out only)
    churn_per_hour: float = 0.2  # of the nodes, how many leave in an hour (each comes back after ``sleep_s``)
    sleep_s: float = 1200.0  # mean time a node that left stays away (exponential)
    hardware: tuple[Hardware, ...] = HARDWARE
    round_jitter: float = 0.1  # each round lasts its class's length times 1 +- this (uniform)
    aligned: bool = False  # every node publishes at the same moments (the machine benchmark's rounds)
    bundle_bytes: int = 8000
    fetch_per_round: int = 8
    home_up_mbit: tuple[float, float] = (10.0, 40.0)  # a home node's uplink, uniform in this range
    home_down_mbit: tuple[float, float] = (50.0, 300.0)
    relay_mbit: float = 1000.0
    access_s: tuple[float, float] = (0.005, 0.025)  # one-way access latency, uniform
    regions_s: tuple[tuple[float, ...], ...] = REGIONS_S
    join_s: float = 120.0  # nodes start over this many seconds at the beginning
    warmup_s: float = 900.0
    measure_s: float = 1200.0
    relay_inbound: int = LIBP2P_MAX_INBOUND  # libp2p: inbound connections a host accepts
    relay_max_connections: int = LIBP2P_MAX_CONNECTIONS
    # libp2p: True, an inbound slot stays taken once used until the host stops (py-libp2p
    # 0.8.1's own swarm); False, it is given back when its connection closes.
    inbound_held: bool = False
    seed: int = 0
    extra: dict = field(default_factory=dict, compare=False)  # transport-specific settings, see the agents

    def check(self) -> None:
        """Raise :class:`ScenarioError` for a configuration that cannot hold."""
        if self.transport not in TRANSPORTS:
            raise ScenarioError(f"transport: {self.transport!r} is not one of {', '.join(TRANSPORTS)}")
        if self.nodes < 2:
            raise ScenarioError(f"nodes: {self.nodes} nodes exchange nothing; give at least 2")
        if self.relays < 0:
            raise ScenarioError(f"relays: {self.relays} is negative")
        if not 0.0 <= self.nat_share <= 1.0:
            raise ScenarioError(f"nat_share: {self.nat_share} is not a share between 0 and 1")
        if self.churn_per_hour < 0 or self.sleep_s <= 0:
            raise ScenarioError("churn_per_hour must be >= 0 and sleep_s > 0")
        if not self.hardware or any(h.share < 0 or h.round_s <= 0 for h in self.hardware):
            raise ScenarioError("hardware: every class needs a share >= 0 and a round length > 0")
        if not math.isclose(sum(h.share for h in self.hardware), 1.0, abs_tol=1e-6):
            raise ScenarioError(f"hardware: the shares add up to {sum(h.share for h in self.hardware):g}, not 1")
        if self.bundle_bytes <= 0 or self.fetch_per_round < 0:
            raise ScenarioError("bundle_bytes must be > 0 and fetch_per_round >= 0")
        if self.measure_s <= 0 or self.warmup_s < 0:
            raise ScenarioError("measure_s must be > 0 and warmup_s >= 0")
        if round(self.nodes * self.nat_share) >= self.nodes and self.relays == 0:
            raise ScenarioError("nat_share: every node is behind NAT and there is no relay, so no node can be "
                                "dialed and none can reach another: add relays or public nodes")
        if self.relay_inbound < 1 or self.relay_max_connections < self.relay_inbound:
            raise ScenarioError(f"relay_inbound: {self.relay_inbound} inbound connections a host accepts must be at "
                                f"least 1 and at most its {self.relay_max_connections} connections in all")
        if self.relays and self.nodes * self.join_dials() > self.relays * self.relay_cap():
            raise ScenarioError(
                f"relays: every node dials {self.join_dials()} bootstrap peer(s) to join, and {self.relays} relay(s) "
                f"hold at most {self.relay_cap()} each ({self.relays * self.relay_cap()} in all) for {self.nodes} "
                f"nodes: give at least {math.ceil(self.nodes * JOIN_DIALS / self.relay_cap())} relays")
        if self.relays == 0 and self.nodes - 1 > self.relay_cap():
            raise ScenarioError(f"nodes: {self.nodes - 1} nodes keep a connection to the bootstrap node, which holds "
                                f"at most {self.relay_cap()}: add relays")

    def join_dials(self) -> int:
        """Bootstrap connections each node opens to join (:data:`~swarmnode.swarm.transport.joining.JOIN_DIALS`)."""
        return min(JOIN_DIALS, max(self.relays, 1))

    def relay_cap(self) -> int:
        """Inbound connections one bootstrap peer holds at once."""
        return P2PD_HIGH if self.transport == "hivemind" else self.relay_inbound

    def public_nodes(self) -> int:
        return self.nodes - round(self.nodes * self.nat_share)

    def total(self) -> int:
        return self.nodes + self.relays


def draw_places(s: Scenario, rng: random.Random) -> list[Place]:
    """Where each node sits: relays first (public, fast), then the nodes; ``round(nodes *
    nat_share)`` of the nodes behind NAT, chosen at random."""
    # Without relays, node 0 is the bootstrap peer, so it must be public.
    candidates = range(s.nodes) if s.relays else range(1, s.nodes)
    private = set(rng.sample(candidates, min(len(candidates), round(s.nodes * s.nat_share))))
    regions = len(s.regions_s)
    places = [Place(i % regions, s.access_s[0], s.relay_mbit * MBIT, s.relay_mbit * MBIT, True)
              for i in range(s.relays)]
    for i in range(s.nodes):
        places.append(Place(rng.randrange(regions), rng.uniform(*s.access_s), rng.uniform(*s.home_up_mbit) * MBIT,
                            rng.uniform(*s.home_down_mbit) * MBIT, i not in private))
    return places


def draw_hardware(s: Scenario, rng: random.Random) -> list[Hardware]:
    """Each node's hardware class, in the mix's shares (largest remainder, then shuffled)."""
    counts = [math.floor(h.share * s.nodes) for h in s.hardware]
    order = sorted(range(len(s.hardware)), key=lambda i: s.hardware[i].share * s.nodes - counts[i], reverse=True)
    for i in order[:s.nodes - sum(counts)]:
        counts[i] += 1
    out = [h for h, c in zip(s.hardware, counts) for _ in range(c)]
    rng.shuffle(out)
    return out
