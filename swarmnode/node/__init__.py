"""The node: one SAPO round (``round``), the daemon that runs rounds and the network around
them (``daemon``), its state and events as the local API serves them (``state``, ``api``,
``client``, ``metrics``, ``checkpoint``), fitting rounds to the machine (``budget``,
``threads``, ``priority``), and the node-level commands' work (``doctor``, ``service``,
``relay``, ``evaluate``, ``logs``).

May import: base, compat, train, swarm.
"""
