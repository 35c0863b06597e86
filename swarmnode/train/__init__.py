"""Learning on one machine: the base model and its LoRA policy (``model``, ``policy``), the
GRPO loss (``grpo``), fast generation and scoring on a CPU (``sampler``, ``logprob``,
``prefixattn``, ``kvcache``, ``memtrim``), the reasoning-gym tasks and their verifier
(``tasks``), difficulty levels (``curriculum``) and the fixed held-out score (``yardstick``).
Nothing here knows of peers or the network.

May import: base, compat.
"""
