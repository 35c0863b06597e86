"""What a simulated run measures, per node, inside its measurement window.

Counters the agents feed (rounds published, signatures checked, bundles first received with
when they were made) plus the network's byte and message counters, read at the window's
edges. :meth:`Meter.summary` turns them into the figures of docs/scale.md's tables: per node
per round of its own, bytes in and out, messages, signatures checked and bundles received
(mean and 5th percentile over the nodes), delivery latency (p50 and p95, in seconds and as a
share of the receiver's round), freshness, and the busiest host. A transport may also say
where a delivery's time went (:meth:`Meter.stages`: named steps from made to received) and
count bytes by kind (events named ``bytes_<kind>``, each message counted once, so a node's
bytes received plus sent are twice their sum): the summary gives each step's mean, p50 and
p95 in seconds, and each kind's bytes and each other event's count per node per round.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from swarmsim.network import Network


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values``, linearly interpolated; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class Receipt:
    made: float  # when the author published it
    at: float  # when this node first received it
    round_s: float  # the receiver's round length when it arrived


class Meter:
    """Counters for ``n`` hosts and a measurement window [start, end)."""

    def __init__(self, n: int, start: float, end: float):
        self.start, self.end = start, end
        self.published = [0] * n  # rounds published inside the window
        self.sigs = [0] * n  # signatures checked (announcements and bundles), inside the window
        self.receipts: list[list[Receipt]] = [[] for _ in range(n)]  # first receipts inside the window
        self.seen: list[set[tuple[int, int]]] = [set() for _ in range(n)]  # (author, round) ever received
        self.online_s = [0.0] * n  # seconds online inside the window
        self.events: dict[str, int] = {}  # named counts (refused dials, missing pulls, ...), inside the window
        self.steps: dict[str, list[float]] = {}  # a delivery's steps, step -> seconds, deliveries inside the window
        self._base: dict[str, list[int]] | None = None
        self._final: dict[str, list[int]] | None = None

    def inside(self, t: float) -> bool:
        return self.start <= t < self.end

    def publish(self, node: int, t: float) -> None:
        if self.inside(t):
            self.published[node] += 1

    def signatures(self, node: int, t: float, n: int = 1) -> None:
        if self.inside(t):
            self.sigs[node] += n

    def count(self, name: str, t: float, n: int = 1) -> None:
        if self.inside(t):
            self.events[name] = self.events.get(name, 0) + n

    def stages(self, t: float, steps: dict[str, float]) -> None:
        """Where the time of a delivery at ``t`` went: step -> seconds, in the order they came."""
        if self.inside(t):
            for name, seconds in steps.items():
                self.steps.setdefault(name, []).append(seconds)

    def receive(self, node: int, author: int, round_no: int, made: float, t: float, round_s: float) -> bool:
        """``node`` got ``author``'s bundle of ``round_no``; False if it had it already."""
        key = (author, round_no)
        if key in self.seen[node]:
            return False
        self.seen[node].add(key)
        if self.inside(t):
            self.receipts[node].append(Receipt(made, t, round_s))
        return True

    def online(self, node: int, since: float, until: float) -> None:
        """``node`` was online from ``since`` to ``until``."""
        lo, hi = max(since, self.start), min(until, self.end)
        if hi > lo:
            self.online_s[node] += hi - lo

    def snapshot(self, net: Network, final: bool) -> None:
        """Read the network's counters at the window's start (``final`` False) or end."""
        copy = {"rx": list(net.rx), "tx": list(net.tx), "rx_msgs": list(net.rx_msgs), "tx_msgs": list(net.tx_msgs)}
        if final:
            self._final = copy
        else:
            self._base = copy

    def add_background(self, node: int, rx: int, tx: int) -> None:
        """Bytes ``node`` spent inside the window that were not sent message by message."""
        assert self._final is not None, "snapshot the window's end first"
        self._final["rx"][node] += rx
        self._final["tx"][node] += tx

    def delta(self, key: str, node: int) -> int:
        assert self._base is not None and self._final is not None, "snapshot both window edges first"
        return self._final[key][node] - self._base[key][node]

    def summary(self, nodes: Sequence[int], hosts: Sequence[int], fresh_s: Sequence[float]) -> dict[str, Any]:
        """Figures per node per round over ``nodes`` (those that published in the window), and
        the busiest of ``hosts`` (every host: relays too). ``fresh_s[node]``: the age a bundle
        may have at receipt to count as fresh for that node (its freshness window)."""
        window = self.end - self.start
        rows = []
        latencies: list[float] = []
        shares: list[float] = []
        fresh = total = 0
        late_nodes = 0
        for node in nodes:
            rounds = self.published[node]
            if rounds == 0:
                continue
            got = self.receipts[node]
            lat = [r.at - r.made for r in got]
            share = [(r.at - r.made) / r.round_s for r in got]
            latencies += lat
            shares += share
            fresh += sum(1 for r in got if r.at - r.made <= fresh_s[node])
            total += len(got)
            p95 = percentile(share, 95)
            late_nodes += p95 is not None and p95 > 1.0
            rows.append({"rx": self.delta("rx", node) / rounds, "tx": self.delta("tx", node) / rounds,
                         "msgs": (self.delta("rx_msgs", node) + self.delta("tx_msgs", node)) / rounds,
                         "sigs": self.sigs[node] / rounds, "bundles": len(got) / rounds})

        def col(key: str) -> list[float]:
            return [r[key] for r in rows]

        load = [(self.delta("rx", h) + self.delta("tx", h), self.delta("rx_msgs", h) + self.delta("tx_msgs", h), h)
                for h in hosts]
        busiest_bytes = max(load, default=(0, 0, -1))
        busiest_msgs = max(load, key=lambda x: (x[1], x[0]), default=(0, 0, -1))
        return {
            "nodes_measured": len(rows),
            "rx_bytes": statistics.fmean(col("rx")) if rows else None,
            "tx_bytes": statistics.fmean(col("tx")) if rows else None,
            "rx_bytes_p95": percentile(col("rx"), 95),
            "messages": statistics.fmean(col("msgs")) if rows else None,
            "signatures": statistics.fmean(col("sigs")) if rows else None,
            "bundles_mean": statistics.fmean(col("bundles")) if rows else None,
            "bundles_p5": percentile(col("bundles"), 5),
            "bundles_min": min(col("bundles"), default=None),
            "bundles_max": max(col("bundles"), default=None),
            "fresh_share": fresh / total if total else None,
            "latency_p50_s": percentile(latencies, 50),
            "latency_p95_s": percentile(latencies, 95),
            "latency_p50_round": percentile(shares, 50),
            "latency_p95_round": percentile(shares, 95),
            "nodes_p95_past_round": late_nodes,
            "busiest_bytes_per_s": busiest_bytes[0] / window,
            "busiest_bytes_host": busiest_bytes[2],
            "busiest_msgs_per_s": busiest_msgs[1] / window,
            "busiest_msgs_host": busiest_msgs[2],
            "events": dict(sorted(self.events.items())),
            "steps_s": {name: {"mean": statistics.fmean(v), "p50": percentile(v, 50), "p95": percentile(v, 95)}
                        for name, v in self.steps.items()},
            "bytes_by_kind": _per_round({k[len("bytes_"):]: v for k, v in self.events.items()
                                         if k.startswith("bytes_")}, sum(self.published[n] for n in nodes)),
            "counts_per_round": _per_round({k: v for k, v in self.events.items() if not k.startswith("bytes_")},
                                           sum(self.published[n] for n in nodes)),
        }


def _per_round(totals: dict[str, int], rounds: int) -> dict[str, float]:
    """Counts over the window as a share of the nodes' rounds in it, by name."""
    return {k: v / rounds for k, v in sorted(totals.items())} if rounds else {}
