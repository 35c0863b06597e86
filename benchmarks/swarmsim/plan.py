"""The pull plan a simulated node runs: the product's, with its candidates kept between calls.

:class:`~swarmnode.swarm.transport.pull.PullPlan` walks the announcements it holds at each call
of ``candidates()``: cheap for one node, but a simulation of thousands asks it millions of
times. :class:`KeptPullPlan` keeps the last result, and brings it up to date from what changed
since (the peers announced again, the peers whose candidacy may have changed) while the
policy's bounds stay or move forward (:class:`~swarmnode.swarm.transport.freshness.OnlyFresh`'s
move with every tick). Its choices are the plain plan's: ``tests/test_pull.py`` holds the two
equal after every kind of change.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from typing import Any

from swarmnode.swarm.transport.pull import PullPlan


def _narrower(bounds: tuple[float, float], than: tuple[float, float]) -> bool:
    """True if candidates under ``bounds`` (seen since, made since) are those under ``than``
    that were made since ``bounds``' made bound: that bound moved forward or stayed, and the
    seen bound stayed or moved no further than it (a round is made before it is seen, so an
    announcement seen before that bound was made before it too)."""
    (since, made_since), (was_since, was_made_since) = bounds, than
    return made_since >= was_made_since and (since == was_since or was_since <= since <= made_since)


class KeptPullPlan(PullPlan):
    """A :class:`~swarmnode.swarm.transport.pull.PullPlan` whose ``candidates()`` is kept up to
    date between calls; it returns the kept dict itself, not to be changed."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._memo: tuple[tuple[float, float], dict[str, int]] | None = None  # (bounds, candidates)
        self._by_made: list[tuple[float, str]] = []  # heap: (made, peer) of the memo's, and stale ones
        self._moved: dict[str, None] = {}  # peers put at the end of ``announced`` since, in that order
        self._dirty: set[str] = set()  # other peers whose candidacy may have changed since

    # -- what changes a candidacy ---------------------------------------------------------

    def next_round(self, now: float) -> None:
        super().next_round(now)
        self._memo = None

    def note_announced(self, announced: Mapping[str, int], now: float, details: Mapping[str, Any] | None = None,
                       made: Mapping[str, float] | None = None) -> None:
        super().note_announced(announced, now, details, made)
        moved = self._moved
        for peer in announced:
            if peer != self.own_peer_id:
                moved.pop(peer, None)
                moved[peer] = None

    def _drop(self, peer: str) -> None:
        super()._drop(peer)
        self._dirty.add(peer)

    def note_delivered(self, peer: str) -> None:
        super().note_delivered(peer)
        self._dirty.add(peer)

    def choose(self, established: Callable[[str], bool]) -> list[tuple[str, int]]:
        awaited = set(self.freshness.held())
        out = super().choose(established)
        self._dirty.update(peer for peer, _ in out)  # due, and drawn (``_draw`` adds those held back)
        self._dirty.update(awaited.symmetric_difference(self.freshness.held()))
        return out

    def _draw(self, established: Callable[[str], bool]) -> list[tuple[str, int]]:
        chosen = super()._draw(established)
        self._dirty.update(peer for peer, _ in chosen)
        return chosen

    def missed(self, peer: str, round_no: int) -> bool:
        self._dirty.add(peer)
        return super().missed(peer, round_no)

    # -- the candidates -------------------------------------------------------------------

    def candidates(self) -> dict[str, int]:
        freshness, fetched, announced = self.freshness, self.fetched, self.announced
        since, made_since = freshness.seen_since(self), freshness.made_since(self)
        key = (since, made_since)
        memo = self._memo
        if memo is not None and memo[0] == key and not self._moved and not self._dirty:
            return memo[1]  # nothing changed: a node asks again within a pass
        if memo is None or not _narrower(key, memo[0]):
            return self._rebuild(key)
        held = freshness.held()
        moved, dirty, found = self._moved, self._dirty, memo[1]
        self._moved, self._dirty = {}, set()

        def admitted(p: str) -> bool:
            a = announced.get(p)
            return (a is not None and a.seen >= since and a.made >= made_since and fetched.get(p, -1) < a.round
                    and p not in held)

        for p in dirty.difference(moved):
            if not admitted(p):
                found.pop(p, None)
            elif p not in found:  # a candidate again where it stood: rare, so walk again
                return self._rebuild(key)
        by_made = self._by_made
        for p in moved:  # at the end of announced, in this order
            found.pop(p, None)
            if admitted(p):
                found[p] = announced[p].round
                heapq.heappush(by_made, (announced[p].made, p))
        # Rounds made before the bound, earliest first: stale heap items name a peer that
        # left ``found`` or came back with a later ``made``.
        while by_made and by_made[0][0] < made_since:
            p = heapq.heappop(by_made)[1]
            if p in found and announced[p].made < made_since:
                del found[p]
        self._memo = (key, found)
        return found

    def _rebuild(self, key: tuple[float, float]) -> dict[str, int]:
        """The candidates by the plain plan's walk, kept under ``key``, the policy's bounds."""
        self._moved, self._dirty = {}, set()
        found = super().candidates()
        self._memo = (key, found)
        self._by_made = [(self.announced[p].made, p) for p in found]
        heapq.heapify(self._by_made)
        return found
