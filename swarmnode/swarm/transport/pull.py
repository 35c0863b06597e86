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

How old a fetched round may be is the transport's freshness policy
(:mod:`~swarmnode.swarm.transport.freshness`: ``AwaitNext`` for hivemind, ``OnlyFresh`` for
libp2p). What the plan asks of the node's standing is
:class:`~swarmnode.swarm.standing.Established`.

Not thread-safe: a transport uses it from one task.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from swarmnode.swarm.standing import Established, PeerShare

if TYPE_CHECKING:
    from swarmnode.swarm.transport.freshness import Freshness

FETCH_PER_ROUND = 8
ANNOUNCE_TTL = 120.0
# A round's fetches: established peers each alike; every other announcer, as one crowd, a quarter.
FETCH_SHARE = PeerShare(max_peer_share=0.0, newcomer_share=0.25)
DELIVERED_MEMORY = 4096



@dataclass
class Announced:
    """What the plan holds of a peer's latest announcement."""

    round: int
    seen: float  # monotonic seconds it was last read or handed over
    detail: Any  # what the transport keeps with it (see PullPlan.detail)
    made: float  # the earliest sign of this round: monotonic seconds, never after ``seen``
    period: float | None = None  # seconds between the peer's rounds, from the last two made



class PullPlan:
    """The budget, the announcements held and the draw (module doc). Its candidates are
    computed afresh at each call, a walk over the announcements seen since the policy's
    :meth:`~swarmnode.swarm.transport.freshness.Freshness.seen_since`: a node holds a few
    thousand and asks a few times a second."""

    def __init__(self, own_peer_id: str, fetch_per_round: int = FETCH_PER_ROUND, *, memory: int,
                 freshness: Freshness, ttl: float = ANNOUNCE_TTL, rng: random.Random | None = None):
        """``fetch_per_round``: K (0: fetch nothing, for a node that only serves). ``memory``:
        the most announcements held; ``ttl``: seconds one is held since last seen.
        ``freshness``: the transport's policy (:mod:`~swarmnode.swarm.transport.freshness`)."""
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
        # Peers whose announcements left (expired, or pushed out) since the last note_announced
        # or forget, which drop what else the plan keeps of those that did not come back.
        self._dropped: set[str] = set()

    def next_round(self, now: float) -> None:
        """This node published a round at ``now`` (monotonic seconds): the new round's K
        fetches (the last round's unspent ones lapse)."""
        self.round_s = now - self.round_began
        self.round_began = self.now = now
        self.budget = float(self.k)
        self._newcomers_fetched = 0

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
        :meth:`~swarmnode.swarm.transport.freshness.Freshness.seen_since` are looked at: a
        swarm's worth of older ones costs nothing."""
        freshness, fetched = self.freshness, self.fetched
        since, made_since, held = freshness.seen_since(self), freshness.made_since(self), freshness.held()
        found = []
        for p, a in reversed(self.announced.items()):
            if a.seen < since:
                break
            if a.made >= made_since and fetched.get(p, -1) < a.round and p not in held:
                found.append((p, a.round))
        return dict(reversed(found))

    def drawable_from(self, established: Callable[[str], bool]) -> float | None:
        """When the earliest candidate not drawable now becomes drawable (a transport that
        sleeps between polls wakes then); None if none will, or no budget is left."""
        if self.budget < 1:
            return None
        freshness, now = self.freshness, self.now
        later = [t for t in (freshness.drawable_from(self, p) for p in self.candidates() if established(p))
                 if now < t < float("inf")]
        return min(later, default=None)

    def wants_announcements(self, established: Callable[[str], bool]) -> bool:
        """True while the budget has fewer candidates than it could spend (the crowd counting
        for its room only): reading more announcements is worth its cost."""
        candidates = self.candidates()
        known = sum(map(established, candidates))
        crowd, budget = len(candidates) - known, int(self.budget)
        if budget <= known or not crowd:  # the crowd's room cannot change the answer
            return budget > known
        return budget > known + min(crowd, self._newcomer_room(established))

    def choose(self, established: Callable[[str], bool]) -> list[tuple[str, int]]:
        """The (peer, round) pairs to fetch now: rounds the policy held back that are now due,
        and new choices, spent from the budget and marked fetched (an established peer's
        round the policy holds back is fetched later instead)."""
        drawn = [(peer, round_no) for peer, round_no in self._draw(established)
                 if not (established(peer) and self.freshness.hold_back(self, peer, round_no))]
        return self.freshness.due(self) + drawn

    def missed(self, peer: str, round_no: int) -> bool:
        """``peer``'s bundle of ``round_no`` was asked for and not found. True if that was an
        awaited round not made yet (it is asked for again later): no fault of the peer's."""
        return self.freshness.missed(self, peer, round_no)

    def _draw(self, established: Callable[[str], bool]) -> list[tuple[str, int]]:
        candidates = self.candidates()
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
            most = self.k - share
            if isinstance(established, Established):
                known = established.count_among(self.announced, most)
            else:
                known = sum(1 for _ in islice(filter(established, self.announced), most))
            share = max(share, self.k - known)
        return max(0, share - self._newcomers_fetched)
