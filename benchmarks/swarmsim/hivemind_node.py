"""A simulated ``hivemind`` node, DHT layout 2: the transport's own rules over a model of the DHT.

What it decides, it decides with the code the real transport runs
(:mod:`~swarmnode.swarm.transport.hivemind.reads`: :class:`HivemindPull`, its
:class:`PullPlan` and :class:`ShardCycle`; :mod:`~swarmnode.swarm.transport.hivemind.layout`:
the keys, the shards, the expiries). What hivemind's DHT and p2pd do is modelled in
:mod:`~swarmsim.dht` (who holds a key, which servers a lookup visits) and here
(what each visit costs on the wire, :class:`HivemindCosts`; p2pd's connections, opened for
every server a lookup asks and trimmed by its connection manager).

How the real transport's loops map to events: the poll loop (:mod:`~swarmsim.hivemind_loop`; a poll, then a pause of
``max(POLL_INTERVAL, the poll's duration)``) runs a poll only when it can do something on
the wire: read shards (the plan wants candidates), or fetch (a round published, an awaited
round due); a poll that would read and fetch nothing is skipped. A publish stores the bundle
record by a store traversal, then the announcement, straight at the replicas the node
remembers for its shard or by a traversal, as the transport's
:class:`~swarmnode.swarm.transport.hivemind.announce.ShardReplicas` rules; the plan's next
round begins once both are stored.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from swarmnode.swarm.address import peer_id_of
from swarmnode.swarm.transport.freshness import FRESH_SHARE, fresh_window_s
from swarmnode.swarm.transport.hivemind.announce import REFRESH_ROUNDS, ShardReplicas
from swarmnode.swarm.transport.hivemind.layout import (
    announce_expiry,
    announce_key,
    bundle_expiry,
    bundle_key,
    shard_of,
)
from swarmnode.swarm.transport.hivemind.reads import (
    FETCH_TO_FIRST_COPY,
    FRESH_MOST,
    READ_TO_FIRST_COPY,
    HivemindPull,
    get_workers,
)
from swarmnode.swarm.transport.joining import JoinLoop, bootstrap_in_reach
from swarmsim.dht import (
    BUCKET_SIZE,
    NUM_REPLICAS,
    NUM_WORKERS,
    WAIT_TIMEOUT,
    Space,
    key_id,
    keys_per_request,
    per_key_workers,
    plan_lookup,
)
from swarmsim.hivemind_loop import POLL_INTERVAL, SWARM, PollLoop
from swarmsim.node import ConnectedIds, SimNode, World, address
from swarmsim.plan import KeptPullPlan

DIAL_TIMEOUT = 5.0


@dataclass(frozen=True)
class HivemindCosts:
    """Wire bytes (Ethernet, IP and TCP headers included) of the DHT's messages. The payloads
    follow hivemind's protobuf and msgpack encodings. ``upkeep_s`` is what hivemind's and
    p2pd's own traffic costs a second, whatever the rounds: ``benchmarks/swarm_scale.py``'s
    4-node runs at 15 s and 60 s rounds differ by 9.9 KB a second a node, and its 8-node run
    received 9.1 KB a second more than the messages simulated here (docs/scale.md)."""

    rpc: int = 700  # one request/response's framing, each way: a p2pd stream, noise, yamux, TCP
    key: int = 22  # one key in a request
    node_info: int = 60  # the asker's DHT id and PeerID, in every request
    neighbor: int = 62  # one (DHT id, PeerID) of the nearest peers an answer lists for each key
    announcement: int = 140  # one subkey of a shard: PeerID, round, signature, expiry
    record: int = 75  # a record's framing beyond its value
    handshake: int = 4000  # a new connection, each way
    upkeep_s: float = 9000.0  # bytes a second each way a node spends on the DHT's and p2pd's upkeep

    def wire(self, payload: int) -> int:
        """``payload`` bytes with a TCP/IP/Ethernet header for each full segment after the first."""
        return payload + (payload // 1448) * 66


class HivemindNode(PollLoop, SimNode):
    def __init__(self, world: World, idx: int, round_s: float, rng: random.Random, costs: HivemindCosts,
                 space: Space):
        super().__init__(world, idx, round_s, rng)
        self.costs = costs
        self.space = space
        k = 0 if self.relay else world.scenario.fetch_per_round
        self.pull = HivemindPull(self.peer_id, k, rng=rng, plan_type=KeptPullPlan)
        self._gone_known: set[int] = set()  # servers this node found gone (their requests timed out)
        self._gone_returns = 0  # space.returns when ``_gone_known`` was last pruned
        self.loop_busy = False
        self.loop_free = rng.uniform(0.0, POLL_INTERVAL)  # when the loop's pause ends: loops start at any phase
        self.poll_at: float | None = None
        self.poll_token = 0  # only the poll scheduled last runs
        self.bootstrap = [address(b) for b in world.bootstrap if b != idx]
        self.joining = JoinLoop(self.bootstrap, rng)
        # How far its gets go (the transport's rule; a scenario may set the other one, to compare).
        self.fetch_to_first_copy = world.scenario.extra.get("fetch_to_first_copy", FETCH_TO_FIRST_COPY)
        # When each of its rounds' bundle record and announcement were stored: a delivery's steps.
        self.stored_at: dict[int, float] = {}
        self.announced_at: dict[int, float] = {}
        self.read_to_first_copy = world.scenario.extra.get("read_to_first_copy", READ_TO_FIRST_COPY)
        # The replicas of its shard it stores its announcement at (hosts), and when it traverses
        # (a scenario may set how often, to compare).
        self.shard_replicas = ShardReplicas(world.scenario.extra.get("refresh_rounds", REFRESH_ROUNDS))

    # -- the DHT's wire ----------------------------------------------------------------------

    @property
    def gone_known(self) -> set[int]:
        """Servers this node found gone that are still gone: one that came back or was
        forgotten (:class:`~swarmsim.dht.Space`) is not skipped any more."""
        if self._gone_returns != self.space.returns:
            self._gone_returns = self.space.returns
            self._gone_known = self.space.still_gone(self._gone_known)
        return self._gone_known

    def _connect(self, server: int) -> float:
        """p2pd opens a connection to ``server`` if it has none: its cost in seconds."""
        hosts, net = self.world.hosts, self.world.net
        if hosts.connected(self.idx, server):
            return 0.0
        net.transfer(self.idx, server, self.costs.handshake)
        net.transfer(server, self.idx, self.costs.handshake)
        self.world.meter.count("bytes_connect", self.world.now, 2 * self.costs.handshake)
        hosts.connect(self.idx, server, self.world.now)
        self.world.meter.count("connections_opened", self.world.now)
        return 2 * 2 * net.latency(self.idx, server)

    def lookup(self, keys: list[str], early: bool, done: Callable[[dict[int, list[int]]], None],
               purpose: str) -> None:
        """A traversal of ``keys`` (``get_many``, or the one ``store_many`` starts with): bytes
        counted at every server visited (and, in the meter, under ``purpose``);
        ``done({key id: holders visited})`` when it ends."""
        world, net, space, c = self.world, self.world.net, self.space, self.costs
        now = world.now
        ids = [key_id(k) for k in keys]
        gone_known = self.gone_known
        in_flight = get_workers(len(ids), True) if early else NUM_WORKERS
        orders = plan_lookup(space, self.idx, ids, gone_known, in_flight)
        workers, per_request = per_key_workers(len(ids), in_flight), keys_per_request(len(ids))
        found: dict[int, list[int]] = {}
        slowest = 0.0
        visits = wire = 0
        # An answer lists the nearest peers the answerer knows: every server but itself and the asker.
        listed = min(BUCKET_SIZE, space.servers() - 1 - (self.idx in space.up)) * c.neighbor
        for kid, order in zip(ids, orders):
            # get_many looks in the node's own storage first: a server may be a replica itself.
            hit = [self.idx] if self.idx in space.up and space.holds(self.idx, kid, now) is not None else []
            elapsed = 0.0
            for w in range(0 if not (early and hit) else len(order), len(order), workers):
                wave_s = 0.0
                for host in order[w:w + workers]:
                    visits += 1
                    if host not in space.up:
                        gone_known.add(host)
                        wave_s = max(wave_s, WAIT_TIMEOUT)
                        continue
                    setup = self._connect(host)
                    record = space.holds(host, kid, now)
                    value = 0
                    if record is not None:
                        hit.append(host)
                        value = c.record + (world.scenario.bundle_bytes if record.value is not None
                                            else len(space.shard_entries(record, now)) * c.announcement)
                    first = visits % per_request == 1 or per_request == 1
                    request = (c.rpc + c.node_info if first else 0) + c.key
                    answer = (c.rpc if first else 0) + c.wire(listed + value)
                    net.transfer(self.idx, host, request, first)
                    net.transfer(host, self.idx, answer, first)
                    wire += request + answer
                    wave_s = max(wave_s, setup + 2 * net.latency(self.idx, host))
                elapsed += wave_s
                if early and hit:
                    break
            found[kid] = hit
            slowest = max(slowest, elapsed)
        world.meter.count("dht_visits", now, visits)
        world.meter.count(f"dht_lookups_{purpose}", now, len(ids))
        world.meter.count(f"bytes_{purpose}", now, wire)
        self.after(slowest, done, found)

    # -- joining ----------------------------------------------------------------------------

    def join(self) -> None:
        if self.public:
            self.space.server_up(self.idx, self.world.now)
        self._keep_joined()

    def _keep_joined(self) -> None:
        """Transport._keep_joined (its JoinLoop) with hivemind's join: connect, ping, and look
        up the node's own id to fill the routing table."""
        world = self.world
        dial = self.joining.to_dial(bootstrap_in_reach(ConnectedIds(world, self.idx), self.bootstrap))
        if not dial:
            self.after(self.joining.wait(False, False), self._keep_joined)
            return
        world.meter.count("join_attempts", world.now)
        up = [h for h in (world.index[peer_id_of(m) or ""] for m in dial) if world.net.online[h]]
        if not up:
            self.after(DIAL_TIMEOUT + self.joining.wait(True, False), self._keep_joined)
            return
        for b in up:
            self._connect(b)
            world.net.transfer(self.idx, b, self.costs.rpc)  # the ping
            world.net.transfer(b, self.idx, self.costs.rpc)
        self.lookup([self.peer_id], False, lambda _found: self.after(self.joining.wait(True, True), self._keep_joined),
                    "join")

    # -- publishing -------------------------------------------------------------------------

    def publish_bundle(self, round_no: int) -> None:
        world = self.world
        made = world.now
        key = bundle_key(SWARM, self.peer_id, round_no)
        self.lookup([key], False, lambda found: self._stored_bundle(round_no, key, made), "store")

    def _replicas(self, key: str) -> list[int]:
        """Where a store of ``key`` lands: the nearest servers up (this node if it is one of them)."""
        kid = key_id(key)
        nearest = self.space.nearest(kid, NUM_REPLICAS, self.gone_known)
        return [h for h in nearest if h in self.space.up][:NUM_REPLICAS]

    def _store_at(self, replicas: list[int], size: int, put: Callable[[int], None]) -> float:
        world, c = self.world, self.costs
        slowest = 0.0
        for host in replicas:
            put(host)
            world.meter.signatures(host, world.now)  # the replica's validator checks the record
            if host == self.idx:
                continue
            world.net.transfer(self.idx, host, c.rpc + c.node_info + c.key + c.wire(c.record + size))
            world.net.transfer(host, self.idx, c.rpc)
            world.meter.count("bytes_store", world.now, 2 * c.rpc + c.node_info + c.key + c.wire(c.record + size))
            slowest = max(slowest, 2 * world.net.latency(self.idx, host))
        return slowest

    def _stored_bundle(self, round_no: int, key: str, made: float) -> None:
        world, space = self.world, self.space
        kid = key_id(key)
        expires = bundle_expiry(made)
        wait = self._store_at(self._replicas(key), world.scenario.bundle_bytes,
                              lambda h: space.put_bundle(h, kid, self.idx, round_no, expires))
        self.stored_at[round_no] = world.now + wait
        self.after(wait, self._announce, round_no, made)

    def _announce(self, round_no: int, made: float) -> None:
        """Store the announcement straight at the shard's remembered replicas, or traverse
        (:class:`~swarmnode.swarm.transport.hivemind.announce.ShardReplicas`)."""
        world, space = self.world, self.space
        key = announce_key(SWARM, shard_of(self.peer_id))
        kid = key_id(key)
        # The transport's store_round sets the expiry from the DHT's clock as the publish
        # begins, before either store: an announcement's age is its round's.
        expires = announce_expiry(made)
        targets = self.shard_replicas.targets(self._table_nearest(kid))
        if targets is None:
            self.lookup([key], False, lambda found: self._announce_traversed(round_no, key, expires, set()),
                        "store")
            return
        world.meter.count("announce_direct", world.now)
        up = [h for h in targets if h in space.up]
        down = [h for h in targets if h not in space.up]
        self.gone_known.update(down)
        # A replica gone: the request times out (hivemind's wait_timeout) and it is dropped.
        wait = max([self._connect(h) for h in up if h != self.idx] + [0.0])
        wait += self._store_at(up, self.costs.announcement,
                               lambda h: space.put_announcement(h, kid, self.peer_id, round_no, expires))
        if down:
            wait = max(wait, WAIT_TIMEOUT)
        if self.shard_replicas.direct_done(set(up)):
            self.announced_at[round_no] = world.now + wait
            self.after(wait, self._published)
            return
        world.meter.count("announce_direct_failed", world.now)
        self.after(wait, self.lookup, [key], False,
                   lambda found: self._announce_traversed(round_no, key, expires, set(up)), "store")

    def _table_nearest(self, kid: int) -> list[tuple[int, int]]:
        """(distance, server) of the ``NUM_REPLICAS`` servers nearest ``kid`` in this node's
        routing table (:meth:`~swarmsim.dht.Space.held`), itself if a server."""
        space = self.space
        table = space.held(self.idx, kid, BUCKET_SIZE, self.gone_known | {self.idx})
        if self.idx in space.up:
            table.append(self.idx)
        return sorted((space.ids[h] ^ kid, h) for h in table)[:NUM_REPLICAS]

    def _announce_traversed(self, round_no: int, key: str, expires: float, held: set[int]) -> None:
        """A traversal's store of the announcement; ``held``: replicas a direct store of it
        this round reached already."""
        world, space = self.world, self.space
        kid = key_id(key)
        world.meter.count("announce_traversal", world.now)
        replicas = self._replicas(key)
        wait = self._store_at([h for h in replicas if h not in held], self.costs.announcement,
                              lambda h: space.put_announcement(h, kid, self.peer_id, round_no, expires))
        self.shard_replicas.traversed([(self.space.ids[h] ^ kid, h) for h in replicas], set(replicas))
        self.announced_at[round_no] = world.now + wait
        self.after(wait, self._published)

    def _published(self) -> None:
        self.pull.next_round(self.world.now)
        self.poke()

    # -- life -------------------------------------------------------------------------------

    def went_away(self) -> None:
        self.loop_busy = False
        self.poll_at = None
        self.poll_token += 1
        if self.public:
            self.space.server_down(self.idx, self.world.now)

    def came_back(self) -> None:
        self.loop_free = self.world.now

    def fresh_window_s(self) -> float:
        return fresh_window_s(self.round_s, FRESH_SHARE, FRESH_MOST)

