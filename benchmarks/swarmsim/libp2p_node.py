"""A simulated ``libp2p`` node, protocol 3: the transport's own rules over the simulated network.

What it decides, it decides with the code the real transport runs
(:mod:`~swarmnode.swarm.transport.libp2p.spread`: :class:`Libp2pPull` and its
:class:`PullPlan`, :func:`push_targets`, :class:`PushPacer`, :class:`FirstHand`,
:func:`sources_to_ask`; :mod:`~swarmnode.swarm.transport.libp2p.named`: the
:class:`NamedWatch` of :class:`Libp2pPull` and :func:`named_answer`;
:mod:`~swarmnode.swarm.transport.libp2p.holding`: :func:`choose_holders`,
:class:`BundleStore`; :func:`~swarmnode.swarm.transport.libp2p.announce.source_addresses`;
:mod:`~swarmnode.swarm.transport.libp2p.peer_exchange`: :class:`ExchangeRound`,
:func:`answer_order`; the bootstrap rule of
:class:`~swarmnode.swarm.transport.base.Transport`). What it does instead of I/O is this
module: every stream is a request/response exchange on :class:`~swarmsim.network.Network`
with the bytes :class:`Libp2pCosts` says it costs, and connections live in
:class:`~swarmsim.network.Hosts` under py-libp2p 0.8.1's caps.

How the real transport's loops map to events:

* the pull loop (:mod:`~swarmsim.libp2p_loop`; ``PULL_INTERVAL`` apart, each pass awaiting its sample, its asks by name
  and its pulls, in that order) runs a pass only when something changed (an announcement
  heard, a round published), a sample is due or an ask by name is (:meth:`Libp2pPull.next_named_ask`
  with the peers connected when the last pass ended), at the loop's next tick; a pass that
  would find nothing is skipped, as it costs nothing on the wire. So an ask by name whose
  only source connects after a pass waits for the next pass something else brings on,
  where the transport's loop would see it within a second;
* the peer exchange runs every ``EXCHANGE_EVERY`` while the node has fewer than
  ``PEER_TARGET`` connections; the join loop checks for a bootstrap peer every 5 s;
* a pull asks the sources :func:`sources_to_ask` gives: connected, or with an address the
  node learned (a peer it was connected to) or the announcement gives (a public source's,
  signed by the author); it dials one that is not connected, and once the pulls of the pass
  are done closes the connections :class:`PullDials` says were opened only to pull (a peer
  dialed to join or from the peer exchange is kept).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from swarmnode.swarm.address import peer_id_of
from swarmnode.swarm.transport.freshness import FRESH_FLOOR_S, FRESH_SHARE
from swarmnode.swarm.transport.joining import JoinLoop, bootstrap_in_reach
from swarmnode.swarm.transport.libp2p.announce import Announcement, source_addresses
from swarmnode.swarm.transport.libp2p.holding import (
    HELD_BYTES,
    HELD_ROUNDS,
    OWN_ROUNDS,
    BundleStore,
    choose_holders,
)
from swarmnode.swarm.transport.libp2p.named import named_answer
from swarmnode.swarm.transport.libp2p.peer_exchange import (
    EXCHANGE_EVERY,
    EXCHANGE_FIRST,
    ExchangeRound,
    answer_order,
)
from swarmnode.swarm.transport.libp2p.spread import (
    FirstHand,
    Libp2pPull,
    PullDials,
    PushPacer,
    push_targets,
)
from swarmsim.libp2p_loop import PULL_INTERVAL, PullLoop
from swarmsim.node import ConnectedIds, SimNode, World, address, peer_id
from swarmsim.plan import KeptPullPlan

STREAM_TIMEOUT = 10.0
DIAL_TIMEOUT = 5.0
SWARM = "sim"


@dataclass(frozen=True)
class Libp2pCosts:
    """Wire bytes (Ethernet, IP and TCP headers included) of what a libp2p node sends. The
    payloads are the protocol's own sizes (a signed announcement of Ed25519 PeerIDs is 414
    bytes of canonical JSON with one holder, 55 more for each other, 11 more for the field
    of addresses and 86 for each source given one IPv4 address); the overheads
    (``stream``, ``upkeep_per_connection_s``) are fitted to ``benchmarks/swarm_scale.py`` runs
    of 2, 3 and 4 nodes (``benchmarks/swarm_sim.py --fit``, docs/scale.md): the fit gives
    1,058 bytes a stream and a slightly negative upkeep, so upkeep is 0."""

    stream: int = 1058  # opening, using and closing one stream, each way: multistream-select, yamux, noise, TCP
    announcement: int = 414  # a signed announcement naming one holder
    holder: int = 55  # each further holder it names
    addresses: int = 11  # the field of its sources' addresses, when it has one
    source_address: int = 86  # each source it gives an address: its PeerID and one /ip4/.../tcp/... address
    request: int = 75  # a bundle request
    named: int = 61  # each [PeerID, round] pair of a request by name (a 52-character PeerID, a 4-digit round)
    address: int = 87  # one multiaddr in a peer-exchange answer
    handshake: int = 3500  # a new connection, each way: TCP, multistream, noise XX, yamux, identify
    close: int = 160  # closing a connection, each way: yamux's go-away frame, noise, TCP's FIN and ACK (estimated)
    upkeep_per_connection_s: float = 0.0  # bytes a second each way an open connection costs when idle
    handshake_rtts: int = 4

    def wire(self, payload: int) -> int:
        """``payload`` bytes with a TCP/IP/Ethernet header for each full segment after the first."""
        return payload + (payload // _MSS) * _SEGMENT_HEADERS

    def announcement_bytes(self, a: Announcement) -> int:
        given = len(a.addresses)
        return (self.announcement + self.holder * max(0, len(a.holders) - 1)
                + (self.addresses + self.source_address * given if given else 0))

    def list_bytes(self, announcements: list[Announcement]) -> int:
        """A JSON list of announcements, as a sample or an answer by name carries them."""
        return 2 + sum(self.announcement_bytes(a) + 1 for a in announcements)


_MSS = 1448  # TCP payload bytes a segment carries (1500-byte MTU, timestamps on)
_SEGMENT_HEADERS = 66  # Ethernet 14 + IP 20 + TCP 32


class Libp2pNode(PullLoop, SimNode):
    def __init__(self, world: World, idx: int, round_s: float, rng: random.Random, costs: Libp2pCosts):
        super().__init__(world, idx, round_s, rng)
        self.costs = costs
        k = 0 if self.relay else world.scenario.fetch_per_round
        self.pull = Libp2pPull(self.peer_id, k, rng=rng, plan_type=KeptPullPlan)
        self.first_hand = FirstHand(rng=rng)
        self.pacer = PushPacer()
        self.dials = PullDials()
        # The stores' room standing advances by the minute: of virtual time, not of the run's wall time.
        self.held = BundleStore(HELD_ROUNDS, HELD_BYTES, clock=lambda: world.engine.now)
        self.served = BundleStore(OWN_ROUNDS, OWN_ROUNDS * world.scenario.bundle_bytes, clock=lambda: world.engine.now)
        self.own: Announcement | None = None  # the latest this node announced, for asks by name
        self.asks_by_name = world.scenario.extra.get("asks_by_name", True)  # False: an older release's node
        self.known: set[int] = set()  # public peers whose addresses this node learned (its peerstore)
        self.loop_busy = False
        self.loop_free = rng.uniform(0.0, PULL_INTERVAL)  # when the loop's sleep ends: loops start at any phase
        self.tick_at: float | None = None  # the pass scheduled next, if any
        self.tick_token = 0  # only the pass scheduled last runs
        self.bootstrap = [address(b) for b in world.bootstrap if b != idx]
        self.bootstrap_ids = {peer_id(b) for b in world.bootstrap}
        self.joining = JoinLoop(self.bootstrap, rng)
        self._ids: list[str] = []  # connected_ids() as of the host's ``_ids_at``-th connection change
        self._ids_at = 0

    # -- connections ------------------------------------------------------------------------

    def connected(self) -> list[int]:
        return list(self.world.hosts.peers[self.idx])

    def connected_ids(self) -> list[str]:
        """The PeerIDs of the connected peers; one list while they stay the same (a pass
        asks for it several times), not to be changed."""
        hosts = self.world.hosts
        if self._ids_at != hosts.changes[self.idx]:
            self._ids = [peer_id(p) for p in hosts.peers[self.idx]]
            self._ids_at = hosts.changes[self.idx]
        return self._ids

    def dial(self, other: int, then: Any = None) -> None:
        """Dial ``other``; ``then(ok)`` when it is settled."""
        world, hosts = self.world, self.world.hosts
        if hosts.connected(self.idx, other):
            if then is not None:
                then(True)
            return
        net = world.net
        if not net.online[other] or not net.places[other].public:
            world.meter.count("dials_failed", world.now)
            if then is not None:
                self.after(DIAL_TIMEOUT, then, False)
            return
        rtt = 2 * net.latency(self.idx, other)
        if not hosts.room(self.idx, other):
            hosts.refused[other] += 1
            world.meter.count("dials_refused", world.now)
            net.transfer(self.idx, other, 80)  # the TCP connection opened, then closed unanswered
            if then is not None:
                self.after(rtt, then, False)
            return
        net.transfer(self.idx, other, self.costs.handshake)
        net.transfer(other, self.idx, self.costs.handshake)
        self.after(self.costs.handshake_rtts * rtt, self._dialed, other, then)

    def _dialed(self, other: int, then: Any) -> None:
        world = self.world
        ok = world.net.online[other] and world.hosts.connect(self.idx, other, world.now)
        if ok:
            self.known.add(other)
            other_node = world.nodes[other]
            if self.public:
                other_node.known.add(self.idx)
            world.meter.count("connections_opened", world.now)
        if then is not None:
            then(ok)

    def exchange(self, other: int, request_bytes: int, serve: Any, reply: Any) -> None:
        """A request/response stream to connected ``other``: ``serve(asker)`` there returns
        (answer payload bytes, value); ``reply(value or None)`` here (None: no one awaits it)."""
        c = self.costs

        def served(asker: int) -> tuple[int, Any]:
            size, value = serve(asker)
            return c.stream + c.wire(size), value

        self.world.net.call(self.idx, other, c.stream + c.wire(request_bytes), served, reply, STREAM_TIMEOUT)

    # -- joining ----------------------------------------------------------------------------

    def join(self) -> None:
        self._keep_joined()
        self.after(EXCHANGE_FIRST, self._exchange_peers)

    def _keep_joined(self) -> None:
        """Transport._keep_joined: its JoinLoop says whom to dial and how long to wait."""
        world = self.world
        dial = self.joining.to_dial(bootstrap_in_reach(ConnectedIds(world, self.idx), self.bootstrap))
        if not dial:
            self.after(self.joining.wait(False, False), self._keep_joined)
            return
        world.meter.count("join_attempts", world.now)
        pending = {"left": len(dial), "ok": False}

        def settled(ok: bool, other: int) -> None:
            if ok:
                self.dials.kept(peer_id(other))
            pending["left"] -= 1
            pending["ok"] |= ok
            if not pending["left"]:
                self.after(self.joining.wait(True, pending["ok"]), self._keep_joined)

        for maddr in dial:
            other = world.index[peer_id_of(maddr) or ""]
            self.dial(other, lambda ok, other=other: settled(ok, other))

    def _exchange_peers(self) -> None:
        """One ExchangeRound: ask a few connected peers for theirs, dial until enough."""
        turn = ExchangeRound(self.peer_id, self.connected_ids(), self.rng, self.bootstrap_ids)
        asks = [self.world.index[p] for p in turn.ask]
        self._ask_next(turn, asks)

    def _ask_next(self, turn: ExchangeRound, asks: list[int]) -> None:
        if not asks:
            self.after(EXCHANGE_EVERY, self._exchange_peers)
            return
        other = asks.pop(0)
        if not self.world.hosts.connected(self.idx, other):
            self._ask_next(turn, asks)
            return

        def serve(asker: int) -> tuple[int, Any]:
            node = self.world.nodes[other]
            order = [p for p in answer_order(node.connected(), asker, node.rng) if self.world.net.places[p].public]
            order = order[:64]
            return 2 + len(order) * self.costs.address, order

        def reply(order: list[int] | None) -> None:
            self._dial_listed(turn, list(order or []), asks)

        self.exchange(other, 0, serve, reply)

    def _dial_listed(self, turn: ExchangeRound, listed: list[int], asks: list[int]) -> None:
        while listed and not turn.enough():
            other = listed.pop(0)
            maddr = address(other)
            if not turn.worth_dialing(maddr):
                continue

            def dialed(ok: bool, maddr: str = maddr, other: int = other) -> None:
                if ok:
                    turn.dialed(maddr)
                    self.dials.kept(peer_id(other))
                self._dial_listed(turn, listed, asks)

            self.dial(other, dialed)
            return
        self._ask_next(turn, asks)

    # -- publishing -------------------------------------------------------------------------

    def publish_bundle(self, round_no: int) -> None:
        world = self.world
        size = world.scenario.bundle_bytes
        self.served.put(self.peer_id, round_no, _payload(size))
        if self.public:
            self._announce(round_no, [])
            return
        bootstrap = {peer_id(b) for b in world.bootstrap}
        public = [peer_id(p) for p in self.connected() if world.net.places[p].public]
        holders = [world.index[p] for p in choose_holders(public, bootstrap)]
        took: list[str] = []
        pending = {"left": len(holders)}
        if not holders:
            self._announce(round_no, took)
            return

        def acked(holder: int, ok: Any) -> None:
            if ok:
                took.append(peer_id(holder))
            pending["left"] -= 1
            if not pending["left"]:
                self._announce(round_no, took)

        for holder in holders:
            self.exchange(holder, size, lambda asker, h=holder: world.nodes[h].take_hold(asker, round_no),
                          lambda ok, h=holder: acked(h, ok))

    def _announce(self, round_no: int, holders: list[str]) -> None:
        world = self.world
        sources = (self.peer_id, *holders)
        listening = {p: [address(world.index[p])] for p in sources if world.net.places[world.index[p]].public}
        announcement = Announcement(self.peer_id, SWARM, round_no, world.scenario.bundle_bytes, "", sources,
                                    source_addresses(listening))
        self.own = announcement
        for target in push_targets(self.connected_ids(), self.rng):
            other = world.index[target]
            self.exchange(other, self.costs.announcement_bytes(announcement),
                          lambda asker, o=other: world.nodes[o].take_push(asker, announcement), None)
        self.pull.next_round(world.now)
        self.poke()

    def take_hold(self, pusher: int, round_no: int) -> tuple[int, Any]:
        """HOLD: a private peer leaves its bundle here (a public node only)."""
        if not self.public:
            return 0, None
        self.world.meter.signatures(self.idx, self.world.now)
        self.held.put(peer_id(pusher), round_no, _payload(self.world.scenario.bundle_bytes))
        return 4, True

    def take_push(self, pusher: int, announcement: Announcement) -> tuple[int, Any]:
        """ANNOUNCE: a connected peer pushed its announcement."""
        world = self.world
        if not self.pacer.admit(peer_id(pusher), world.now):
            return 0, None
        world.meter.signatures(self.idx, world.now)
        if (self.first_hand.put(announcement, announcement, world.now)
                and self.pull.heard([announcement], world.now, pushed=True)):
            self.poke()
        return 0, None

    def answer_sample(self, asker: int) -> tuple[int, Any]:
        """SAMPLE: what was pushed here lately, never the asker's own."""
        sample = self.first_hand.sample(self.world.now, exclude=(peer_id(asker),))
        return self.costs.list_bytes(sample), sample

    def answer_named(self, wanted: list[tuple[str, int]]) -> tuple[int, Any]:
        """LATEST: anything newer of the authors ``wanted`` names (its own, or pushed here lately)."""
        now = self.world.now
        answer = named_answer(wanted, self.peer_id, self.own, lambda author: self.first_hand.latest(author, now),
                              round_of=lambda a: a.round)
        return self.costs.list_bytes(answer), answer

    def answer_bundle(self, author: str, round_no: int) -> tuple[int, Any]:
        """BUNDLE: the bundle if this node serves it."""
        data = self.served.get(author, round_no) or self.held.get(author, round_no)
        return (len(data), True) if data else (0, None)

    # -- life -------------------------------------------------------------------------------

    def went_away(self) -> None:
        self.dials = PullDials()  # its connections are gone, and with them what it knew of them
        self.loop_busy = False
        self.tick_at = None
        self.tick_token += 1

    def came_back(self) -> None:
        self.loop_free = self.world.now

    def fresh_window_s(self) -> float:
        return max(FRESH_SHARE * self.round_s, FRESH_FLOOR_S)


_PAYLOADS: dict[int, bytes] = {}


def _payload(size: int) -> bytes:
    """One shared stand-in of ``size`` bytes for every bundle (the stores count lengths only)."""
    if size not in _PAYLOADS:
        _PAYLOADS[size] = bytes(size)
    return _PAYLOADS[size]
