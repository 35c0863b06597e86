"""The pull loop of a simulated ``libp2p`` node (:class:`~swarmsim.libp2p_node.Libp2pNode`):
its passes (a sample, asks by name, the pulls the plan chooses, in that order), each stream an
exchange on the simulated network; the connections opened only to pull closed after the pass.
When a pass runs: :mod:`~swarmsim.libp2p_node`'s module doc.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from swarmnode.swarm.transport.libp2p.announce import Announcement
from swarmnode.swarm.transport.libp2p.spread import Libp2pPull, PullDials, sources_to_ask
from swarmsim.node import ConnectedIds, World, peer_id

if TYPE_CHECKING:
    from swarmsim.libp2p_node import Libp2pCosts

PULL_INTERVAL = 1.0


class PullLoop:
    """The pull loop's methods of :class:`~swarmsim.libp2p_node.Libp2pNode` (a mixin: the node
    sets the attributes below, and has the methods of a simulated host this loop calls:
    ``at``, ``exchange``, ``dial``, ``deliver``, ``established``, ``connected_ids``)."""

    world: World
    idx: int
    peer_id: str
    relay: bool
    pull: Libp2pPull
    costs: Libp2pCosts
    dials: PullDials
    known: set[int]
    asks_by_name: bool
    loop_busy: bool
    loop_free: float
    tick_at: float | None
    tick_token: int

    def poke(self) -> None:
        """Something changed: run a pass of the pull loop at its next tick (a pass due later,
        for a sample, moves up)."""
        if self.loop_busy or self.relay:
            return
        now = self.world.now
        when = self.loop_free if now <= self.loop_free else self.loop_free + math.ceil(now - self.loop_free)
        self._pass_at(when)

    def _pass_at(self, when: float) -> None:
        if self.tick_at is not None and self.tick_at <= when:
            return
        self.tick_at = when
        self.tick_token += 1
        self.at(when, self._pass, self.tick_token)

    def _pass(self, token: int) -> None:
        if token != self.tick_token:
            return
        self.tick_at = None
        self.loop_busy = True
        world = self.world
        plan = self.pull.plan
        established = plan.established(self.established(), self.connected_ids())
        asked = self.pull.sample_peer(world.now, self.connected_ids(), established)
        if asked is None:
            self._ask_named(established)
            return
        other = world.index[asked]

        def reply(sample: list[Announcement] | None) -> None:
            if sample is not None:  # no answer (a time-out): nothing to judge, as the transport does
                world.meter.signatures(self.idx, world.now, len(sample))
                self.pull.sampled(sample, world.now)
            self._ask_named(established)

        self.exchange(other, 0, lambda _asker: world.nodes[other].answer_sample(self.idx), reply)

    def _ask_named(self, established: Any) -> None:
        """The pass's asks by name, all at once; the pulls once every one is answered."""
        world = self.world
        asks = self.pull.named_asks(world.now, self.connected_ids(), established) if self.asks_by_name else {}
        if not asks:
            self._choose(established)
            return
        pending = {"left": len(asks)}

        def reply(answer: list[Announcement] | None) -> None:
            if answer:
                world.meter.signatures(self.idx, world.now, len(answer))
                world.meter.count("named_news", world.now, self.pull.heard(answer, world.now))
            pending["left"] -= 1
            if not pending["left"]:
                self._choose(established)

        for source, wanted in asks.items():
            other = world.index[source]
            world.meter.count("named_asks", world.now)
            self.exchange(other, 1 + self.costs.named * len(wanted),
                          lambda _asker, o=other, w=wanted: world.nodes[o].answer_named(w), reply)

    def _choose(self, established: Any) -> None:
        plan = self.pull.plan
        chosen = plan.choose(established)
        if not chosen:
            self._end_pass(False)
            return
        pending = {"left": len(chosen)}
        for author, round_no in chosen:
            self._pull_one(author, round_no, plan.detail(author), pending)

    def _pull_one(self, author: str, round_no: int, announcement: Announcement, pending: dict) -> None:
        world = self.world
        index, hosts = world.index, world.hosts

        def reachable(source: str) -> bool:
            host = index[source]
            return host in self.known or hosts.connected(self.idx, host)

        asked, unknown = sources_to_ask(self.peer_id, author, announcement, reachable)
        if unknown:
            world.meter.count("sources_unknown", world.now, unknown)
        self._try_sources(author, round_no, [index[p] for p, _ in asked], pending)

    def _try_sources(self, author: str, round_no: int, sources: list[int], pending: dict) -> None:
        world = self.world
        if sources:
            source = sources.pop(0)
            if world.hosts.connected(self.idx, source):
                self._ask_bundle(author, round_no, source, sources, pending)
            else:
                self.dials.dialing(peer_id(source))
                self.dial(source, lambda ok: (self._ask_bundle(author, round_no, source, sources, pending) if ok
                                              else self._try_sources(author, round_no, sources, pending)))
            return
        world.meter.count("pulls_missing", world.now)
        self._pulled(pending)

    def _ask_bundle(self, author: str, round_no: int, source: int, sources: list[int], pending: dict) -> None:
        world = self.world

        def reply(found: Any) -> None:
            if found:
                author_idx = world.index[author]
                self.deliver(author_idx, round_no)
                self.pull.plan.note_delivered(author)
                self._pulled(pending)
            else:
                self._try_sources(author, round_no, sources, pending)

        self.exchange(source, self.costs.request, lambda _asker: world.nodes[source].answer_bundle(author, round_no),
                      reply)

    def _pulled(self, pending: dict) -> None:
        pending["left"] -= 1
        if not pending["left"]:
            self._close_pull_only()
            self._end_pass(True)

    def _close_pull_only(self) -> None:
        """The pulls of the pass are done: close the connections opened only for them."""
        world = self.world
        for source in self.dials.to_close(ConnectedIds(world, self.idx)):
            other = world.index[source]
            world.net.transfer(self.idx, other, self.costs.close)
            world.net.transfer(other, self.idx, self.costs.close)
            world.hosts.close(self.idx, other)
            world.meter.count("pull_connections_closed", world.now)

    def _end_pass(self, pulled: bool) -> None:
        """The pass is over: the next one at the loop's next tick if this one pulled (more may
        be drawable), else when a sample is due; anything heard or published pokes it sooner."""
        world = self.world
        self.loop_busy = False
        self.loop_free = world.now + PULL_INTERVAL
        plan = self.pull.plan
        established = plan.established(self.established(), self.connected_ids())
        if pulled and plan.budget >= 1:
            self.poke()
            return
        due = []
        connected = self.connected_ids()
        if connected and plan.wants_announcements(established):
            sampling = self.pull.sampling
            due.append(sampling.last + sampling.every)
        named = self.pull.next_named_ask(connected, established) if self.asks_by_name else None
        if named is not None:
            due.append(named)
        if due:
            self._pass_at(max(self.loop_free, min(due)))
