"""benchmarks/swarm_scale.py's measuring parts, and tests/natlab.py's SwitchLab (slow, root only)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from natlab import LabUnavailable, SwitchLab  # noqa: E402
from programs import argv  # noqa: E402
from swarm_scale import (  # noqa: E402
    announce_counts,
    announce_line,
    announce_per_round,
    cpu_s,
    deliveries,
    parse_net_dev,
    table_row,
    tree_usage,
)

NET_DEV = ("Inter-|   Receive                                                |  Transmit\n"
           " face |bytes    packets errs drop fifo frame compressed multicast"
           "|bytes    packets errs drop fifo colls carrier compressed\n") + """\
    lo: 9999999 100 0 0 0 0 0 0 9999999 100 0 0 0 0 0 0
  eth0: 1200 10 0 0 0 0 0 0 340 4 0 0 0 0 0 0
sn0a1b2cs12345:70000 50 0 0 0 0 0 0 80000 60 0 0 0 0 0 0
"""


def test_net_dev_sums_every_interface_but_loopback_even_a_name_touching_its_counters():
    assert parse_net_dev(NET_DEV) == (1200 + 70000, 340 + 80000)
    assert parse_net_dev(NET_DEV.split("  eth0")[0]) == (0, 0)  # loopback only


@pytest.mark.slow
def test_cpu_of_a_process_tree_counts_a_busy_child_alive_and_after_it_is_reaped():
    me = os.getpid()
    before_tree, before_self = tree_usage(me), cpu_s(me)
    child = subprocess.Popen(argv("cpu_burner"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "done\n"
        alive = tree_usage(me)
        assert alive.processes >= 2
        assert alive.cpu_s - before_tree.cpu_s >= 0.45  # the child's half second, while it lives
        assert cpu_s(me) - before_self < 0.4  # ... and not because this process was busy
        assert alive.rss_mb > 5 and alive.pss_mb > 1
    finally:
        child.communicate("", timeout=30)
    reaped = tree_usage(me)  # the child is gone: its CPU now sits in this process's cutime
    assert reaped.processes < alive.processes
    assert reaped.cpu_s >= alive.cpu_s - 0.01
    assert cpu_s(999_999_999) == 0.0  # a process that does not exist costs nothing


def test_deliveries_count_distinct_external_bundles_and_first_receipts():
    t = 1000.0
    published = {"a1": {"node": 0, "t_pub": t}, "b1": {"node": 1, "t_pub": t}, "c1": {"node": 2, "t_pub": t},
                 "a2": {"node": 0, "t_pub": t + 15}, "b2": {"node": 1, "t_pub": t + 15},
                 "c2": {"node": 2, "t_pub": t + 15}}

    def got(digest: str, after: float) -> dict:
        return {"digest": digest, "t_recv": published[digest]["t_pub"] + after}

    messages = [
        [got("b1", 0.1), got("c1", 0.2), got("b2", 0.3), got("c2", 0.4)],  # all four
        [got("a1", 0.5), got("a1", 0.05), got("b1", 0.0), got("c2", 0.6), {"digest": "old", "t_recv": t}],
        [got("a1", 2.0)],  # missed three
    ]
    result = deliveries(published, messages, rounds=2, fetch_per_round=8)
    assert result["received_mean"] == pytest.approx((4 + 2 + 1) / 3 / 2)
    assert result["received_min"] == 0.5
    assert result["received_per_node"] == [2.0, 1.0, 0.5]
    assert result["delivery_ratio"] == pytest.approx(result["received_mean"] / 2)  # min(N - 1, K) = 2
    assert result["duplicates"] == pytest.approx(1 / 2 / 3)  # node 1's second a1
    # first receipts: 0.1 0.2 0.3 0.4 | 0.05 (not 0.5) 0.6 | 2.0; own and unknown bundles left out
    assert result["latency_s_p50"] == pytest.approx(0.3)
    assert result["latency_s_p95"] == pytest.approx(2.0)
    assert deliveries(published, messages, rounds=2, fetch_per_round=1)["delivery_ratio"] == \
        pytest.approx(result["received_mean"])
    # A window counts first receipts inside it: node 1's first a1 (t + 0.05) falls before it.
    windowed = deliveries(published, messages, rounds=2, fetch_per_round=8, window=(t + 0.1, t + 16))
    assert windowed["received_per_node"] == [2.0, 0.5, 0.5]
    assert windowed["latency_s_max"] == pytest.approx(2.0)


def test_a_row_without_namespaces_says_na_for_bytes():
    row = {"transport": "libp2p", "nodes": 8, "recv_mb": None, "sent_mb": None, "cpu_s": 0.25, "rss_mb": 93.4,
           "received_mean": 7.0, "received_min": 6.5, "delivery_ratio": 1.0, "latency_s_p50": 0.02,
           "latency_s_p95": None, "cores": 0.1, "peers_mean": 6.5, "peers_max": 7}
    assert table_row(row) == "| libp2p | 8 | n/a | n/a | 0.25 | 93 | 7.0 | 6.5 | 1.00 | 0.02 | n/a | 0.10 | 6.5, 7 |"


class CountingNode:
    """A node's ``counters`` as ProcNode reports them: ``readings`` in turn, the last one kept."""

    def __init__(self, *readings: dict):
        self.readings = list(readings)

    def counters(self) -> dict:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def hivemind_reading(direct: int, traversal: int, direct_failed: int) -> dict:
    return {"refused": {}, "evicted": 0,
            "announce_stores": {"direct": direct, "traversal": traversal, "direct_failed": direct_failed}}


def test_announcement_counts_wait_for_every_round_then_average_per_node_and_round():
    stale = hivemind_reading(0, 1, 0)
    node_a = CountingNode(stale, stale, hivemind_reading(2, 2, 1))  # round 3 fell back
    node_b = CountingNode(hivemind_reading(2, 1, 0))
    counts = announce_counts([node_a, node_b], rounds=3, timeout=10)
    assert counts == [{"announce_direct": 2, "announce_traversal": 2, "announce_direct_failed": 1},
                      {"announce_direct": 2, "announce_traversal": 1, "announce_direct_failed": 0}]
    r = {"transport": "hivemind", "nodes": 2, "announce_per_node_round": announce_per_round(counts, 3)}
    assert r["announce_per_node_round"]["per_node"][0]["announce_traversal"] == 2 / 3
    assert announce_line(r) == ("hivemind N=2: announcements a node a round (warm-up rounds included): "
                                "announce_direct 0.67, announce_traversal 0.50, announce_direct_failed 0.17; "
                                "direct share 0.50")


def test_a_transport_without_announcement_counts_reports_none():
    libp2p = {"refused": {"push_too_soon": 3}, "evicted": 0, "announce_stores": None}
    assert announce_counts([CountingNode(libp2p)], rounds=1, timeout=1) is None


def _counters(lab: SwitchLab, i: int) -> tuple[int, int]:
    out = subprocess.run([*lab.exec_prefix(i), "cat", "/proc/net/dev"], capture_output=True, text=True, timeout=30)
    return parse_net_dev(out.stdout)


@pytest.mark.slow
def test_switch_lab_connects_its_namespaces_and_counts_each_ones_bytes():
    lab = SwitchLab(3)
    server = None
    try:
        try:
            lab.build()
        except LabUnavailable as exc:
            pytest.skip(str(exc))
        names = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
        assert {lab.switch, *lab.namespaces} <= names
        assert len({lab.address(i) for i in range(3)}) == 3
        server = subprocess.Popen([*lab.exec_prefix(0), *argv("byte_sink", lab.address(0))], stdout=subprocess.PIPE,
                                  text=True)
        assert server.stdout.readline() == "listening\n"
        before = [_counters(lab, i) for i in range(3)]
        subprocess.run([*lab.exec_prefix(1), *argv("byte_source", lab.address(0))], check=True, timeout=30)
        assert server.stdout.readline() == "200000\n"
        time.sleep(0.2)
        after = [_counters(lab, i) for i in range(3)]
        rx0, tx1 = after[0][0] - before[0][0], after[1][1] - before[1][1]
        assert 200_000 <= rx0 < 300_000 and 200_000 <= tx1 < 300_000
        assert after[2][0] - before[2][0] < 20_000  # the bridge learned where node 0 is: no flooding to node 2
    finally:
        if server is not None:
            server.kill()
            server.wait(10)
        lab.remove()
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert lab.tag not in left
