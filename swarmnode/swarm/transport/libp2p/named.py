"""Asking for a known author's latest announcement by name (libp2p protocol 3), without I/O.

Pushes and samples (:mod:`~swarmnode.swarm.transport.libp2p.spread`) are shared with
everyone who announces, so a crowd of new keys can stand between a node and the authors it
already pulls from. So a node also asks for those authors by name, as a hivemind reader
fetches a known peer's next round by its key:

* ``/swarmnode/latest/3.0.0`` (:data:`NAMED_PROTOCOL`): the request is a canonical JSON list
  of 1 to :data:`MAX_NAMES` ``[PeerID, round]`` pairs of distinct PeerIDs
  (:func:`named_request`), the round the newest the asker knows of; the answer a JSON list
  of at most one signed announcement a pair, of a later round (:func:`named_answer`): the
  answerer's own latest when it is named, else the newest one the author pushed to it within
  :data:`~swarmnode.swarm.transport.libp2p.spread.SHARE_TTL`, as a sample would pass it on.
  Nothing new costs an empty list. A reader checks each entry as it checks a sample's, and
  counts one of an author it did not name as bad
  (:func:`~swarmnode.swarm.transport.libp2p.announce.parse_sample` with ``authors``);
* :class:`NamedWatch`, the reader's side: it watches the authors whose bundles arrived
  before (at most :data:`NAMED_MEMORY`, the least lately heard of out). Once an established
  one's next round is half a period away (its period measured from the last two rounds
  heard of, or this node's own round), it asks a connected source of the author's last
  announcement (the author, then its holders) for anything newer, every
  :data:`NAMED_RETRY_S` or an eighth of the period at most, until it hears of a newer round
  or :data:`NAMED_ROUNDS` periods have passed (then it waits to hear of the author again).
  An author that pushed its last round to this node itself is asked for only once its next
  push is overdue, a period and a retry's wait after the last: its round was heard of
  within a second of being made, so no newer one exists before then, and a connected
  author pushes its next round to this node too unless it chose other peers.
  Authors heard of most lately are named first: those that keep their pace before those
  gone quiet.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeVar

from swarmnode.swarm.bundle import canonical_json
from swarmnode.swarm.transport.libp2p.announce import SAMPLE_SIZE, Announcement, is_count, is_peer_id
from swarmnode.swarm.transport.libp2p.wire import loads_bounded

NAMED_PROTOCOL = "/swarmnode/latest/3.0.0"
MAX_NAMES = SAMPLE_SIZE     # PeerIDs a request may name; its answer is no longer than a sample's
# A pair is at most 89 characters: a PeerID of at most 64 (announce.is_peer_id), quoted, a
# comma and a round of up to 20 digits, bracketed; a comma between pairs, the list's brackets.
MAX_NAMED_REQUEST_BYTES = MAX_NAMES * 90 + 1
NAMED_MEMORY = 256          # authors a node watches
NAMED_RETRY_S = 2.0         # seconds between two asks for one author, at least
NAMED_ROUNDS = 3            # periods without a word of an author before it is no longer asked for

Wanted = list[tuple[str, int]]  # (author, the newest round known of it)
W = TypeVar("W")


def named_request(wanted: Wanted) -> bytes:
    return canonical_json([[author, round_no] for author, round_no in wanted])


def parse_named_request(raw: bytes) -> Wanted | None:
    """The (PeerID, round) pairs a request names (see the module doc), or None for anything
    else. Never raises."""
    pairs = loads_bounded(raw, MAX_NAMED_REQUEST_BYTES)
    if not isinstance(pairs, list) or not 0 < len(pairs) <= MAX_NAMES:
        return None
    if not all(isinstance(p, list) and len(p) == 2 and is_peer_id(p[0]) and is_count(p[1]) for p in pairs):
        return None
    if len({author for author, _ in pairs}) != len(pairs) or canonical_json(pairs) != raw:
        return None
    return [(author, round_no) for author, round_no in pairs]


def wire_round(wire: dict[str, Any]) -> int:
    """The round of a signed announcement's wire object."""
    return wire["announcement"]["round"]


def named_answer(wanted: Wanted, own_peer_id: str, own: W | None, latest: Callable[[str], W | None],
                 round_of: Callable[[W], int] = wire_round) -> list[W]:
    """The announcements answering a request for ``wanted``: for each (author, round), ``own``
    (this node's latest signed announcement, if any) when the author is this node, else
    ``latest(author)`` (the one the author pushed here lately, or None), if of a later round.
    The transport passes wire objects; ``round_of`` reads the round of whatever is passed."""
    found = ((own if author == own_peer_id else latest(author), round_no) for author, round_no in wanted)
    return [item for item, known in found if item is not None and round_of(item) > known]


@dataclass
class Watched:
    """What a reader holds of an author it watches."""

    round: int  # the newest round heard of
    heard: float  # when it was heard of (monotonic seconds)
    sources: tuple[str, ...]  # who can answer for the author: itself, then its holders
    period: float | None = None  # seconds between its rounds, from the last two heard
    asked: float = float("-inf")  # when it was last asked for
    pushed: bool = False  # the author pushed that round to this node itself
    timing: tuple[float, tuple[float, float] | None] | None = None  # (round_s, _timing's) while asked stays

    def when(self, round_s: float) -> tuple[float, float] | None:
        """:func:`_timing` of this author, computed once for each ``asked`` and ``round_s``:
        a node looks at every author it watches each pass, and few of them change."""
        if self.timing is None or self.timing[0] != round_s:
            self.timing = (round_s, _timing(self, round_s))
        return self.timing[1]


class NamedWatch:
    """The authors a node asks for by name, and when (see the module doc). Not thread-safe."""

    def __init__(self, own_peer_id: str, memory: int = NAMED_MEMORY):
        self.own_peer_id = own_peer_id
        self.memory = memory
        self._watched: OrderedDict[str, Watched] = OrderedDict()  # least lately heard first
        # (round_s, t): no watched author's until comes before t under round_s, so that until
        # then asks need look at the established authors only (most are not, and wait).
        self._until_floor: tuple[float, float] | None = None

    def heard(self, announcement: Announcement, now: float, known: bool, pushed: bool = False) -> None:
        """``announcement`` was heard of at ``now``: watch its author if it is ``known`` (its
        bundles arrived here before) or watched already. ``pushed``: the author pushed it here
        itself (not a sample's or an answer's)."""
        author = announcement.author
        held = self._watched.get(author)
        if author == self.own_peer_id or (held is None and not known):
            return
        if held is not None and announcement.round <= held.round:
            return
        period = held.period if held is not None else None
        if held is not None and now > held.heard:
            period = (now - held.heard) / (announcement.round - held.round)
        self._watched.pop(author, None)
        sources = tuple(dict.fromkeys((author, *announcement.holders)))
        watched = self._watched[author] = Watched(announcement.round, now, sources, period, pushed=pushed)
        if self._until_floor is not None:
            round_s, floor = self._until_floor
            timing = watched.when(round_s)
            if timing is not None and timing[1] < floor:
                self._until_floor = (round_s, timing[1])
        while len(self._watched) > self.memory:
            self._watched.popitem(last=False)

    def asks(self, now: float, connected: Iterable[str], established: Callable[[str], bool],
             round_s: float) -> dict[str, Wanted]:
        """Time is ``now``: the authors to ask for now with the newest round known of each, by
        the connected peer to ask (at most :data:`MAX_NAMES` a peer), each marked asked.
        ``round_s``: this node's round, the period of an author heard of once only (not
        finite: such an author is not asked for)."""
        present = set(connected)
        out: dict[str, Wanted] = {}
        floor = self._until_floor
        every = floor is None or floor[0] != round_s or now > floor[1]  # else none is past its until
        authors = list(reversed(self._watched)) if every else list(filter(established, reversed(self._watched)))
        least_until = float("inf")
        for author in authors:  # the most lately heard first
            watched = self._watched[author]
            timing = watched.when(round_s)
            if timing is None:
                continue
            due, until = timing
            if now > until:
                del self._watched[author]  # gone, or much slower: heard of again, it is watched again
                continue
            least_until = min(least_until, until)
            if now < due or not established(author):
                continue
            source = self._source(watched, present)
            if source is None or len(out.get(source, ())) >= MAX_NAMES:
                continue
            out.setdefault(source, []).append((author, watched.round))
            watched.asked, watched.timing = now, None
        if every:
            self._until_floor = (round_s, least_until)
        return out

    def next_ask(self, connected: Iterable[str], established: Callable[[str], bool], round_s: float) -> float | None:
        """When :meth:`asks` would next name an author if the peers ``connected`` stayed so
        (at or before now: at its next call), or None for never. For a caller that does not
        ask every second, as a simulation does; it marks nothing."""
        present = set(connected)
        times = []
        for author in filter(established, self._watched):
            watched = self._watched[author]
            timing = watched.when(round_s)
            if timing is not None and timing[0] <= timing[1] and self._source(watched, present) is not None:
                times.append(timing[0])
        return min(times, default=None)

    def _source(self, watched: Watched, present: set[str]) -> str | None:
        """The first of ``watched``'s sources among the peers ``present``, never this node."""
        return next((p for p in watched.sources if p in present and p != self.own_peer_id), None)

    def __len__(self) -> int:
        return len(self._watched)


def _timing(watched: Watched, round_s: float) -> tuple[float, float] | None:
    """(from when, until when) ``watched``'s author is asked for, None for never (its period
    unknown and ``round_s`` not finite). From half a period after its last round was heard
    of, since a round heard of late makes the next one look due later; from a period and a
    retry's wait after it if the author pushed that round here itself, heard of as it was
    made; at most once every :data:`NAMED_RETRY_S` or an eighth of the period; until
    :data:`NAMED_ROUNDS` periods."""
    period = max(watched.period or round_s, NAMED_RETRY_S)
    if period == float("inf"):
        return None
    retry = max(NAMED_RETRY_S, period / 8)
    due = max(watched.heard + (period + retry if watched.pushed else period / 2), watched.asked + retry)
    return due, watched.heard + NAMED_ROUNDS * period
