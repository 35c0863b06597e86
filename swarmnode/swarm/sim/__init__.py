"""A swarm of thousands in one process: the transports' own rules over a simulated network.

Each simulated node runs the decision code the real transports run (the pull plans, pushes,
samples, holders and peer exchange of libp2p protocol 3; the shards and bundle keys of
hivemind layout 2) in virtual time (:mod:`~swarmnode.swarm.sim.engine`), over a model of the
network (:mod:`~swarmnode.swarm.sim.network`: latency, bandwidth, NAT, py-libp2p's and
p2pd's connection limits) and of hivemind's DHT (:mod:`~swarmnode.swarm.sim.dht`), with
churn and a mix of hardware (:mod:`~swarmnode.swarm.sim.scenario`). Neither hivemind nor
py-libp2p is imported. ``benchmarks/swarm_sim.py`` runs it and prints docs/scale.md's tables.

Part of the swarm layer. May import: base, compat.
"""
