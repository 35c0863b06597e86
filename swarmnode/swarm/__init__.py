"""The swarm, without a model: a node's identity (``identity``), the signed rollout bundle
(``bundle``), what a peer may send and how much of the pool and the draws it gets (``guard``,
``standing``, ``pool``), the exchange of bundles and the link the round talks to
(``exchange``, ``link``), joining (``bootstrap``, ``reachability``) and the transports that
move bundle bytes (``transport``). Nothing here imports torch or the trainer.

May import: base, compat.
"""
