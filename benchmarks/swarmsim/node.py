"""A simulated host's life: its rounds, its sleep and waking, what it receives.

:class:`SimNode` is what both transports' agents share: a round clock (a publish each round,
the round's length from the node's hardware, jittered), churn (the node leaves at a rate per
hour and comes back after a while, as a desktop sleeps: its process and what it remembers
stay, its connections do not), the node's standing (the real
:class:`~swarmnode.swarm.standing.Standing`, fed as a node's exchange feeds it: every
received bundle counts as useful) and the bookkeeping of what it received. A subclass
supplies the transport: :meth:`SimNode.publish_bundle`, :meth:`SimNode.went_away`,
:meth:`SimNode.came_back` and :meth:`SimNode.join`.

Events a node schedules for itself run only if it has not left since (:meth:`SimNode.at`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from swarmnode.swarm.standing import Standing
from swarmsim.engine import Engine
from swarmsim.meter import Meter
from swarmsim.network import Hosts, Network
from swarmsim.scenario import Scenario


@dataclass
class World:
    """Everything the agents share: the clock, the network, the meter, the nodes."""

    scenario: Scenario
    engine: Engine
    net: Network
    hosts: Hosts
    meter: Meter
    nodes: list[SimNode] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)  # PeerID -> host number
    made: dict[tuple[int, int], float] = field(default_factory=dict)  # (author, round) -> when published
    bootstrap: list[int] = field(default_factory=list)  # the hosts every node joins through

    @property
    def now(self) -> float:
        return self.engine.now


def peer_id(host: int) -> str:
    """The simulated PeerID of host number ``host``."""
    return f"sim-{host}"


class ConnectedIds(Collection[str]):
    """The PeerIDs of the peers host ``idx`` is connected to, as a view: a membership test
    costs no list of them (the join rule asks one every few seconds of every node)."""

    def __init__(self, world: World, idx: int):
        self._peers = world.hosts.peers[idx]
        self._index = world.index

    def __contains__(self, peer: object) -> bool:
        host = self._index.get(peer) if isinstance(peer, str) else None
        return host in self._peers

    def __len__(self) -> int:
        return len(self._peers)

    def __iter__(self) -> Iterator[str]:
        return (peer_id(p) for p in self._peers)


def address(host: int) -> str:
    """A multiaddr of host number ``host`` (what a bootstrap list or a peer exchange names)."""
    return f"/ip4/10.0.0.1/tcp/1/p2p/{peer_id(host)}"


class SimNode:
    """Host ``idx`` of ``world``; ``round_s`` 0 for a relay (it publishes nothing and never sleeps)."""

    def __init__(self, world: World, idx: int, round_s: float, rng: random.Random):
        self.world = world
        self.idx = idx
        self.peer_id = peer_id(idx)
        self.public = world.net.places[idx].public
        self.relay = round_s == 0.0
        self.round_s = round_s
        self.rng = rng
        self.online = False
        self.life = 0
        self.round_no = 0
        self.online_since = 0.0
        self.standing = Standing() if world.scenario.extra.get("standing", True) and not self.relay else None

    # -- scheduling -------------------------------------------------------------------------

    def at(self, when: float, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` at ``when`` unless this node leaves before."""
        self.world.engine.at(when, self._if_alive, self.life, fn, args)

    def after(self, delay: float, fn: Callable[..., Any], *args: Any) -> None:
        self.at(self.world.engine.now + delay, fn, *args)

    def _if_alive(self, life: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if life == self.life and self.online:
            fn(*args)

    # -- life -------------------------------------------------------------------------------

    def start(self) -> None:
        """Come online for the first time: join, and begin the rounds."""
        self._wake()
        s = self.world.scenario
        if not self.relay:
            if s.aligned:
                self.at(s.join_s, self._publish)
            else:
                self.after(self.rng.uniform(0.0, self.round_s), self._publish)
            self._schedule_leave()

    def _wake(self) -> None:
        self.online = True
        self.online_since = self.world.now
        self.world.net.set_online(self.idx, True)
        self.join()

    def _schedule_leave(self) -> None:
        rate = self.world.scenario.churn_per_hour / 3600.0
        if rate > 0:
            self.after(self.rng.expovariate(rate), self._leave)

    def _leave(self) -> None:
        world = self.world
        world.meter.online(self.idx, self.online_since, world.now)
        self.online = False
        self.life += 1
        world.net.set_online(self.idx, False)
        world.hosts.close_all(self.idx)
        self.went_away()
        world.engine.after(self.rng.expovariate(1.0 / world.scenario.sleep_s), self._return)

    def _return(self) -> None:
        self._wake()
        self.came_back()
        self.after(self.next_round_s(), self._publish)
        self._schedule_leave()

    def close(self, end: float) -> None:
        """The run ends at ``end``: count the time online."""
        if self.online:
            self.world.meter.online(self.idx, self.online_since, end)

    # -- rounds -----------------------------------------------------------------------------

    def next_round_s(self) -> float:
        jitter = self.world.scenario.round_jitter
        return self.round_s * (1.0 + self.rng.uniform(-jitter, jitter))

    def _publish(self) -> None:
        world = self.world
        self.round_no += 1
        world.made[(self.idx, self.round_no)] = world.now
        world.meter.publish(self.idx, world.now)
        if self.standing is not None:
            self.standing.advance(self.round_no)
        self.publish_bundle(self.round_no)
        if world.scenario.aligned:
            self.at(world.now + self.round_s, self._publish)
        else:
            self.after(self.next_round_s(), self._publish)

    def deliver(self, author: int, round_no: int) -> bool:
        """``author``'s bundle of ``round_no`` arrived; False if this node had it already."""
        world = self.world
        made = world.made[(author, round_no)]
        if not world.meter.receive(self.idx, author, round_no, made, world.now, self.round_s or 1.0):
            return False
        world.meter.signatures(self.idx, world.now)  # the bundle's own signature, checked on arrival
        if self.standing is not None:
            self.standing.note(peer_id(author), useful=True)
        return True

    def established(self) -> Callable[[str], bool] | None:
        """The node's standing, as the transport is told of it (None: the transport's own guess)."""
        return None if self.standing is None else self.standing.is_established

    # -- the transport ----------------------------------------------------------------------

    def join(self) -> None:
        """Connect to the swarm (at start and on waking)."""
        raise NotImplementedError

    def publish_bundle(self, round_no: int) -> None:
        raise NotImplementedError

    def went_away(self) -> None:
        """The node fell asleep: its connections are closed already."""

    def came_back(self) -> None:
        """The node woke up (``join`` has been called)."""

    def fresh_window_s(self) -> float:
        """How old a bundle may be on arrival and count as fresh, for this node."""
        raise NotImplementedError
