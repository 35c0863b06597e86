"""How old a round a :class:`~swarmnode.swarm.transport.pull.PullPlan` fetches: the freshness policies.

How old a fetched round may be is the transport's :class:`Freshness` policy, one per plan. A round is
*fresh* if it was made within a window, a ``share`` of this node's round (at least
:data:`FRESH_FLOOR_S`; share 0: no window, any age is fresh). A round counts as made at the
earliest sign of it (the transport's word, or the first read that showed it), so storing one
announcement again does not make its round fresh. A node that fetched peers' rounds at once
whenever it happened to read of them would get bundles up to a round old (docs/scale.md).

* :class:`AwaitNext`, for a transport that reads announcements when it wants them and can
  fetch any round of a peer by name (hivemind's shards and per-round bundle keys). A
  candidate is an announcement seen since this node's round began: one seen before may name
  a round its peer has replaced since, so the transport reads it again first. An established
  peer's drawn round that is not fresh is not fetched: the plan awaits the peer's next round
  (the one after the round it should have made by now, or that one if it is fresh; the
  peer's period comes from when its announcements were made), asks for it when it is due,
  and again after 2, 4, 8 and 16 s while it is missing
  (:meth:`~swarmnode.swarm.transport.pull.PullPlan.missed`); after one round of this node's it
  gives up (the fetch stays spent: the old round would arrive old).
  So that what it awaits comes soon, such a peer is drawn only once its next round is due
  within the window from now (:meth:`Freshness.drawable_from`), and not at all while its
  period is unknown: a node with 20 s rounds draws a peer with 300 s rounds only near the
  time of that peer's rounds. A newcomer's round is drawn only while fresh and fetched at
  once, never awaited, so an announcement of a key without standing costs one fetch.
* :class:`OnlyFresh`, for a transport that is handed announcements as they are made and
  fetches only what was announced (libp2p's pushes and samples, pulls checked against the
  announced digest). A round that is not fresh is no candidate at all, whoever made it: the
  node waits to hear of the peer's next round, and spends its budget on rounds it hears of
  while they are fresh.

Not thread-safe: a plan's policy is used from the plan's task.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from swarmnode.backoff import Backoff

if TYPE_CHECKING:
    from swarmnode.swarm.transport.pull import Announced, PullPlan

# The freshness window's least width, seconds. A bundle this old is fresh enough whatever the
# round; awaiting costs lookups, and with short rounds (the benchmark's 15 s) a 10 s floor
# awaited nearly every drawn round, 0.15 MB a round more a node at 32 nodes (docs/scale.md).
FRESH_FLOOR_S = 20.0
# The window's least when it is capped by a share of the round: an announcement is seen a store
# and a poll after its round was made (seconds), so a narrower window would find no round fresh
# (rounds a few seconds long: only tests and benchmarks run them).
FRESH_LEAST_S = 5.0
# The freshness window's share of this node's round: bundles a quarter of a round old at most,
# where a round's fetches go to rounds made since the one before.
FRESH_SHARE = 0.25
# Asks for an awaited round: when due, then after a wait that starts here and doubles.
AWAIT_ASKS = 5
AWAIT_RETRY_S = 2.0


def fresh_window_s(round_s: float, share: float = FRESH_SHARE, most: float | None = None) -> float:
    """The freshness window of a node with ``round_s`` rounds: ``share`` of its round, at least
    :data:`FRESH_FLOOR_S`, and with ``most`` (a share of the round) never more than that much of
    it, floor or not, so that what was fresh when drawn still arrives inside the round; but
    never under :data:`FRESH_LEAST_S`."""
    floor = FRESH_FLOOR_S if most is None else min(FRESH_FLOOR_S, max(most * round_s, FRESH_LEAST_S))
    return max(share * round_s, floor)


class Freshness:
    """How a :class:`~swarmnode.swarm.transport.pull.PullPlan` treats a round by its age (see the module doc): which
    announcements are candidates, and what happens to a drawn round that is not fresh.
    ``share``: the freshness window as a share of this node's round (0: no window); ``most``:
    the window's widest, as a share of the round, the floor included (None: the floor whatever
    the round; see :func:`fresh_window_s`). One instance per plan: a policy may hold state of
    its own."""

    def __init__(self, share: float = FRESH_SHARE, most: float | None = None):
        self.share = share
        self.most = most

    def oldest_fresh(self, plan: PullPlan) -> float:
        """When the oldest round still fresh was made (without a window, or before this node's
        second round, any)."""
        if not self.share:
            return float("-inf")
        return plan.now - fresh_window_s(plan.round_s, self.share, self.most)

    def seen_since(self, plan: PullPlan) -> float:
        """No announcement last seen before this is a candidate (so a plan looks no further back)."""
        return float("-inf")

    def made_since(self, plan: PullPlan) -> float:
        """No round made before this is a candidate."""
        return float("-inf")

    def held(self) -> Collection[str]:
        """Peers whose announcements are no candidates whatever their age (the policy has them in hand)."""
        return ()

    def hold_back(self, plan: PullPlan, peer: str, round_no: int) -> bool:
        """True to leave established ``peer``'s drawn ``round_no`` unfetched now (the policy
        takes care of it, see :meth:`due`)."""
        return False

    def drawable_from(self, plan: PullPlan, peer: str) -> float:
        """When established ``peer``'s announced round (a candidate) may be drawn: -inf for
        now, inf for not while it stays as it is."""
        return float("-inf")

    def drawable(self, plan: PullPlan, candidates: Iterable[str], established: Callable[[str], bool]
                 ) -> dict[str, int]:
        """Of ``candidates``, in their order, those that may be drawn now (weight 1 each):
        an established peer's once :meth:`drawable_from` has come."""
        return dict.fromkeys(candidates, 1)

    def due(self, plan: PullPlan) -> list[tuple[str, int]]:
        """Rounds held back earlier to ask for now."""
        return []

    def missed(self, plan: PullPlan, peer: str, round_no: int) -> bool:
        """See :meth:`~swarmnode.swarm.transport.pull.PullPlan.missed`."""
        return False

    def delivered(self, peer: str) -> None:
        """``peer``'s bundle arrived."""

    def forget(self, peers: Iterable[str]) -> None:
        """Forget what is held of ``peers``, whose announcements the plan no longer holds."""


@dataclass
class Awaited:
    """A chosen peer whose announced round was old: its next round is asked for when due."""

    next: int  # the round asked for
    due: float
    until: float  # given up then
    # before asking again, if it is missing: AWAIT_RETRY_S, doubling (the asks bound it)
    retry: Backoff = field(default_factory=lambda: Backoff(AWAIT_RETRY_S, math.inf, jitter=0.0), compare=False)
    asks: int = AWAIT_ASKS  # left


class AwaitNext(Freshness):
    """Announcements are read when wanted and any round can be fetched by name (hivemind):
    a candidate was seen this round; an established peer's old round is awaited (module doc)."""

    def __init__(self, share: float = FRESH_SHARE, most: float | None = None):
        super().__init__(share, most)
        self.awaited: dict[str, Awaited] = {}  # peers whose next round is asked for when due

    def seen_since(self, plan: PullPlan) -> float:
        return plan.round_began

    def held(self) -> Collection[str]:
        return self.awaited

    def hold_back(self, plan: PullPlan, peer: str, round_no: int) -> bool:
        """Await ``peer``'s next round instead of ``round_no`` if that was made too long ago."""
        entry = plan.announced[peer]
        oldest = self.oldest_fresh(plan)
        if entry.made >= oldest:
            return False
        behind, due = self._next_fresh(plan, entry, entry.period or plan.round_s, oldest)
        self.awaited[peer] = Awaited(round_no + behind, due, plan.now + plan.round_s)
        plan.fetched[peer] = round_no + behind
        return True

    def drawable_from(self, plan: PullPlan, peer: str) -> float:
        """A fresh round now; a peer of known period a window before its next fresh round is
        due; one of unknown period not before it announces a fresh round."""
        entry = plan.announced[peer]
        oldest = self.oldest_fresh(plan)
        if entry.made >= oldest:
            return float("-inf")
        if entry.period is None:
            return float("inf")
        return self._next_fresh(plan, entry, entry.period, oldest)[1] - (plan.now - oldest)

    def drawable(self, plan: PullPlan, candidates: Iterable[str], established: Callable[[str], bool]
                 ) -> dict[str, int]:
        """Fresh rounds; an established peer's old one per :meth:`drawable_from`; a newcomer's
        old one never: it is not awaited (a key without standing costs one fetch an
        announcement), so it would arrive old."""
        oldest, now, announced = self.oldest_fresh(plan), plan.now, plan.announced
        window = now - oldest
        out = {}
        for peer in candidates:
            entry = announced[peer]
            if entry.made >= oldest:
                out[peer] = 1
            elif (entry.period is not None and established(peer)
                  and self._next_fresh(plan, entry, entry.period, oldest)[1] - window <= now):
                out[peer] = 1
        return out

    @staticmethod
    def _next_fresh(plan: PullPlan, entry: Announced, period: float, oldest: float) -> tuple[int, float]:
        """How many rounds after ``entry``'s the one to await is, and when it is due."""
        # The peer has likely made rounds since the one read (a stale read, or a long wait):
        # the newest it should have if that is fresh, else the one after it.
        behind = int((plan.now - entry.made) // period)
        if behind == 0 or entry.made + behind * period < oldest:
            behind += 1
        return behind, max(plan.now, entry.made + behind * period)

    def due(self, plan: PullPlan) -> list[tuple[str, int]]:
        """Awaited peers to ask now: for a newer round announced meanwhile, or the next round
        when due; those awaited for one round of this node's are given up."""
        due, gone = [], []
        for peer, awaited in self.awaited.items():
            entry = plan.announced.get(peer)
            if entry is None:  # expired by a tick; note_announced forgets it
                continue
            announced = entry.round
            if announced >= awaited.next:
                plan.fetched[peer] = announced
                awaited.until = plan.now  # announced, so stored: a miss now is the peer's
            elif plan.now >= awaited.until:
                gone.append(peer)
                continue
            elif plan.now < awaited.due:
                continue
            due.append((peer, plan.fetched[peer]))
            awaited.due = plan.now + awaited.retry.upcoming
        for peer in gone:
            del self.awaited[peer]
        return due

    def missed(self, plan: PullPlan, peer: str, round_no: int) -> bool:
        awaited = self.awaited.get(peer)
        if awaited is None or round_no != plan.fetched.get(peer):
            return False
        if plan.now >= awaited.until:  # an announced round was missing
            del self.awaited[peer]
            return False
        awaited.asks -= 1
        awaited.due = plan.now + awaited.retry.next_delay() if awaited.asks > 0 else awaited.until
        return True

    def delivered(self, peer: str) -> None:
        self.awaited.pop(peer, None)

    def forget(self, peers: Iterable[str]) -> None:
        for peer in peers:
            self.awaited.pop(peer, None)


class OnlyFresh(Freshness):
    """Announcements are handed over as they are made and only announced rounds are fetched
    (libp2p): a round that is not fresh is no candidate (module doc)."""

    def seen_since(self, plan: PullPlan) -> float:
        return self.oldest_fresh(plan)  # a round is made before it is seen

    def made_since(self, plan: PullPlan) -> float:
        return self.oldest_fresh(plan)
