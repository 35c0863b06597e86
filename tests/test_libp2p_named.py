"""NamedWatch on its own: the authors a pass asks for by name."""

from __future__ import annotations

import random

from swarmnode.swarm.transport.libp2p.announce import Announcement
from swarmnode.swarm.transport.libp2p.named import MAX_NAMES, NamedWatch


def _walked_asks(watch: NamedWatch, now: float, connected: list[str], established, round_s: float) -> dict:
    """asks as the module doc defines it: a walk over every watched author, most lately heard first."""
    present = set(connected)
    out: dict = {}
    for author, watched in list(reversed(watch._watched.items())):
        timing = watched.when(round_s)
        if timing is None:
            continue
        due, until = timing
        if now > until:
            del watch._watched[author]
            continue
        if now < due or not established(author):
            continue
        source = next((p for p in watched.sources if p in present and p != watch.own_peer_id), None)
        if source is None or len(out.get(source, ())) >= MAX_NAMES:
            continue
        out.setdefault(source, []).append((author, watched.round))
        watched.asked, watched.timing = now, None
    return out


def _walked_next_ask(watch: NamedWatch, connected: list[str], established, round_s: float) -> float | None:
    present = set(connected)
    times = [timing[0] for author, w in watch._watched.items()
             if (timing := w.when(round_s)) is not None and timing[0] <= timing[1] and established(author)
             and any(p in present and p != watch.own_peer_id for p in w.sources)]
    return min(times, default=None)


def test_asks_and_next_ask_are_those_of_a_walk_over_every_watched_author():
    """Until an author's until comes, asks and next_ask look at the established authors only:
    through hearing, asking, forgetting past the memory and changes of this node's round,
    they answer what a walk over every author would, in the same order, and forget alike."""
    rng = random.Random(11)
    watches = [NamedWatch("me", memory=40) for _ in range(2)]
    authors = [f"a{i}" for i in range(60)]
    rounds = dict.fromkeys(authors, 0)
    established = set(authors[::2]).__contains__
    now, round_s, asked = 0.0, float("inf"), 0
    for step in range(4000):
        now += rng.choice((0.0, 0.5, 1.0, 4.0))
        if rng.random() < 0.01:
            round_s = rng.choice((20.0, 30.0, 60.0, 31.5))
        if rng.random() < 0.5:
            author = rng.choice(authors)
            rounds[author] += rng.choice((0, 1, 1, 2))
            holders = tuple(rng.sample(authors, 2))
            announcement = Announcement(author, "s", rounds[author], 10, "00" * 32, (author, *holders))
            known, pushed = rng.random() < 0.5, rng.random() < 0.3
            for watch in watches:
                watch.heard(announcement, now, known, pushed)
        connected = rng.sample(authors + ["me"], 12)
        assert (watches[0].next_ask(connected, established, round_s)
                == _walked_next_ask(watches[1], connected, established, round_s)), step
        fast = watches[0].asks(now, connected, established, round_s)
        assert list(fast.items()) == list(_walked_asks(watches[1], now, connected, established, round_s).items()), step
        assert list(watches[0]._watched) == list(watches[1]._watched), step
        asked += sum(map(len, fast.values()))
    assert asked > 200
