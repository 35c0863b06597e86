"""How word of a bundle spreads on libp2p (protocol 3), and what a node pulls on hearing it.

The rules, without I/O (time comes in as ``now``, randomness from an injected
``random.Random``), so :class:`~swarmnode.swarm.transport.libp2p.transport.Libp2pTransport` and a
simulation of many nodes in virtual time run the same code:

* on publish a node pushes its signed announcement to :func:`push_targets`: up to
  :data:`PUSH_FANOUT` of its connected peers, drawn at random, first among those that opened
  a stream to it lately;
* a receiver reads at most one push a :data:`PUSH_EVERY` seconds from each peer
  (:class:`PushPacer`; closer ones are dropped unread) and keeps the newest announcement each
  peer pushed itself (:class:`FirstHand`). Those, and only those, are what it passes on when a
  peer asks for a sample, for :data:`SHARE_TTL` seconds from the push: an announcement
  travels at most two hops;
* a node asks for a sample while its pull plan has fewer candidates than it could pull
  (:class:`Libp2pPull`), its connected peers in a shuffled cycle, every :data:`SAMPLE_EVERY`
  seconds at most, doubling up to :data:`SAMPLE_EVERY_MAX` while answers bring no one new
  (:class:`SampleSchedule`). So what a node reads of announcements per round is bounded by
  its connections and its own asking, never by the swarm's size;
* a pull asks the bundle's sources in turn (:func:`sources_to_ask`): one the node can reach
  already, else by the addresses the announcement gives it, and none it has no address of;
* a connection a pull dialed is closed once the pulls of its pass are done, unless the node
  dialed that peer on purpose (:class:`PullDials`);
* what it hears (pushed or sampled) feeds its :class:`~swarmnode.swarm.transport.pull.PullPlan`
  under the :class:`~swarmnode.swarm.transport.freshness.OnlyFresh` policy: only rounds heard of
  within the freshness window are drawn, and a sample passes on only what was pushed within
  :data:`SHARE_TTL`, so a pulled bundle is fresh whenever in its round a node draws it.
"""

from __future__ import annotations

import heapq
import random
from collections import OrderedDict
from typing import Any, Callable, Collection, Iterable, Sequence, TypeVar

from swarmnode.swarm.transport.freshness import FRESH_SHARE, OnlyFresh
from swarmnode.swarm.transport.libp2p.announce import SAMPLE_SIZE, Announcement
from swarmnode.swarm.transport.libp2p.holding import pull_sources
from swarmnode.swarm.transport.libp2p.named import NamedWatch
from swarmnode.swarm.transport.pull import FETCH_PER_ROUND, PullPlan

ANNOUNCE_PROTOCOL = "/swarmnode/announce/3.0.0"
SAMPLE_PROTOCOL = "/swarmnode/sample/3.0.0"
PUSH_FANOUT = 8             # peers a node pushes each announcement to
PUSH_EVERY = 1.0            # seconds: a peer's pushes closer together than this are dropped unread
SAMPLE_EVERY = 2.0          # seconds between a node's sample requests, at least
SAMPLE_EVERY_MAX = 8.0      # ... doubling up to this while samples bring no new announcer
# Seconds a pushed announcement is passed on in sample answers. A sampled announcement is
# judged fresh from when it is heard, so this is what it may be older than that: as long as
# the least freshness window (freshness.FRESH_FLOOR_S), no longer.
SHARE_TTL = 20.0
ANNOUNCED_MEMORY = 4096     # announcers whose latest announcement a node keeps (plan, first-hand, pacing)
PLAN_TTL = 60.0             # seconds the pull plan keeps an announcement

P = TypeVar("P")

PROTOCOL_VERSION = 3
# What releases before protocol 3 spoke (gossipsub carried their announcements or bundles).
OLD_PROTOCOLS = ("/meshsub/1.0.0", "/meshsub/1.1.0", "/meshsub/1.2.0")
_ANNOUNCE_PREFIX = "/swarmnode/announce/"


def other_release(spoken: Collection[str]) -> str | None:
    """What the protocols a peer speaks (identify's list) say of its release, when it cannot
    exchange announcements with this one: ``"older"`` (gossipsub, protocols 1 and 2),
    ``"newer"`` (only a later ``/swarmnode/announce/`` major version), else None."""
    if ANNOUNCE_PROTOCOL in spoken:
        return None
    if any(p in spoken for p in OLD_PROTOCOLS):
        return "older"
    majors = [p[len(_ANNOUNCE_PREFIX):].split(".", 1)[0] for p in spoken if p.startswith(_ANNOUNCE_PREFIX)]
    return "newer" if any(m.isdigit() and int(m) > PROTOCOL_VERSION for m in majors) else None


def push_targets(connected: Sequence[P], rng: random.Random, active: Callable[[P], bool] | None = None) -> list[P]:
    """The connected peers a node pushes its announcement to: up to :data:`PUSH_FANOUT`, at
    random; with ``active``, the peers it names first (those that use their connection: a
    crowd of idle keys connected to a node gets its pushes only when no one else is there)."""
    if active is None:
        return rng.sample(list(connected), min(PUSH_FANOUT, len(connected)))
    first = [p for p in connected if active(p)]
    chosen = rng.sample(first, min(PUSH_FANOUT, len(first)))
    rest = [p for p in connected if not active(p)]
    return chosen + rng.sample(rest, min(PUSH_FANOUT - len(chosen), len(rest)))


def sources_to_ask(own_peer_id: str, author: str, announcement: Announcement,
                   reachable: Callable[[str], bool]) -> tuple[list[tuple[str, tuple[str, ...]]], int]:
    """Whom a pull of ``author``'s announced bundle asks, in turn (``pull_sources``' order),
    each with the addresses to dial it by: () for a source ``reachable`` says this node can
    reach already (connected, or an address in its peerstore), the announcement's addresses
    of it otherwise. A source with neither is left out; the second value counts those."""
    sources = pull_sources(own_peer_id, author, announcement)
    out = []
    for source in sources:
        if reachable(source):
            out.append((source, ()))
        elif addrs := announcement.addresses_of(source):
            out.append((source, addrs))
    return out, len(sources) - len(out)


class PullDials:
    """Which of a node's connections it opened only to pull, and when it closes them.

    A node dials a peer for one of three reasons: to join (a bootstrap peer,
    :mod:`~swarmnode.swarm.transport.joining`), from the peer exchange
    (:mod:`~swarmnode.swarm.transport.libp2p.peer_exchange`), or to pull from a source it is not
    connected to (:func:`sources_to_ask`). It keeps the first two: they carry its pushes,
    samples, asks by name and peer exchanges. A connection is *pull-only* when a pull of the
    current pass of the pull loop dialed it (:meth:`dialing`: the source was not connected
    when the pull asked it) and the node has not dialed that peer on purpose since
    (:meth:`kept`). Once every pull of the pass is done, the node closes its pull-only
    connections (:meth:`to_close`); a peer connected when the pull asked it, one the node
    dialed on purpose or one that dialed the node, is never closed for a pull. Kept open, a
    pull's connections pile up at the sources most pulled from, the public peers that hold
    private nodes' bundles (relays first, since a private node leaves its bundles with its
    bootstrap peers): each takes one of the 250 inbound slots py-libp2p gives a host, until
    the source refuses every dial. Not thread-safe: the node uses it where it dials.
    """

    def __init__(self) -> None:
        self._kept: set[str] = set()  # peers dialed on purpose, while connected
        self._dialed: set[str] = set()  # sources the pulls of this pass dialed

    def kept(self, peer: str) -> None:
        """The node dialed ``peer`` to join or from the peer exchange, and it answered."""
        self._kept.add(peer)

    def dialing(self, source: str) -> None:
        """A pull of this pass asks ``source``, which the node is not connected to: it dials it."""
        self._dialed.add(source)

    def to_close(self, connected: Collection[str]) -> list[str]:
        """The pulls of this pass are done: the pull-only connections to close, among the
        peers ``connected`` now. Forgets the pass's dials, and the kept peers no longer connected."""
        close = sorted(p for p in self._dialed if p in connected and p not in self._kept)
        self._dialed.clear()
        self._kept = {p for p in self._kept if p in connected}
        return close


class PushPacer:
    """Which pushes a receiver reads: at most one a :data:`PUSH_EVERY` seconds from each peer,
    remembering at most ``memory`` pushers (those silent for longer are forgotten first)."""

    def __init__(self, memory: int = ANNOUNCED_MEMORY, every: float = PUSH_EVERY):
        self.memory = memory
        self.every = every
        self._last: dict[str, float] = {}  # pusher -> when its last push was read

    def admit(self, pusher: str, now: float) -> bool:
        """True to read ``pusher``'s push at ``now``; it then counts as its latest."""
        if now - self._last.get(pusher, float("-inf")) < self.every:
            return False
        if len(self._last) >= self.memory:
            self._last = {p: t for p, t in self._last.items() if t >= now - self.every}
        self._last[pusher] = now
        return True


class FirstHand:
    """The newest announcement each peer pushed to this node itself: at most ``memory`` peers
    (oldest out), each passed on for ``ttl`` seconds from its push. Not thread-safe."""

    def __init__(self, memory: int = ANNOUNCED_MEMORY, ttl: float = SHARE_TTL, rng: random.Random | None = None):
        self.memory = memory
        self.ttl = ttl
        self.rng = rng or random.Random()
        # author -> (when pushed, round, wire object, when first heard), oldest push first
        self._items: OrderedDict[str, tuple[float, int, dict[str, Any], float]] = OrderedDict()

    def put(self, announcement: Announcement, wire: dict[str, Any], now: float) -> bool:
        """Keep ``announcement`` unless one of a later round is held; True if kept. An author
        still fresh keeps when it was first heard; one gone stale starts again."""
        held = self._items.get(announcement.author)
        if held is not None and held[1] > announcement.round:
            return False
        first = held[3] if held is not None and held[0] >= now - self.ttl else now
        self._items.pop(announcement.author, None)
        self._items[announcement.author] = (now, announcement.round, wire, first)
        while len(self._items) > self.memory:
            self._items.popitem(last=False)
        return True

    def sample(self, now: float, exclude: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Up to :data:`SAMPLE_SIZE` wire objects pushed within ``ttl``: half of them those of
        the authors heard from longest without a gap (earliest first heard), the rest drawn
        uniformly over the other authors, so a crowd of new keys cannot push the authors this
        node has long heard from out of its samples."""
        while self._items and next(iter(self._items.values()))[0] < now - self.ttl:
            self._items.popitem(last=False)
        skip = set(exclude)
        fresh = [(first, author, wire) for author, (_, _, wire, first) in self._items.items() if author not in skip]
        settled = heapq.nsmallest(SAMPLE_SIZE // 2, fresh, key=lambda entry: entry[:2])
        chosen = {author for _, author, _ in settled}
        others = [wire for _, author, wire in fresh if author not in chosen]
        drawn = self.rng.sample(others, min(SAMPLE_SIZE - len(settled), len(others)))
        return [wire for _, _, wire in settled] + drawn

    def latest(self, author: str, now: float) -> dict[str, Any] | None:
        """The wire object of ``author``'s newest announcement if it was pushed within ``ttl``."""
        held = self._items.get(author)
        return held[2] if held is not None and held[0] >= now - self.ttl else None

    def __len__(self) -> int:
        return len(self._items)


class SampleSchedule:
    """When a node may ask for a sample, and whom: see the module doc."""

    def __init__(self, rng: random.Random | None = None):
        self.rng = rng or random.Random()
        self.every = SAMPLE_EVERY
        self.last = float("-inf")  # when the last sample was asked for
        self._order: list[str] = []  # peers to ask next, the rest of a shuffled cycle

    def due(self, now: float) -> bool:
        return now - self.last >= self.every

    def next_peer(self, connected: Sequence[str]) -> str:
        """The next connected peer of a shuffled cycle (``connected`` not empty): a peer that
        had nothing to tell is not asked again before the others, who may hold what it lacks
        (first-hand news lasts :data:`SHARE_TTL`)."""
        present = set(connected)
        self._order = [p for p in self._order if p in present]
        if not self._order:
            self._order = self.rng.sample(list(connected), len(connected))
        return self._order.pop()

    def answered(self, news: int) -> None:
        """A sample brought ``news`` announcers with a newer round: a small swarm with no one
        new to tell is asked ever less often, until someone is."""
        self.every = SAMPLE_EVERY if news else min(2 * self.every, SAMPLE_EVERY_MAX)

    def new_round(self) -> None:
        """This node published: its peers have likely announced their rounds too."""
        self.every = SAMPLE_EVERY


class Libp2pPull:
    """What a libp2p node pulls and when it asks for samples: its
    :class:`~swarmnode.swarm.transport.pull.PullPlan` (``plan``, freshness
    :class:`~swarmnode.swarm.transport.freshness.OnlyFresh`) fed with what it hears, its
    :class:`SampleSchedule` (``sampling``) and the authors it asks for by name
    (:class:`~swarmnode.swarm.transport.libp2p.named.NamedWatch`, ``named``). Not
    thread-safe: the transport uses it on its event loop."""

    def __init__(self, own_peer_id: str, fetch_per_round: int = FETCH_PER_ROUND, *,
                 rng: random.Random | None = None, plan_type: type[PullPlan] = PullPlan):
        """``plan_type``: the plan's class (a simulation of many nodes gives one that keeps its
        candidates between calls, with the same choices)."""
        self.own_peer_id = own_peer_id
        rng = rng or random.Random()
        self.plan = plan_type(own_peer_id, fetch_per_round, memory=ANNOUNCED_MEMORY, ttl=PLAN_TTL,
                             freshness=OnlyFresh(FRESH_SHARE), rng=rng)
        # A libp2p node asks for its established authors by name, so those alive are among
        # the announcers it has heard of: newcomers may take what they leave of K from the
        # start, as hivemind's do once every shard is read. Held to a quarter, a node with
        # few established peers (a slow one most) would pull 2 bundles a round for many rounds.
        self.plan.census_done = True
        self.sampling = SampleSchedule(rng)
        self.named = NamedWatch(own_peer_id)

    def next_round(self, now: float) -> None:
        """This node published a round at ``now``."""
        self.plan.next_round(now)
        self.sampling.new_round()

    def heard(self, announcements: Iterable[Announcement], now: float,
              blocked: Callable[[str], bool] = lambda _peer: False, pushed: bool = False) -> int:
        """Announcements that checked out (pushed or sampled) at ``now``: the plan keeps each
        author's newest, but none of this node's own or of a ``blocked`` author. ``pushed``:
        each was pushed here by its author (asked for by name later, :class:`NamedWatch`).
        Returns how many were newer than what it held."""
        newer: dict[str, Announcement] = {}
        for announcement in announcements:
            author, held = announcement.author, self.plan.announced.get(announcement.author)
            if (author != self.own_peer_id and not blocked(author)
                    and (held is None or held.round < announcement.round)):
                newer[author] = announcement
        if newer:
            self.plan.note_announced({author: a.round for author, a in newer.items()}, now, newer)
        for author, announcement in newer.items():
            self.named.heard(announcement, now, author in self.plan.delivered, pushed)
        return len(newer)

    def sample_peer(self, now: float, connected: Sequence[str], established: Callable[[str], bool]) -> str | None:
        """Time is ``now``: the connected peer to ask for a sample now, or None (no peer, one
        asked too lately, or candidates enough for the budget)."""
        self.plan.tick(now)
        if not connected or not self.sampling.due(now) or not self.plan.wants_announcements(established):
            return None
        self.sampling.last = now
        return self.sampling.next_peer(connected)

    def named_asks(self, now: float, connected: Sequence[str],
                   established: Callable[[str], bool]) -> dict[str, list[tuple[str, int]]]:
        """Time is ``now``: the established authors whose next round is overdue to ask for by
        name, by the connected peer to ask; none while this round has no pull left to spend."""
        self.plan.tick(now)
        if self.plan.budget < 1:
            return {}
        return self.named.asks(now, connected, established, self.plan.round_s)

    def next_named_ask(self, connected: Sequence[str], established: Callable[[str], bool]) -> float | None:
        """When :meth:`named_asks` would next ask for someone if ``connected`` stayed so (see
        :meth:`~swarmnode.swarm.transport.libp2p.named.NamedWatch.next_ask`); None while this
        round has no pull left to spend (the next round's publish is the next chance)."""
        if self.plan.budget < 1:
            return None
        return self.named.next_ask(connected, established, self.plan.round_s)

    def sampled(self, announcements: Iterable[Announcement], now: float,
                blocked: Callable[[str], bool] = lambda _peer: False) -> int:
        """A sample's announcements that checked out, heard at ``now``; returns :meth:`heard`'s count."""
        news = self.heard(announcements, now, blocked)
        self.sampling.answered(news)
        return news
