"""Build a simulated swarm from a :class:`~swarmsim.scenario.Scenario`, run it, measure it.

Hosts are numbered relays first, then the nodes. The bootstrap peers every node joins
through are the relays (or host 0, a public node, when there are none: the machine
benchmark's layout). Nodes come online spread over ``join_s`` seconds (all at once with
``aligned``, where they publish together every ``round_s`` from ``join_s`` on, as
``benchmarks/swarm_scale.py`` has them). The measurement window is [``warmup_s``,
``warmup_s`` + ``measure_s``).
"""

from __future__ import annotations

import gc
import math
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from swarmsim.dht import Space
from swarmsim.engine import Engine
from swarmsim.hivemind_node import HivemindCosts, HivemindNode
from swarmsim.libp2p_node import Libp2pCosts, Libp2pNode
from swarmsim.meter import Meter, percentile
from swarmsim.network import Hosts, Network
from swarmsim.node import SimNode, World, peer_id
from swarmsim.scenario import (
    P2PD_GRACE_S,
    P2PD_HIGH,
    P2PD_LOW,
    Scenario,
    draw_hardware,
    draw_places,
)

PROGRESS_S = 60.0


def build(s: Scenario, libp2p_costs: Libp2pCosts | None = None,
          hivemind_costs: HivemindCosts | None = None) -> World:
    """The swarm of ``s`` (checked first: :class:`~swarmsim.scenario.ScenarioError`),
    every node scheduled to start."""
    s.check()
    rng = random.Random(s.seed)
    places = draw_places(s, rng)
    engine = Engine()
    net = Network(engine, places, [list(row) for row in s.regions_s])
    total = s.total()
    if s.transport == "libp2p":
        hosts = Hosts(total, max_total=s.relay_max_connections, max_inbound=s.relay_inbound,
                      inbound_held=s.inbound_held)
    else:
        hosts = Hosts(total, low=P2PD_LOW, high=P2PD_HIGH, grace=P2PD_GRACE_S)
    meter = Meter(total, s.warmup_s, s.warmup_s + s.measure_s)
    world = World(s, engine, net, hosts, meter)
    world.bootstrap = list(range(s.relays)) if s.relays else [0]
    hardware = draw_hardware(s, rng)
    space = Space(total, random.Random(rng.getrandbits(64))) if s.transport == "hivemind" else None
    for host in range(total):
        round_s = 0.0 if host < s.relays else hardware[host - s.relays].round_s
        node_rng = random.Random(rng.getrandbits(64))
        node: SimNode
        if s.transport == "libp2p":
            node = Libp2pNode(world, host, round_s, node_rng, libp2p_costs or Libp2pCosts())
        else:
            assert space is not None
            node = HivemindNode(world, host, round_s, node_rng, hivemind_costs or HivemindCosts(), space)
        world.nodes.append(node)
        world.index[peer_id(host)] = host
    for node in world.nodes:
        when = 0.0 if node.relay or node.idx in world.bootstrap or s.aligned else rng.uniform(0.0, s.join_s)
        engine.at(when, node.start)
    return world


def run(s: Scenario, libp2p_costs: Libp2pCosts | None = None, hivemind_costs: HivemindCosts | None = None,
        progress: Callable[[float, float], None] | None = None) -> dict[str, Any]:
    """Run ``s`` to the end of its window; the meter's summary, with how the run went.
    ``progress(now, end)`` is called every :data:`PROGRESS_S` simulated seconds (the run is
    the same with it or without)."""
    started = time.monotonic()
    world = build(s, libp2p_costs, hivemind_costs)
    engine, meter = world.engine, world.meter
    engine.at(meter.start, meter.snapshot, world.net, False)
    with _collector_off():
        for step in range(1, math.ceil(meter.end / PROGRESS_S)):
            engine.run(step * PROGRESS_S)
            if progress is not None:
                progress(engine.now, meter.end)
        engine.run(meter.end)
    meter.snapshot(world.net, True)
    for node in world.nodes:
        node.close(meter.end)
    _add_upkeep(world, libp2p_costs or Libp2pCosts(), hivemind_costs or HivemindCosts())
    nodes = [n.idx for n in world.nodes if not n.relay]
    summary = meter.summary(nodes, range(len(world.nodes)), [n.fresh_window_s() if not n.relay else 0.0
                                                             for n in world.nodes])
    hosts = world.hosts
    relays = range(s.relays)
    summary.update({
        "transport": s.transport, "nodes": s.nodes, "relays": s.relays, "nat_share": s.nat_share,
        "churn_per_hour": s.churn_per_hour, "seed": s.seed,
        "busiest_bytes_role": _role(world, summary["busiest_bytes_host"]),
        "busiest_msgs_role": _role(world, summary["busiest_msgs_host"]),
        "relay_connections_max": max((len(hosts.peers[r]) for r in relays), default=None),
        "relay_inbound_ever_max": max((hosts.inbound_ever[r] for r in relays), default=None),
        "relay_refused": sum(hosts.refused[r] for r in relays),
        "connections_mean": sum(len(hosts.peers[n]) for n in nodes) / len(nodes),
        "connections_max": max(len(hosts.peers[h]) for h in range(len(world.nodes))),
        "by_round_s": _by_round(world),
        "events_run": engine.events_run,
        "wall_s": time.monotonic() - started,
    })
    return summary


def _by_round(world: World) -> dict[str, dict[str, float | None]]:
    """By the nodes' round length (their hardware class), over the nodes that published in the
    window: bundles a round (mean, 5th percentile) and the peers established with a node at
    the end (mean; None without standing)."""
    meter = world.meter
    classes: dict[float, list[SimNode]] = {}
    for node in world.nodes:
        if not node.relay and meter.published[node.idx]:
            classes.setdefault(node.round_s, []).append(node)
    out: dict[str, dict[str, float | None]] = {}
    for round_s, members in sorted(classes.items()):
        bundles = [len(meter.receipts[n.idx]) / meter.published[n.idx] for n in members]
        standing = [n.standing.stats()["established"] for n in members if n.standing is not None]
        out[f"{round_s:g}"] = {"nodes": len(members), "bundles_mean": statistics.fmean(bundles),
                               "bundles_p5": percentile(bundles, 5),
                               "established_mean": statistics.fmean(standing) if standing else None}
    return out


def _role(world: World, host: int) -> str:
    if host < 0:
        return "none"
    node = world.nodes[host]
    return "relay" if node.relay else ("public node" if node.public else "node behind NAT")


@contextmanager
def _collector_off() -> Iterator[None]:
    """Python's cycle collector off while the engine runs: left on, it walks the whole heap
    (about 1 GB at 10,000 nodes) ever more often as the swarm's state grows, and the nodes
    make no cycles for it to find (a collection after each simulated minute of 10-minute
    runs of 1,000 libp2p and 300 hivemind nodes freed nothing), while even one a minute, of
    what the minute made, took a tenth of the time py-spy sampled in a 10,000-node libp2p run."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _add_upkeep(world: World, libp2p: Libp2pCosts, hivemind: HivemindCosts) -> None:
    """Background bytes not simulated message by message: the stacks' own upkeep, per second
    online (hivemind: per node; libp2p: per connection held at the window's end)."""
    meter = world.meter
    for node in world.nodes:
        online = meter.online_s[node.idx]
        if world.scenario.transport == "hivemind":
            extra = hivemind.upkeep_s * online
        else:
            extra = libp2p.upkeep_per_connection_s * online * len(world.hosts.peers[node.idx])
        meter.add_background(node.idx, int(extra), int(extra))
        meter.count("bytes_upkeep", meter.start, int(extra))
