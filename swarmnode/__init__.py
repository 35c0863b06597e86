"""swarmnode: a peer-to-peer desktop node for community RL swarms (SAPO)."""

__version__ = "0.1.0"
