"""The simulated network: where nodes sit, what a message costs, who is connected to whom.

* :class:`Place`: a node's region, its access latency and its bandwidth up and down, and
  whether it can be dialed (public) or only dials out (behind NAT).
* :class:`Network`: one-way messages and request/response exchanges between nodes. A
  message of ``n`` bytes leaves when the sender's uplink and the receiver's downlink are free,
  takes ``n`` / the slower of the two to send, then the link's latency to arrive. Every byte
  and message is counted at both ends. A node that is offline (asleep) receives nothing; an
  exchange with it ends, for the asker, at its time-out, as a stream to a vanished peer does.
* :class:`Hosts`: the connections of hosts that cap them, as py-libp2p 0.8.1 does (a hard cap
  on all connections and one on inbound ones; read in its ``network/config.py`` and
  ``swarm.py``) or as p2pd's connection manager does (trim to a low watermark past a high one,
  sparing connections younger than a grace period).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from swarmsim.engine import Engine


@dataclass(frozen=True)
class Place:
    """Where a node sits in the network."""

    region: int
    access_s: float  # one-way latency between the node and its region's backbone
    up: float  # bytes a second
    down: float
    public: bool  # accepts inbound connections; False: behind NAT, dials out only


class Network:
    """Messages between the nodes at ``places``; ``region_s[a][b]``: one-way backbone latency."""

    def __init__(self, engine: Engine, places: list[Place], region_s: list[list[float]]):
        self.engine = engine
        self.places = places
        self.region_s = region_s
        n = len(places)
        self.online = [True] * n
        self.epoch = [0] * n  # bumped when a node goes offline: what was in flight for it is lost
        self.rx = [0] * n
        self.tx = [0] * n
        self.rx_msgs = [0] * n
        self.tx_msgs = [0] * n
        self._up_free = [0.0] * n
        self._down_free = [0.0] * n

    def latency(self, a: int, b: int) -> float:
        pa, pb = self.places[a], self.places[b]
        return pa.access_s + pb.access_s + self.region_s[pa.region][pb.region]

    def set_online(self, node: int, online: bool) -> None:
        if not online and self.online[node]:
            self.epoch[node] += 1
        self.online[node] = online

    def transfer(self, src: int, dst: int, nbytes: int, messages: int = 1) -> float:
        """Count ``nbytes`` (``messages`` messages: 0 for more of one already counted) from
        ``src`` to ``dst`` and return when they arrive."""
        # latency() and min()/max() written out: this runs for every message of a run.
        ps, pd = self.places[src], self.places[dst]
        lat = ps.access_s + pd.access_s + self.region_s[ps.region][pd.region]
        start = self.engine.now
        up_free, down_free = self._up_free[src], self._down_free[dst] - lat
        if up_free > start:
            start = up_free
        if down_free > start:
            start = down_free
        done = start + nbytes / (ps.up if ps.up < pd.down else pd.down)
        self._up_free[src] = done
        self._down_free[dst] = done + lat
        self.tx[src] += nbytes
        self.rx[dst] += nbytes
        self.tx_msgs[src] += messages
        self.rx_msgs[dst] += messages
        return done + lat

    def send(self, src: int, dst: int, nbytes: int, fn: Callable[..., Any], *args: Any) -> None:
        """A one-way message: ``fn(*args)`` runs when it arrives, if ``dst`` is still up then."""
        if not self.online[dst]:
            return
        self.engine.at(self.transfer(src, dst, nbytes), self._arrive, dst, self.epoch[dst], fn, args)

    def _arrive(self, dst: int, epoch: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if self.online[dst] and self.epoch[dst] == epoch:
            fn(*args)

    def call(self, src: int, dst: int, request_bytes: int, serve: Callable[[int], tuple[int, Any]],
             reply: Callable[[Any], None] | None, timeout: float) -> None:
        """A request/response exchange: ``serve(src)`` runs at ``dst`` when the request arrives and
        returns (answer bytes, value); ``reply(value)`` runs at ``src`` when the answer arrives,
        or ``reply(None)`` at the time-out if ``dst`` is down or the answer would come later. A
        ``src`` that went down meanwhile gets nothing. ``reply`` None: the answer is sent and
        counted, and nothing runs when it arrives (no event)."""
        started = self.engine.now
        if not self.online[dst]:
            if reply is not None:
                self.engine.at(started + timeout, self._reply, src, self.epoch[src], reply, None)
            return
        arrive = self.transfer(src, dst, request_bytes)
        self.engine.at(arrive, self._serve, src, dst, self.epoch[src], self.epoch[dst], serve, reply,
                       started + timeout)

    def _serve(self, src: int, dst: int, src_epoch: int, dst_epoch: int, serve: Callable[[int], tuple[int, Any]],
               reply: Callable[[Any], None] | None, deadline: float) -> None:
        if not self.online[dst] or self.epoch[dst] != dst_epoch:
            if reply is not None:
                self.engine.at(deadline, self._reply, src, src_epoch, reply, None)
            return
        answer_bytes, value = serve(src)
        back = self.transfer(dst, src, answer_bytes)
        if reply is None:
            return
        if back > deadline:
            value, back = None, deadline
        self.engine.at(back, self._reply, src, src_epoch, reply, value)

    def _reply(self, src: int, epoch: int, reply: Callable[[Any], None], value: Any) -> None:
        if self.online[src] and self.epoch[src] == epoch:
            reply(value)


class Hosts:
    """Connections between hosts, undirected, with the dialer remembered.

    ``max_total`` and ``max_inbound`` are hard caps (a dial past them is refused before the
    handshake). With ``inbound_held``, an inbound slot stays taken after its connection
    closes, for the host's life: py-libp2p 0.8.1 takes one from a capacity limiter of
    ``max_connections - min_connections`` (250) per inbound connection and gives it back only
    when the handler returns, which is when the host stops (checked on this machine with two
    hosts: a third inbound connection was refused after two closed, at a cap of two). With
    ``high`` set, a host past ``high`` connections closes its oldest ones older than ``grace``
    down to ``low``, as p2pd's connection manager does (its defaults: 256, 512, 120 s).
    """

    def __init__(self, n: int, *, max_total: int | None = None, max_inbound: int | None = None,
                 inbound_held: bool = False, low: int | None = None, high: int | None = None, grace: float = 0.0):
        self.peers: list[dict[int, float]] = [{} for _ in range(n)]  # peer -> when connected
        self.changes = [0] * n  # connections opened and closed by each host, for caches of its peers
        self.dialed: list[set[int]] = [set() for _ in range(n)]  # peers this host dialed
        self.inbound = [0] * n
        self.inbound_ever = [0] * n
        self.refused = [0] * n  # dials refused by this host for its caps
        self.trimmed = [0] * n  # connections closed by this host's connection manager
        self.max_total = max_total
        self.max_inbound = max_inbound
        self.inbound_held = inbound_held
        self.low, self.high, self.grace = low, high, grace
        # host -> before when no connection of a host left above ``high`` is past its grace: a
        # trim then closes nothing, and a sort of its 512 connections at every dial was a fifth of
        # a 10,000-node hivemind run's CPU.
        self._trim_idle: dict[int, float] = {}
        self.on_close: Callable[[int, int], None] | None = None

    def connected(self, a: int, b: int) -> bool:
        return b in self.peers[a]

    def room(self, a: int, b: int) -> bool:
        """Whether ``a`` may dial ``b`` now (both below their caps)."""
        full = self.max_total is not None and max(len(self.peers[a]), len(self.peers[b])) >= self.max_total
        if full:
            return False
        taken = self.inbound_ever[b] if self.inbound_held else self.inbound[b]
        return self.max_inbound is None or taken < self.max_inbound

    def connect(self, a: int, b: int, now: float) -> bool:
        """``a`` dials ``b``: True if they are connected after (refused past a cap)."""
        if b in self.peers[a]:
            return True
        if not self.room(a, b):
            self.refused[b] += 1
            return False
        self.peers[a][b] = now
        self.peers[b][a] = now
        self.changes[a] += 1
        self.changes[b] += 1
        self.dialed[a].add(b)
        self.inbound[b] += 1
        self.inbound_ever[b] += 1
        if self.high is not None:
            for host in (a, b):
                if len(self.peers[host]) > self.high:
                    self._trim(host, now)
        return True

    def close(self, a: int, b: int) -> None:
        if b not in self.peers[a]:
            return
        del self.peers[a][b]
        del self.peers[b][a]
        self.changes[a] += 1
        self.changes[b] += 1
        dialer, listener = (a, b) if b in self.dialed[a] else (b, a)
        self.dialed[dialer].discard(listener)
        self.inbound[listener] -= 1
        if self.on_close is not None:
            self.on_close(a, b)
            self.on_close(b, a)

    def close_all(self, a: int) -> None:
        for b in list(self.peers[a]):
            self.close(a, b)

    def _trim(self, host: int, now: float) -> None:
        assert self.low is not None
        if now < self._trim_idle.get(host, float("-inf")):
            return
        # A host's peers are in the order they connected, so by when: those past their grace
        # are a prefix, and the oldest ``excess`` of them (ties by peer) end at most where the
        # connections of the excess-th one's time end.
        excess = len(self.peers[host]) - self.low
        old: list[tuple[float, int]] = []
        for p, t in self.peers[host].items():
            if now - t < self.grace or (old and len(old) >= excess and t != old[-1][0]):
                break
            old.append((t, p))
        old.sort()
        for _, peer in old[:max(0, excess)]:
            self.trimmed[host] += 1
            self.close(host, peer)
        left = self.peers[host]
        if len(left) > self.low:  # the rest are in their grace; a later dial's is later
            self._trim_idle[host] = next(iter(left.values())) + self.grace
