"""The terminal dashboard of a running node (``swarmnode tui``): a client of the node's local
API (``app``), and the short human forms of a node's numbers that ``swarmnode status``
shares (``humanize``).

May import: base, node (its API client).
"""
