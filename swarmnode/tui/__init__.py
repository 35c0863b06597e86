"""The terminal dashboard of a swarmnode node (``swarmnode tui``)."""
