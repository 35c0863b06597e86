"""A peer's share, and which peers have earned a full one.

Keys are free: anyone can join an open swarm with as many identities as they like. So
nothing a node hands out to peers (room in its pool, the J external slots of a round, and
the fetches of a round when it cannot read every peer) is split by what peers send or claim
(volume, declared round numbers). It is split over *peers*, by one rule, :class:`PeerShare`:

* every established peer with something to offer is equally likely to get each slot
  (uniform over peers, then one of that peer's items), so a prolific peer gets no more than
  a quiet one; peers without a record (*newcomers*) compete for a slot as one crowd, as
  likely as one established peer, then one member of the crowd gets it;
* no peer gets more than ``max(1, ceil(max_peer_share * n))`` of ``n`` slots;
* newcomers get at most ``floor(newcomer_share * n)`` of the ``n`` slots *together*,
  however many of them there are: a crowd of fresh keys shares one minority slice.

:class:`Standing` says who has a record: a peer is *established* once bundles from it whose
groups, re-scored by this node, carried signal arrived in ``probation_rounds`` distinct
rounds of this node since its probation last started over (:meth:`Standing.set_back`), and
then only ``promotions_per_round`` peers a round are promoted, oldest qualifier first. Like
the time-in-mesh and first-delivery terms of gossipsub v1.1's peer score, a record costs
each key time and useful work; unlike a score, it has no weights to game. Honest peers a
node already knows stay established however many newcomers arrive, and a flood of fresh keys
only churns the newcomer rows (the table is bounded, established rows are forgotten last).
"""

from __future__ import annotations

import math
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from itertools import islice

PROMOTIONS_PER_ROUND = 2


@dataclass(frozen=True)
class PeerShare:
    """How ``n`` slots of anything are split among peers (see the module doc).

    Used by :class:`swarmnode.swarm.pool.ExternalPool` for the room in the pool and for a
    round's J draws; meant as well for choosing which K peers a round fetches from (pass
    ``available`` 1 for each peer to get K distinct peers).
    """

    max_peer_share: float = 0.5
    newcomer_share: float = 0.25

    def per_peer(self, n: int) -> int:
        """Most of ``n`` slots one peer may get."""
        return max(1, math.ceil(self.max_peer_share * n - 1e-9))

    def newcomers(self, n: int) -> int:
        """Most of ``n`` slots all newcomers together may get."""
        return math.floor(self.newcomer_share * n + 1e-9)

    def pick(self, n: int, available: Mapping[str, int], established: Callable[[str], bool],
             rng: random.Random, weights: Mapping[str, float] | None = None) -> list[str]:
        """Up to ``n`` peers, one per slot (a peer may appear up to its cap and its
        ``available`` count). Each slot goes to one of the eligible established peers or to
        the newcomers as one crowd, all alike (or by ``weights``; the crowd weighs the mean of
        its members), and a crowd slot to one of its eligible members, alike (or by
        ``weights``). So a thousand newcomers weigh as much as one established peer, and never
        more than their slice. Deterministic given ``rng`` and the mapping's order."""
        cap, newcomer_cap = self.per_peer(n), self.newcomers(n)
        weight = (lambda p: 1.0) if weights is None else weights.__getitem__
        # What each peer may still get, and the eligible peers of each kind in the mapping's
        # order; a peer leaves its list once it has its due. Standing is asked once a peer.
        left = {p: min(cap, k) for p, k in available.items() if min(cap, k) > 0}
        kind = {p: bool(established(p)) for p in left}
        regulars = [p for p in left if kind[p]]
        crowd = [p for p in left if not kind[p]]
        newcomers_taken = 0
        out: list[str] = []
        while len(out) < n:
            crowd_open = bool(crowd) and newcomers_taken < newcomer_cap
            units = len(regulars) + crowd_open
            if not units:
                break
            if weights is None:
                unit = _alike(rng, units)
            else:
                unit_weights = [weight(p) for p in regulars]
                if crowd_open:
                    unit_weights.append(sum(map(weight, crowd)) / len(crowd))
                unit = rng.choices(range(units), unit_weights)[0]
            if unit < len(regulars):
                peer = regulars[unit]
            elif len(crowd) == 1:
                peer = crowd[0]
            else:
                peer = (crowd[_alike(rng, len(crowd))] if weights is None
                        else rng.choices(crowd, [weight(p) for p in crowd])[0])
            left[peer] -= 1
            if not left[peer]:
                (regulars if kind[peer] else crowd).remove(peer)
            newcomers_taken += not kind[peer]
            out.append(peer)
        return out


def _alike(rng: random.Random, n: int) -> int:
    """One of ``n`` alike: what ``rng.choices(range(n), [1.0] * n)[0]`` draws, without the weights."""
    return min(int(rng.random() * n), n - 1)


class Established:
    """Which peers have a record at a node, as a pull plan asks it (:meth:`__call__` of every
    announcer it holds) and counts it (:meth:`count_among`). A plan takes any
    ``Callable[[str], bool]``; an :class:`Established` can count faster than a test of each."""

    def __call__(self, peer: str) -> bool:
        raise NotImplementedError

    def count_among(self, peers: Collection[str], most: int) -> int:
        """How many of ``peers`` are established, ``most`` at the most."""
        return sum(1 for _ in islice(filter(self, peers), most))


class EstablishedPeers(set[str], Established):
    """A standing's established peers, asked of one peer (``peers(p)``, the set's own
    membership test, read safely without the standing's lock) or counted among many."""

    # The set's own membership test as the call, no Python frame: the simulator asks it millions of times.
    __call__ = set.__contains__  # pyright: ignore[reportAssignmentType]

    def count_among(self, peers: Collection[str], most: int) -> int:
        """How many of ``peers`` are established, ``most`` at the most; counted from this set's
        side when it is the smaller: a node has a few established peers and hears of thousands."""
        if len(self) < len(peers):
            # tuple() copies the set at once: the standing may change it in another thread.
            return min(most, sum(map(peers.__contains__, tuple(self))))
        return sum(1 for _ in islice(filter(self.__contains__, peers), most))


@dataclass
class _Record:
    rounds: set[int] = field(default_factory=set)  # this node's rounds with a useful bundle from the peer
    qualified: int | None = None  # order in which the peer met the probation, for promotion
    established: bool = False


class Standing:
    """Which peers are established with this node; thread-safe, bounded to ``max_peers`` rows."""

    def __init__(self, *, probation_rounds: int = 3, promotions_per_round: int = PROMOTIONS_PER_ROUND,
                 max_peers: int = 10_000):
        if probation_rounds < 1 or promotions_per_round < 1 or max_peers < 1:
            raise ValueError("probation_rounds, promotions_per_round and max_peers must be >= 1")
        self.probation_rounds = probation_rounds
        self.promotions_per_round = promotions_per_round
        self.max_peers = max_peers
        self._rows: OrderedDict[str, _Record] = OrderedDict()  # least recently heard first
        self._established = EstablishedPeers()  # the peers of rows established
        self._ready: dict[str, int] = {}  # peer -> qualified, of rows qualified and not established
        self._round: int | None = None
        self._qualified = 0
        self._lock = threading.Lock()
        # Whether a peer is established: the set itself, which a pull plan also asks to count.
        self.is_established: EstablishedPeers = self._established

    def note(self, peer: str, *, useful: bool) -> None:
        """An accepted bundle of ``peer``; ``useful``: some of its re-scored groups carried signal."""
        with self._lock:
            row = self._rows.get(peer)
            if row is None:
                row = self._rows[peer] = _Record()
                self._trim(keep=peer)
            self._rows.move_to_end(peer)
            if useful and not row.established and self._round is not None:
                row.rounds.add(self._round)
                if row.qualified is None and len(row.rounds) >= self.probation_rounds:
                    self._qualified += 1
                    row.qualified = self._ready[peer] = self._qualified
                    row.rounds.clear()  # only the count mattered; keep rows small

    def set_back(self, peer: str) -> None:
        """Some of ``peer``'s responses were left out of training for a reason an honest model does
        not give (see :mod:`swarmnode.swarm.exchange`): a newcomer's probation starts over, and a
        qualified one waits for promotion no more. An established peer keeps its record; what
        was left out is not trained on either way."""
        with self._lock:
            row = self._rows.get(peer)
            if row is None or row.established:
                return
            row.rounds.clear()
            row.qualified = None
            self._ready.pop(peer, None)

    def advance(self, round_no: int) -> list[str]:
        """This node starts round ``round_no``: later useful bundles count for it, and up to
        ``promotions_per_round`` qualified newcomers are established. Returns them."""
        with self._lock:
            if round_no == self._round:
                return []
            self._round = round_no
            ready = sorted((qualified, peer) for peer, qualified in self._ready.items())
            promoted = [peer for _, peer in ready[:self.promotions_per_round]]
            for peer in promoted:
                self._rows[peer].established = True
                self._established.add(peer)
                del self._ready[peer]
            return promoted

    def to_json(self) -> dict:
        """The peers' records, JSON-ready, for :meth:`restore` (least recently heard first)."""
        with self._lock:
            return {"round": self._round, "qualified": self._qualified,
                    "rows": [[peer, sorted(r.rounds), r.qualified, r.established] for peer, r in self._rows.items()]}

    def restore(self, state: Mapping) -> None:
        """Take the records of :meth:`to_json`; ValueError (records unchanged) when ``state`` is
        not of that form."""
        try:
            rows = OrderedDict((str(peer), _Record({int(x) for x in rounds}, None if q is None else int(q),
                                                   established is True))
                               for peer, rounds, q, established in state["rows"])
            round_no = None if state["round"] is None else int(state["round"])
            qualified = int(state["qualified"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"standing state is damaged ({type(exc).__name__}: {exc})") from None
        with self._lock:
            self._rows, self._round, self._qualified = rows, round_no, qualified
            self._established.clear()  # the same set: is_established reads it
            self._established.update(p for p, r in rows.items() if r.established)
            self._ready = {p: r.qualified for p, r in rows.items() if r.qualified is not None and not r.established}

    def _trim(self, keep: str | None = None) -> None:
        """Forget the least recently heard newcomer, else established peer, past ``max_peers``;
        never ``keep`` (the peer just heard of, the most recent: a table of established peers
        makes room for it rather than refusing every newcomer)."""
        while len(self._rows) > self.max_peers:
            victim = next((p for p, r in self._rows.items() if not r.established and p != keep), None)
            if victim is None:
                victim = next(iter(self._rows))
            del self._rows[victim]
            self._established.discard(victim)
            self._ready.pop(victim, None)

    def stats(self) -> dict[str, int]:
        """``{"established": n, "newcomers": n}`` among the peers remembered."""
        with self._lock:
            established = sum(r.established for r in self._rows.values())
            return {"established": established, "newcomers": len(self._rows) - established}
