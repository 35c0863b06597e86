"""What a pull transport fetches: at most K peers' bundles a round, chosen over peers.

A pull transport learns from small announcements (peer, round) which peers have a bundle it
has not fetched, and fetches some of them. :class:`PullPlan` holds that state and makes the
choice, so a node's cost per round stays flat however many peers announce. It does no I/O:
time comes in as ``now`` (monotonic seconds, or a simulation's virtual ones) and randomness
from its ``rng``, so a transport and a simulation of many nodes run the same rules.

The budget and the draw, the same for every transport:

* the budget is K (``fetch_per_round``) a round: K at the start, and each round of this node
  (:meth:`PullPlan.next_round`, at its publish) starts again with K; what a round did not
  spend lapses, so no round fetches more than K (a carry-over let a round after a lean one
  fetch 2K, and the first round 2K: docs/scale.md). A fetch is spent when asked for,
  whether or not it finds anything, and a peer's announced round is fetched at most once;
* whom to fetch is a :data:`FETCH_SHARE` draw over the announcing peers, one slot each:
  peers with a record at this node alike, the others (newcomers) as one crowd that gets a
  quarter of the round's K, or, once the transport has seen every announcer
  (``census_done``: hivemind, once it has read every shard; libp2p from the start, since it
  asks for its established peers by name), what the established announcers leave of K if
  more. So a node that knows few peers yet fills its rounds with newcomers, and a crowd of
  fresh keys never takes a fetch from an established peer;
* it remembers announcements for ``ttl`` seconds from when it last saw them, and at most
  ``memory`` of them (oldest out), so junk keys cannot grow it.

How old a fetched round may be is the transport's :class:`Freshness` policy. A round is
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
  and again after 2, 4, 8 and 16 s while it is missing (:meth:`PullPlan.missed`); after one
  round of this node's it gives up (the fetch stays spent: the old round would arrive old).
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

Not thread-safe: a transport uses it from one task.
"""

from __future__ import annotations

import heapq
import random
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any

from swarmnode.swarm.standing import PeerShare

FETCH_PER_ROUND = 8
ANNOUNCE_TTL = 120.0
# A round's fetches: established peers each alike; every other announcer, as one crowd, a quarter.
FETCH_SHARE = PeerShare(max_peer_share=0.0, newcomer_share=0.25)
DELIVERED_MEMORY = 4096
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


@dataclass
class Announced:
    """What the plan holds of a peer's latest announcement."""

    round: int
    seen: float  # monotonic seconds it was last read or handed over
    detail: Any  # what the transport keeps with it (see PullPlan.detail)
    made: float  # the earliest sign of this round: monotonic seconds, never after ``seen``
    period: float | None = None  # seconds between the peer's rounds, from the last two made


class Freshness:
    """How a :class:`PullPlan` treats a round by its age (see the module doc): which
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
        """See :meth:`PullPlan.missed`."""
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
    wait: float = AWAIT_RETRY_S  # before asking again, if it is missing
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
            awaited.due = plan.now + awaited.wait
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
        awaited.due = plan.now + awaited.wait if awaited.asks > 0 else awaited.until
        awaited.wait *= 2
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


def _narrower(bounds: tuple[float, float], than: tuple[float, float]) -> bool:
    """True if candidates under ``bounds`` (seen since, made since) are those under ``than``
    that were made since ``bounds``' made bound: that bound moved forward or stayed, and the
    seen bound stayed or moved no further than it (a round is made before it is seen, so an
    announcement seen before that bound was made before it too)."""
    (since, made_since), (was_since, was_made_since) = bounds, than
    return made_since >= was_made_since and (since == was_since or was_since <= since <= made_since)


class PullPlan:
    def __init__(self, own_peer_id: str, fetch_per_round: int = FETCH_PER_ROUND, *, memory: int,
                 freshness: Freshness, ttl: float = ANNOUNCE_TTL, rng: random.Random | None = None):
        """``fetch_per_round``: K (0: fetch nothing, for a node that only serves). ``memory``:
        the most announcements held; ``ttl``: seconds one is held since last seen.
        ``freshness``: the transport's policy, :class:`AwaitNext` or :class:`OnlyFresh`."""
        self.own_peer_id = own_peer_id
        self.k = fetch_per_round
        self.memory = memory
        self.ttl = ttl
        self.rng = rng or random.Random()
        self.freshness = freshness
        self.budget = float(fetch_per_round)
        self.round_began = float("-inf")  # monotonic time of this node's last publish
        self.round_s = float("inf")  # seconds between this node's last two publishes
        self.now = float("-inf")  # the latest time the transport gave
        self.census_done = False  # set by the transport once it has read every announcer
        self.announced: OrderedDict[str, Announced] = OrderedDict()  # oldest seen first
        self.fetched: dict[str, int] = {}  # peer -> latest round asked for
        self.delivered: OrderedDict[str, None] = OrderedDict()  # peers whose bundles arrived, newest last
        self._newcomers_fetched = 0  # this round
        # candidates() as last computed under its policy's bounds, kept up to date between
        # computations, and while the bounds move forward (OnlyFresh's move with ``now``): a
        # node asks for them several times a poll, and a walk over every announcer read
        # lately costs as many entries as a read brings.
        self._memo: tuple[tuple[float, float], dict[str, int]] | None = None
        self._by_made: list[tuple[float, str]] = []  # heap: (made, peer) of the memo's, and stale ones
        self._moved: dict[str, None] = {}  # peers put at the end of ``announced`` since, in that order
        self._dirty: set[str] = set()  # other peers whose candidacy may have changed since
        self._dropped: set[str] = set()  # peers whose announcements left since _keep_only_announced

    def next_round(self, now: float) -> None:
        """This node published a round at ``now`` (monotonic seconds): the new round's K
        fetches (the last round's unspent ones lapse)."""
        self.round_s = now - self.round_began
        self.round_began = self.now = now
        self.budget = float(self.k)
        self._newcomers_fetched = 0
        self._memo = None

    def note_announced(self, announced: Mapping[str, int], now: float, details: Mapping[str, Any] | None = None,
                       made: Mapping[str, float] | None = None) -> None:
        """Announcements seen at ``now`` (monotonic seconds), peer -> round; this node's own are
        ignored. ``details`` (peer -> anything) is kept with each, for :meth:`detail`; ``made``
        (peer -> monotonic seconds) says when an announcement was made, where the transport knows."""
        self.tick(now)
        details, made, plan = details or {}, made or {}, self.announced
        for peer, round_no in announced.items():
            if peer == self.own_peer_id:
                continue
            held = plan.get(peer)
            made_at = min(now, made.get(peer, now))
            self._moved.pop(peer, None)
            self._moved[peer] = None
            if held is not None and held.round == round_no:  # seen again: the same round, updated in place
                held.seen, held.detail, held.made = now, details.get(peer), min(made_at, held.made)
                plan.move_to_end(peer)
                continue
            entry = Announced(round_no, now, details.get(peer), made_at)
            if held is not None:
                if held.round < round_no and made_at > held.made:
                    entry.period = (made_at - held.made) / (round_no - held.round)
                del plan[peer]
            plan[peer] = entry
        while len(self.announced) > self.memory:
            self._drop(self.announced.popitem(last=False)[0])
        self._keep_only_announced()

    def forget(self, peers: Iterable[str]) -> None:
        """Drop what is held of ``peers``' announcements: for a transport that bounds what it
        holds by a rule of its own rather than by when it saw them last."""
        for peer in peers:
            if self.announced.pop(peer, None) is not None:
                self._drop(peer)
        self._keep_only_announced()

    def _drop(self, peer: str) -> None:
        """``peer``'s announcement has just left ``announced``."""
        self._dirty.add(peer)
        self._dropped.add(peer)

    def _keep_only_announced(self) -> None:
        """What the plan keeps of a peer beside its announcement goes with it (only a peer whose
        announcement left can have any: the rest is kept only of peers announced)."""
        gone = [p for p in self._dropped if p not in self.announced]
        self._dropped = set()
        for peer in gone:
            self.fetched.pop(peer, None)
        self.freshness.forget(gone)

    def tick(self, now: float) -> None:
        """Time is now ``now`` (monotonic seconds): announcements unseen for ``ttl`` expire, and
        what is fresh is judged from it."""
        self.now = now
        while self.announced and next(iter(self.announced.values())).seen < now - self.ttl:
            self._drop(self.announced.popitem(last=False)[0])

    def detail(self, peer: str) -> Any:
        """What :meth:`note_announced` was given with ``peer``'s latest announcement still held."""
        entry = self.announced.get(peer)
        return None if entry is None else entry.detail

    def note_delivered(self, peer: str) -> None:
        self.freshness.delivered(peer)
        self._dirty.add(peer)
        self.delivered.pop(peer, None)
        self.delivered[peer] = None
        while len(self.delivered) > DELIVERED_MEMORY:
            self.delivered.popitem(last=False)

    def recent(self, n: int) -> list[str]:
        """The ``n`` peers whose bundles arrived last."""
        return list(islice(reversed(self.delivered), n))[::-1]

    def established(self, standing: Callable[[str], bool] | None, connected: Iterable[str]) -> Callable[[str], bool]:
        """The node's standing, or without one, the peers whose bundles arrived or that are connected."""
        if standing is not None:
            return standing
        known = set(connected)
        return lambda p: p in self.delivered or p in known

    def candidates(self) -> dict[str, int]:
        """Announced rounds not fetched yet that the freshness policy admits, by peer (in the
        order they were last seen). Only announcements seen since the policy's
        :meth:`Freshness.seen_since` are looked at: a swarm's worth of older ones costs nothing."""
        return dict(self._candidates())

    def _candidates(self) -> dict[str, int]:
        """:meth:`candidates`, shared with the memo: not to be changed."""
        freshness, fetched, announced = self.freshness, self.fetched, self.announced
        since, made_since = freshness.seen_since(self), freshness.made_since(self)
        key = (since, made_since)
        memo = self._memo
        if memo is not None and memo[0] == key and not self._moved and not self._dirty:
            return memo[1]  # nothing changed: a node asks again within a pass
        held = freshness.held()
        if memo is not None and _narrower(key, memo[0]):
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
        return self._rebuild(key)

    def _rebuild(self, key: tuple[float, float]) -> dict[str, int]:
        """:meth:`_candidates` by a walk over the announcers seen since the policy's bound."""
        fetched, held = self.fetched, self.freshness.held()
        since, made_since = key
        self._moved, self._dirty = {}, set()
        found = []
        for p, a in reversed(self.announced.items()):
            if a.seen < since:
                break
            if a.made >= made_since and fetched.get(p, -1) < a.round and p not in held:
                found.append((p, a.round))
        found.reverse()
        self._memo = (key, dict(found))
        self._by_made = [(self.announced[p].made, p) for p, _ in found]
        heapq.heapify(self._by_made)
        return self._memo[1]

    def drawable_from(self, established: Callable[[str], bool]) -> float | None:
        """When the earliest candidate not drawable now becomes drawable (a transport that
        sleeps between polls wakes then); None if none will, or no budget is left."""
        if self.budget < 1:
            return None
        freshness, now = self.freshness, self.now
        later = [t for t in (freshness.drawable_from(self, p) for p in self._candidates() if established(p))
                 if now < t < float("inf")]
        return min(later, default=None)

    def wants_announcements(self, established: Callable[[str], bool]) -> bool:
        """True while the budget has fewer candidates than it could spend (the crowd counting
        for its room only): reading more announcements is worth its cost."""
        candidates = self._candidates()
        known = sum(map(established, candidates))
        crowd, budget = len(candidates) - known, int(self.budget)
        if budget <= known or not crowd:  # the crowd's room cannot change the answer
            return budget > known
        return budget > known + min(crowd, self._newcomer_room(established))

    def choose(self, established: Callable[[str], bool]) -> list[tuple[str, int]]:
        """The (peer, round) pairs to fetch now: rounds the policy held back that are now due,
        and new choices, spent from the budget and marked fetched (an established peer's
        round the policy holds back is fetched later instead)."""
        awaited = set(self.freshness.held())
        chosen = self._draw(established)
        drawn = [(peer, round_no) for peer, round_no in chosen
                 if not (established(peer) and self.freshness.hold_back(self, peer, round_no))]
        due = self.freshness.due(self)
        self._dirty.update(peer for peer, _ in chosen)
        self._dirty.update(peer for peer, _ in due)
        self._dirty.update(awaited.symmetric_difference(self.freshness.held()))
        return due + drawn

    def missed(self, peer: str, round_no: int) -> bool:
        """``peer``'s bundle of ``round_no`` was asked for and not found. True if that was an
        awaited round not made yet (it is asked for again later): no fault of the peer's."""
        self._dirty.add(peer)
        return self.freshness.missed(self, peer, round_no)

    def _draw(self, established: Callable[[str], bool]) -> list[tuple[str, int]]:
        candidates = self._candidates()
        if self.budget < 1 or not candidates:
            return []
        room: int | None = None  # counted when a newcomer is first drawn
        chosen: list[tuple[str, int]] = []
        drawable = self.freshness.drawable(self, candidates, established)
        for peer in FETCH_SHARE.pick(self.k, drawable, established, self.rng):
            if len(chosen) >= int(self.budget):
                break
            if not established(peer):
                if room is None:
                    room = self._newcomer_room(established)
                if room < 1:
                    continue
                room -= 1
                self._newcomers_fetched += 1
            chosen.append((peer, candidates[peer]))
        self.budget -= len(chosen)
        self.fetched.update(chosen)
        return chosen

    def _newcomer_room(self, established: Callable[[str], bool]) -> int:
        share = FETCH_SHARE.newcomers(self.k)
        if self.census_done:
            # Established announcers beyond K - share change nothing: stop counting there.
            share = max(share, self.k - self._established_announcers(established, self.k - share))
        return max(0, share - self._newcomers_fetched)

    def _established_announcers(self, established: Callable[[str], bool], most: int) -> int:
        """How many announcers ``established`` admits, ``most`` at the most. Where it is a set's
        membership test (:attr:`Standing.is_established` is) and the set is the smaller, counted
        from the set's side: a node has a few established peers and hears of thousands."""
        members = getattr(established, "__self__", None)
        if type(members) is set and established == members.__contains__ and len(members) < len(self.announced):
            # tuple() copies the set at once: a standing's may change in another thread.
            return min(most, sum(map(self.announced.__contains__, tuple(members))))
        return sum(1 for _ in islice(filter(established, self.announced), most))
