"""The SAPO paper's controlled local/external (I/J) experiment on one machine: N of the
node's own ``Node`` objects per config on one shared base model (``runner``; each node and
its in-process link: ``members``), its settings and profiles (``settings``), and its report
and plot (``report``).

May import: base, compat, train, swarm, node.
"""
