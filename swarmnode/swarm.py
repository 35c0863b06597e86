"""What a round needs from the swarm: somewhere to share its groups and a pool to draw from.

The round (``node.py``) sees only :class:`SwarmLink`. A solo node uses :class:`SoloLink`,
which shares nothing and has no pool, so its training set is filled from local groups.
"""

from __future__ import annotations

import random
from typing import Protocol

from swarmnode.rollout import Group


class SwarmLink(Protocol):
    def share(self, round_no: int, groups: list[Group]) -> None:
        """Offer this round's local groups to the swarm; must return at once (never blocks a round)."""

    def draw_external(self, round_no: int, n: int, rng: random.Random) -> list[Group]:
        """Up to ``n`` peers' groups, already re-scored by this node's own verifier."""

    def peer_count(self) -> int:
        """Peers currently connected."""

    def peer_rows(self) -> list[dict]:
        """The peer table for the API (see :meth:`swarmnode.api.NodeControl.peer_rows`)."""


class SoloLink:
    def share(self, round_no: int, groups: list[Group]) -> None:
        pass

    def draw_external(self, round_no: int, n: int, rng: random.Random) -> list[Group]:
        return []

    def peer_count(self) -> int:
        return 0

    def peer_rows(self) -> list[dict]:
        return []
