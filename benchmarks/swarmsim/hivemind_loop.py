"""The poll loop of a simulated ``hivemind`` node (:class:`~swarmsim.hivemind_node.HivemindNode`):
a poll reads the shards the plan wants, fetches the bundle keys it chooses, and records each
delivery's steps; then the loop pauses. When a poll runs: :mod:`~swarmsim.hivemind_node`'s
module doc.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from swarmnode.swarm.transport.hivemind.layout import announce_expiry, announce_key, announcement_age, bundle_key
from swarmnode.swarm.transport.hivemind.reads import HivemindPull
from swarmsim.dht import key_id
from swarmsim.node import World, peer_id

if TYPE_CHECKING:
    from swarmsim.dht import Space
    from swarmsim.hivemind_node import HivemindCosts

POLL_INTERVAL = 1.0
SWARM = "sim"


class PollLoop:
    """The poll loop's methods of :class:`~swarmsim.hivemind_node.HivemindNode` (a mixin: the
    node sets the attributes below, and has the methods of a simulated host this loop calls:
    ``at``, ``lookup``, ``deliver``, ``established``)."""

    world: World
    idx: int
    relay: bool
    pull: HivemindPull
    costs: HivemindCosts
    space: Space
    loop_busy: bool
    loop_free: float
    poll_at: float | None
    poll_token: int
    fetch_to_first_copy: bool
    read_to_first_copy: bool
    stored_at: dict[int, float]  # when each of its rounds' bundle record was stored
    announced_at: dict[int, float]  # ... and its announcement

    def established_fn(self) -> Callable[[str], bool]:
        standing = self.established()
        if standing is not None:  # the peers connected matter only without a standing
            return standing
        peers = [peer_id(p) for p in self.world.hosts.peers[self.idx] if p in self.space.up]
        return self.pull.plan.established(standing, peers)

    def poke(self) -> None:
        """Poll at the loop's next tick (a poll due later moves up), unless one is running."""
        if self.loop_busy or self.relay:
            return
        self._poll_at(self.world.now)

    def _poll_at(self, when: float) -> None:
        tick = self.loop_free if when <= self.loop_free else self.loop_free + math.ceil(when - self.loop_free)
        if self.poll_at is not None and self.poll_at <= tick:
            return
        self.poll_at = tick
        self.poll_token += 1
        self.at(tick, self._poll, self.poll_token)

    def _poll(self, token: int) -> None:
        if token != self.poll_token:
            return
        self.poll_at = None
        self.loop_busy = True
        started = self.world.now
        established = self.established_fn()
        shards = self.pull.shards_to_read(established)
        if not shards:
            self._read(started, established, [], {}, {})
            return
        keys = [announce_key(SWARM, s) for s in shards]
        self.lookup(keys, self.read_to_first_copy,
                    lambda found: self._read(started, established, shards, *self._announcements(shards, keys, found)),
                    "read")

    def _announcements(self, shards: list[int], keys: list[str], found: dict[int, list[int]]
                       ) -> tuple[dict[str, tuple[int, float]], dict[int, int]]:
        """What the read of ``shards`` brought that the plan takes (stored since
        ``HivemindPull.read_since``), merged over the replicas visited: peer -> (round, age);
        and the shards whose read found a copy, with the announcers the largest copy held. The
        signatures checked are those of what was stored since the node's last read of the
        shard: its validator has checked the rest. Counted too: the announcements stored at
        any server in that time (``read_news``) and those the copies read lacked, held by a
        server up (``read_missed``: a reader that stopped at a copy that missed them, such as
        a server that joined nearer the key than an announcer's remembered replicas) or only
        by servers asleep (``read_missed_asleep``)."""
        world, space, pull = self.world, self.space, self.pull
        now = world.now
        merged: dict[str, tuple[int, float]] = {}
        answered: dict[int, int] = {}
        signatures = 0
        gaps = [0, 0, 0]
        for shard, key in zip(shards, keys):
            kid = key_id(key)
            copies = [r for r in (space.holds(h, kid, now) for h in found.get(kid, [])) if r is not None]
            if copies:
                answered[shard] = max(len(space.shard_entries(r, now)) for r in copies)
            last = announce_expiry(pull.read_at.get(shard, float("-inf")))
            since = announce_expiry(pull.read_since(shard))
            news = [space.expiring_after(record, since, now) for record in copies]
            if len(news) == 1:  # a read that stops at its first copy: no peer comes twice
                signatures += sum(expires > last for _, expires in news[0].values())
                merged.update({peer: (round_no, announcement_age(expires, now))
                               for peer, (round_no, expires) in news[0].items()})
            else:
                checked: set[tuple[str, int, float]] = set()
                for stored in news:
                    for peer, (round_no, expires) in stored.items():
                        if expires > last:
                            checked.add((peer, round_no, expires))
                        held = merged.get(peer)
                        if held is None or held[0] < round_no:
                            merged[peer] = (round_no, announcement_age(expires, now))
                signatures += len(checked)
            gaps = [a + b for a, b in zip(gaps, space.read_gaps(kid, since, merged, now))]
        world.meter.signatures(self.idx, now, signatures)
        for name, n in zip(("read_news", "read_missed", "read_missed_asleep"), gaps):
            world.meter.count(name, now, n)
        return merged, answered

    def _read(self, started: float, established: Callable[[str], bool], shards: list[int],
              announced: dict[str, tuple[int, float]], answered: dict[int, int]) -> None:
        world = self.world
        self.pull.read(shards, announced, world.now, established, answered)
        chosen = self.pull.plan.choose(established)
        if not chosen:
            self._end_poll(started, bool(shards))
            return
        keys = [bundle_key(SWARM, peer, round_no) for peer, round_no in chosen]
        asked = world.now
        self.lookup(keys, self.fetch_to_first_copy, lambda found: self._fetched(started, asked, chosen, keys, found),
                    "fetch")

    def _fetched(self, started: float, asked: float, chosen: list[tuple[str, int]], keys: list[str],
                 found: dict[int, list[int]]) -> None:
        world = self.world
        got = set()
        for (peer, round_no), key in zip(chosen, keys):
            copies = found.get(key_id(key), [])
            if not copies:
                continue
            world.meter.signatures(self.idx, world.now, len(copies) - 1)  # every copy is validated; deliver counts one
            got.add(peer)
            author = world.index[peer]
            if self.deliver(author, round_no):
                self._steps(author, round_no, started, asked)
            self.pull.plan.note_delivered(peer)
        missing = self.pull.missing(chosen, got)
        if missing:
            world.meter.count("fetches_missing", world.now, len(missing))
        self._end_poll(started, True)

    def _steps(self, author: int, round_no: int, polled: float, asked: float) -> None:
        """Where the time of the delivery of ``author``'s ``round_no`` that just arrived went:
        made -> its bundle record stored -> its announcement stored -> the poll that fetched it
        began -> that poll's read ended and the fetch was asked -> arrived. A round fetched by
        name before its announcement was stored (an awaited round) has no announce and poll
        steps: counted as ``deliveries_by_name``."""
        world, node = self.world, self.world.nodes[author]
        assert isinstance(node, PollLoop)
        now = world.now
        times = [world.made[(author, round_no)], node.stored_at.get(round_no, now),
                 node.announced_at.get(round_no, now), polled, asked, now]
        if times[2] > polled:
            world.meter.count("deliveries_by_name", now)
            times[2], times[3] = times[1], asked
        for i in range(len(times) - 2, 0, -1):  # each step ends no later than the next, nor earlier than the last
            times[i] = min(times[i], times[i + 1])
        for i in range(1, len(times)):
            times[i] = max(times[i], times[i - 1])
        world.meter.stages(now, {step: b - a for step, a, b in zip(("store", "announce", "to_poll", "read", "fetch"),
                                                                    times, times[1:])})

    def _end_poll(self, started: float, worked: bool) -> None:
        world = self.world
        self.loop_busy = False
        self.loop_free = world.now + max(POLL_INTERVAL, world.now - started)
        plan = self.pull.plan
        if worked or plan.wants_announcements(self.established_fn()):
            self._poll_at(self.loop_free)
            return
        wake = self._next_due()
        if wake is not None:
            self._poll_at(wake)

    def _next_due(self) -> float | None:
        """When an awaited round falls due, a candidate becomes drawable, or an announcement
        expires (the plan may want more)."""
        plan = self.pull.plan
        times = [min(a.due, a.until) for a in plan.freshness.awaited.values()]
        if plan.announced:
            times.append(next(iter(plan.announced.values())).seen + plan.ttl)
        drawable = plan.drawable_from(self.established_fn())
        if drawable is not None:
            times.append(drawable)
        return min(times) if times else None
