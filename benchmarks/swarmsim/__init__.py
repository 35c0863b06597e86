"""A swarm of thousands in one process: the transports' own rules over a simulated network.

Each simulated node runs the decision code the real transports run (the pull plans, pushes,
samples, holders and peer exchange of libp2p protocol 3; the shards and bundle keys of
hivemind layout 2) in virtual time (:mod:`~swarmsim.engine`), over a model of the
network (:mod:`~swarmsim.network`: latency, bandwidth, NAT, py-libp2p's and
p2pd's connection limits) and of hivemind's DHT (:mod:`~swarmsim.dht`), with
churn and a mix of hardware (:mod:`~swarmsim.scenario`). Neither hivemind nor
py-libp2p is imported. ``benchmarks/swarm_sim.py`` runs it and prints docs/scale.md's tables.

It lives beside the benchmarks, outside the installed package: it imports swarmnode's swarm
layer (never its node or training layers), and nothing of swarmnode imports it.
"""
