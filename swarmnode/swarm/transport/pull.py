"""What a pull transport fetches: at most K peers' bundles a round, chosen over peers.

A pull transport learns from small announcements (peer, round) which peers have a bundle it
has not fetched, and fetches some of them. :class:`PullPlan` holds that state and makes the
choice, so a node's cost per round stays flat however many peers announce (issue 13):

* the budget starts at K (``fetch_per_round``) and each round of this node
  (:meth:`PullPlan.next_round`, at its publish) adds K, carrying at most K over; a fetch is
  spent when asked for, whether or not it finds anything, and a peer's announced round is
  fetched at most once;
* whom to fetch is a :data:`FETCH_SHARE` draw over the announcing peers, one slot each:
  peers with a record at this node alike, the others (newcomers) as one crowd that gets a
  quarter of the round's K, or, once the transport has seen every announcer
  (``census_done``: hivemind, once it has read every shard), what the established
  announcers leave of K if more. So a node that
  knows few peers yet fills its rounds with newcomers, and a crowd of fresh keys never takes
  a fetch from an established peer;
* with ``reread`` (a transport that reads announcements when it wants, like hivemind's
  shards), a candidate is an announcement seen since this node's round began: one seen
  before may name a round its peer has replaced since, and a fetch of it would deliver a
  round late, so the transport reads it again first. A transport that is handed
  announcements as they are made (libp2p's pushes, and samples of recent pushes) keeps
  them for a short ``ttl`` instead;
* it remembers announcements for ``ttl`` seconds from when it last saw them, and at most
  ``memory`` of them (oldest out), so junk keys cannot grow it.

Not thread-safe: a transport uses it from one task.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import Any, Callable, Iterable, Mapping

from swarmnode.swarm.standing import PeerShare

FETCH_PER_ROUND = 8
ANNOUNCE_TTL = 120.0
# A round's fetches: established peers each alike; every other announcer, as one crowd, a quarter.
FETCH_SHARE = PeerShare(max_peer_share=0.0, newcomer_share=0.25)
_DELIVERED_MEMORY = 4096


class PullPlan:
    def __init__(self, own_peer_id: str, fetch_per_round: int = FETCH_PER_ROUND, *, memory: int,
                 reread: bool = False, ttl: float = ANNOUNCE_TTL, rng: random.Random | None = None):
        """``fetch_per_round``: K (0: fetch nothing, for a node that only serves)."""
        self.own_peer_id = own_peer_id
        self.k = fetch_per_round
        self.memory = memory
        self.ttl = ttl
        self.rng = rng or random.Random()
        self.budget = float(fetch_per_round)
        self.reread = reread
        self.round_began = float("-inf")  # monotonic time of this node's last publish
        self.census_done = False  # set by the transport once it has read every announcer
        # peer -> (round, when seen, what the transport keeps of the announcement)
        self.announced: OrderedDict[str, tuple[int, float, Any]] = OrderedDict()
        self.fetched: dict[str, int] = {}  # peer -> latest round asked for
        self.delivered: OrderedDict[str, None] = OrderedDict()  # peers whose bundles arrived, newest last
        self._newcomers_fetched = 0  # this round

    def next_round(self, now: float) -> None:
        """This node published a round at ``now`` (monotonic seconds): K more fetches (at
        most K carried over)."""
        self.round_began = now
        self.budget = min(self.budget + self.k, 2.0 * self.k)
        self._newcomers_fetched = 0

    def note_announced(self, announced: Mapping[str, int], now: float, details: Mapping[str, Any] | None = None) -> None:
        """Announcements seen at ``now`` (monotonic seconds), peer -> round; this node's own are
        ignored. ``details`` (peer -> anything) is kept with each, for :meth:`detail`."""
        while self.announced and next(iter(self.announced.values()))[1] < now - self.ttl:
            self.announced.popitem(last=False)
        for peer, round_no in announced.items():
            if peer != self.own_peer_id:
                self.announced.pop(peer, None)
                self.announced[peer] = (round_no, now, (details or {}).get(peer))
        while len(self.announced) > self.memory:
            self.announced.popitem(last=False)
        self.fetched = {p: r for p, r in self.fetched.items() if p in self.announced}

    def detail(self, peer: str) -> Any:
        """What :meth:`note_announced` was given with ``peer``'s latest announcement still held."""
        entry = self.announced.get(peer)
        return None if entry is None else entry[2]

    def note_delivered(self, peer: str) -> None:
        self.delivered.pop(peer, None)
        self.delivered[peer] = None
        while len(self.delivered) > _DELIVERED_MEMORY:
            self.delivered.popitem(last=False)

    def recent(self, n: int) -> list[str]:
        """The ``n`` peers whose bundles arrived last."""
        return list(self.delivered)[-n:]

    def established(self, standing: Callable[[str], bool] | None, connected: Iterable[str]) -> Callable[[str], bool]:
        """The node's standing, or without one, the peers whose bundles arrived or that are connected."""
        if standing is not None:
            return standing
        known = set(connected)
        return lambda p: p in self.delivered or p in known

    def candidates(self) -> dict[str, int]:
        """Announced rounds not fetched yet (with ``reread``, seen this round), by peer."""
        since = self.round_began if self.reread else float("-inf")
        return {p: r for p, (r, seen, _) in self.announced.items() if self.fetched.get(p, -1) < r and seen >= since}

    def wants_announcements(self, established: Callable[[str], bool]) -> bool:
        """True while the budget has fewer candidates than it could spend (the crowd counting
        for its room only): reading more announcements is worth its cost."""
        candidates = self.candidates()
        known = sum(1 for p in candidates if established(p))
        return int(self.budget) > known + min(len(candidates) - known, self._newcomer_room(established))

    def choose(self, established: Callable[[str], bool]) -> list[tuple[str, int]]:
        """The (peer, round) pairs to fetch now, spent from the budget and marked fetched."""
        candidates = self.candidates()
        if self.budget < 1 or not candidates:
            return []
        room = self._newcomer_room(established)
        chosen: list[tuple[str, int]] = []
        for peer in FETCH_SHARE.pick(self.k, dict.fromkeys(candidates, 1), established, self.rng):
            if len(chosen) >= int(self.budget):
                break
            if not established(peer):
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
            regulars = sum(1 for p in self.announced if established(p))
            share = max(share, self.k - regulars)
        return max(0, share - self._newcomers_fetched)
