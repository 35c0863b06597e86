"""A node's cost per round as the swarm grows: N network-only nodes on one machine.

Every node is ``tests/transport_node.py`` in its own OS process (hivemind adds a forked DHT
process and a ``p2pd`` daemon to each), alone in a network namespace of its own with one
address on a Linux bridge (``tests/natlab.py``'s :class:`SwitchLab`; the bridge lives in a
"switch" namespace, never the host's). Node 0 starts first; the others bootstrap from its
namespace address. Once every node has 3 peers (all the others in a smaller swarm), a few
seconds more and ``--warmup-rounds`` unmeasured rounds, come ``--rounds`` measured rounds
``--round-s`` apart (all at once, or with ``--stagger`` node i at i / N of the round, as in a
swarm whose rounds are not aligned): each round every node publishes one valid signed bundle of about
``--size`` wire bytes (incompressible random text; the default 8000 is about what zstd makes of
8 groups x 8 responses x 300 characters of text). Then every node is
stopped (and killed, whatever happened). Usage, from the
repository root, as root (namespaces need it; without them, see below)::

    PYTHONPATH=. python benchmarks/swarm_scale.py [--nodes 8 16 32 64] [--transports hivemind libp2p]
        [--rounds 4] [--warmup-rounds 1] [--round-s 15] [--stagger] [--size 8000] [--fetch-per-round 8]
        [--json PATH] [--logs DIR]

Columns, each per node per measured round unless said otherwise (mean over the N nodes):

* ``recv MB`` / ``sent MB``: bytes in / out of the node's namespace interface (the veth; ``lo``
  excluded) from ``/proc/<node pid>/net/dev``, read before the first publish and at the end of
  the last measured round, divided by the rounds. Wire bytes: TCP/IP headers, ARP and
  retransmissions included. 1 MB = 10^6 bytes.
* ``CPU s``: user + system CPU seconds of the node process and all its descendants
  (``/proc/<pid>/stat`` utime+stime, plus cutime+cstime so helpers that exit inside the window
  still count), over the same window.
* ``RSS MB``: resident memory of the node's process tree at the end of the window, in MiB
  (summed over the processes, so pages a forked helper shares with its parent count twice; the
  JSON also has ``pss_mb``, which counts them once).
* ``bundles in``: distinct bundles of *other* nodes (of any round) that the node's handler
  first received inside the window, divided by the rounds; mean and min over the nodes.
  Repeated deliveries of one bundle are not counted (the JSON has them as ``duplicates``): a
  fetch counts by when it was spent, not by when its bundle was made.
* ``delivery``: ``bundles in`` (mean) / min(N - 1, K), K = ``--fetch-per-round``: the share of
  the bundles a node is meant to fetch each round. Above 1 where a transport delivers every
  bundle to every node although only K are needed.
* ``p50 s`` / ``p95 s``: delivery latency, the receiver's clock when its handler runs minus the
  sender's clock just before ``publish`` (one machine, one clock), over the first receipts
  counted in ``bundles in``.
* ``cores``: CPU seconds of all N node trees together / wall seconds of the window: the share
  of this machine's cores the whole swarm uses (``nproc`` bounds it).
* ``peers (mean, max)``: the peers each node is connected to (libp2p) or knows in its DHT
  routing table (hivemind) at the end of the window: whether a node's neighbourhood, and so
  its upkeep, stays bounded as N grows.

The JSON also has ``rejected_per_node_round``: what the transports dropped themselves and
counted against a peer (``missing_payload``: a fetch or pull that found nothing), by reason,
over the whole run (warm-up rounds included) per node per round; and ``received_by_round``:
the bundles counted in ``bundles in``, per node, by the round they were published in (the
warm-up rounds are 1 to ``--warmup-rounds``). For hivemind, ``announce_per_node_round``, over
the whole run too (the first round always traverses), from the counters the transport
reports (``Transport.counters``, its ``announce_stores``): ``announce_direct`` (stores straight at the shard's
remembered replicas), ``announce_traversal`` (stores by a DHT traversal),
``announce_direct_failed`` (direct stores that reached too few replicas and traversed in the
same round, so counted in both), their mean over the nodes and each node's (``per_node``),
and ``direct_share``: the share of the rounds announced whose direct store stood. One line
under the table gives them, in the units ``benchmarks/swarm_sim.py`` prints its own in.

Where namespaces cannot be built (not root, no ``ip``, the kernel refuses), the nodes use
127.0.0.1, the byte columns read ``n/a`` and one line says why. A transport whose node is not
ready within ``--ready-timeout`` s (or that lacks memory headroom: ``--min-free-mb``) or whose
nodes do not join within ``--join-timeout`` s is reported for that N, and its larger N skipped.
Nodes start ``--start-batch`` at a time. A line under the table says where the publishes of a
round took so long that the rounds ran longer than ``--round-s``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from natlab import LabUnavailable, SwitchLab  # noqa: E402
from relay_memory import _pss_kb, _status_kb  # noqa: E402
from swarmnode.swarm.transport.hivemind.announce import direct_share, rounds_announced  # noqa: E402
from transport_latency import percentile  # noqa: E402
from transport_node import ProcNode, descendants  # noqa: E402
from waiting import wait_until  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
SETTLE_S = 3.0
JOIN_PEERS = 3  # peers every node has before the measured rounds start


# -- /proc readers --------------------------------------------------------------------------


def parse_net_dev(text: str) -> tuple[int, int]:
    """(received, sent) bytes summed over the interfaces of a ``/proc/net/dev`` text, ``lo`` left out."""
    rx = tx = 0
    for line in text.splitlines()[2:]:
        name, sep, counters = line.partition(":")  # a long name can touch its first number
        if not sep or name.strip() == "lo":
            continue
        fields = counters.split()
        rx += int(fields[0])
        tx += int(fields[8])
    return rx, tx


def net_bytes(pid: int) -> tuple[int, int]:
    """(received, sent) bytes of the network namespace that process ``pid`` is in."""
    return parse_net_dev(Path(f"/proc/{pid}/net/dev").read_text())


def cpu_s(pid: int) -> float:
    """utime + stime + cutime + cstime of process ``pid`` in seconds; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return sum(int(f) for f in fields[11:15]) / CLK_TCK  # stat fields 14 to 17


@dataclass
class TreeUsage:
    cpu_s: float
    rss_mb: float
    pss_mb: float
    processes: int


def tree_usage(pid: int, memory: bool = True) -> TreeUsage:
    """CPU seconds (:func:`cpu_s`) and memory of ``pid`` and its live descendants together."""
    pids = [pid, *descendants(pid)]
    rss = sum(_status_kb(p, "VmRSS") for p in pids) if memory else 0
    pss = sum(_pss_kb(p) for p in pids) if memory else 0
    return TreeUsage(sum(cpu_s(p) for p in pids), rss / 1024, pss / 1024, len(pids))


def mem_available_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


# -- what the nodes reported ------------------------------------------------------------------


def deliveries(published: dict[str, dict], messages: Sequence[Sequence[dict]], rounds: int,
               fetch_per_round: int, window: tuple[float, float] = (float("-inf"), float("inf"))) -> dict[str, Any]:
    """Delivery figures from the ``published`` events (by digest, each with the publishing node's
    index as ``node``) and each node's ``message`` events: distinct external bundles first
    received inside ``window`` (wall-clock seconds), per node per round (mean, min, and each
    node's as ``received_per_node``), the delivery ratio against min(N - 1, K), and latency
    over those first receipts."""
    n = len(messages)
    per_node: list[float] = []
    duplicates = 0
    latencies: list[float] = []
    by_round: dict[int, int] = {}
    for i, received in enumerate(messages):
        first: dict[str, float] = {}
        for m in received:
            event = published.get(m["digest"])
            if event is None or event["node"] == i:
                continue
            if m["digest"] in first:
                duplicates += 1
                first[m["digest"]] = min(first[m["digest"]], m["t_recv"])
            else:
                first[m["digest"]] = m["t_recv"]
        first = {d: t for d, t in first.items() if window[0] <= t < window[1]}
        per_node.append(len(first) / rounds)
        for d in first:
            by_round[published[d].get("round", -1)] = by_round.get(published[d].get("round", -1), 0) + 1
        latencies += [t - published[d]["t_pub"] for d, t in first.items()]
    wanted = min(n - 1, fetch_per_round)
    mean = statistics.fmean(per_node) if per_node else 0.0
    return {"received_mean": mean, "received_min": min(per_node, default=0.0), "received_per_node": per_node,
            "delivery_ratio": mean / wanted if wanted else None,
            "delivery_ratio_min": min(per_node, default=0.0) / wanted if wanted else None,
            "duplicates": duplicates / rounds / max(n, 1),
            "received_by_round": {r: c / max(n, 1) for r, c in sorted(by_round.items())},
            "latency_s_p50": percentile(latencies, 50) if latencies else None,
            "latency_s_p95": percentile(latencies, 95) if latencies else None,
            "latency_s_max": max(latencies, default=None)}


ANNOUNCE_COUNTS = ("announce_direct", "announce_traversal", "announce_direct_failed")
COUNTS_TIMEOUT_S = 60.0


def announce_counts(nodes: list[ProcNode], rounds: int,
                    timeout: float = COUNTS_TIMEOUT_S) -> list[dict[str, int]] | None:
    """Each node's :data:`ANNOUNCE_COUNTS` (hivemind: how its announcements were stored, from
    the counters its transport reports, :meth:`ProcNode.counters`); None for a transport
    without them. The transport reads its DHT process's counters every tenth poll: this waits,
    up to ``timeout`` s, for every node's to account for the ``rounds`` it published, then
    takes what they say."""
    def read() -> list[dict[str, int]]:
        stores = [node.counters().get("announce_stores") or {} for node in nodes]
        return [{f"announce_{how}": n for how, n in s.items()} for s in stores]

    def complete() -> list[dict[str, int]] | None:
        counts = read()
        return counts if all(rounds_announced(c) >= rounds for c in counts) else None

    counts = read()
    if not all(counts):
        return None
    with contextlib.suppress(AssertionError):  # a publish that failed never counts: take what there is
        counts = wait_until(complete, timeout, "the announcement counts of every round", interval=1.0)
    return counts


def announce_per_round(counts: list[dict[str, int]], rounds: int) -> dict[str, Any]:
    """:func:`announce_counts` per node per round (mean over the nodes), each node's, and the
    share of the rounds stored direct (:func:`~swarmnode.swarm.transport.hivemind.announce.direct_share`)."""
    per_node = [{k: v / rounds for k, v in c.items()} for c in counts]
    mean = {k: _mean([c[k] for c in per_node]) for k in ANNOUNCE_COUNTS}
    return {**mean, "direct_share": direct_share(mean), "per_node": per_node}


def announce_line(r: dict[str, Any]) -> str:
    """One line of a run's ``announce_per_node_round``, as ``benchmarks/swarm_sim.py`` prints its counts."""
    a = r["announce_per_node_round"]
    share = "n/a" if a["direct_share"] is None else f"{a['direct_share']:.2f}"
    return (f"{r['transport']} N={r['nodes']}: announcements a node a round (warm-up rounds included): "
            + ", ".join(f"{k} {a[k]:.2f}" for k in ANNOUNCE_COUNTS) + f"; direct share {share}")


# -- one run ----------------------------------------------------------------------------------


class RunFailed(Exception):
    """This N cannot be measured here (a node not ready, no memory headroom, no join)."""


def _stderr_tail(node: ProcNode, lines: int = 5) -> str:
    if node.stderr_path is None or not node.stderr_path.exists():
        return ""
    tail = node.stderr_path.read_text(errors="replace").strip().splitlines()[-lines:]
    return ("; its stderr ends: " + " | ".join(tail)) if tail else ""


def start_swarm(nodes: list[ProcNode], transport: str, n: int, lab: SwitchLab | None, logs: Path,
                args: argparse.Namespace) -> None:
    """Start ``n`` nodes into ``nodes`` (the caller kills them all, whatever happens): node 0
    first, then the others ``--start-batch`` at a time, each batch ready before the next."""
    def spawn(i: int, bootstrap: list[str]) -> ProcNode:
        if mem_available_mb() < args.min_free_mb:
            raise RunFailed(f"only {mem_available_mb():.0f} MB of memory available before node {i} "
                            f"(--min-free-mb {args.min_free_mb})")
        node = ProcNode(transport, i, bootstrap=bootstrap,
                        listen=f"/ip4/{lab.address(i)}/tcp/0" if lab else None,
                        stderr_path=logs / f"{transport}-{n}-node{i}.err",
                        prefix=lab.exec_prefix(i) if lab else ())
        nodes.append(node)
        return node

    def ready(i: int) -> None:
        try:
            nodes[i].ready(args.ready_timeout)
        except AssertionError as exc:
            raise RunFailed(f"node {i} of {n} was not ready: {exc}{_stderr_tail(nodes[i])}") from None

    spawn(0, [])
    ready(0)
    bootstrap = [a for a in nodes[0].addresses if lab is None or f"/ip4/{lab.address(0)}/" in a][:1]
    if not bootstrap:
        raise RunFailed(f"node 0 advertised no address to bootstrap from: {nodes[0].addresses}")
    for first in range(1, n, args.start_batch):
        batch = range(first, min(n, first + args.start_batch))
        for i in batch:
            spawn(i, bootstrap)
        for i in batch:
            ready(i)


def wait_joined(nodes: list[ProcNode], timeout: float) -> None:
    """Until every node has :data:`JOIN_PEERS` peers (all the others in a smaller swarm). Not
    "node 0 sees most of the others": a transport that bounds its connections never does."""
    want = min(JOIN_PEERS, len(nodes) - 1)
    try:
        wait_until(lambda: all(len(node.peers()) >= want for node in nodes), timeout, "every node to join")
    except AssertionError:
        short = [i for i, node in enumerate(nodes) if len(node.peers()) < want]
        raise RunFailed(f"not joined after {timeout:.0f} s: nodes with fewer than {want} peers: "
                        f"{short[:10]}{'...' if len(short) > 10 else ''}") from None


def snapshot(nodes: list[ProcNode], with_net: bool, memory: bool = False) -> list[dict[str, Any]]:
    """Per node: its tree's usage and (``with_net``) its namespace's counters, with the time."""
    out = []
    for node in nodes:
        usage = tree_usage(node.proc.pid, memory)
        rx, tx = net_bytes(node.proc.pid) if with_net else (None, None)
        out.append({"t": time.monotonic(), "usage": usage, "rx": rx, "tx": tx})
    return out


def stop_all(nodes: list[ProcNode], timeout: float = 60) -> None:
    """Ask every node to stop at once, then wait for them (the caller kills what is left)."""
    for node in nodes:
        with contextlib.suppress(OSError, ValueError):
            node.send(cmd="stop")
    deadline = time.monotonic() + timeout
    for node in nodes:
        with contextlib.suppress(AssertionError):
            node.wait_event("stopped", max(0.1, deadline - time.monotonic()))


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def run_rounds(nodes: list[ProcNode], with_net: bool, args: argparse.Namespace) -> dict[str, Any]:
    """The warm-up rounds (published, not measured: a pull transport's first round spends the
    budget it starts with besides the round's own), then the measured rounds: snapshots at the
    window's ends (and its wall-clock bounds), what was published in every round (by digest,
    with the publishing node's index), and how late the last publish ended. Round r of node i
    starts ``r * round_s`` after the first, plus, with ``--stagger``, ``i / N`` of a round."""
    offsets = [i * args.round_s / len(nodes) if args.stagger else 0.0 for i in range(len(nodes))]
    t0 = time.monotonic()

    published: dict[str, dict] = {}

    def publish_round(r: int) -> None:
        for i, node in enumerate(nodes):
            time.sleep(max(0.0, t0 + r * args.round_s + offsets[i] - time.monotonic()))
            node.send(cmd="publish", round=r + 1, size=args.size)
        for i, node in enumerate(nodes):
            event = node.wait_event("published", max(60.0, args.round_s))
            published[event["digest"]] = {**event, "node": i}

    for r in range(args.warmup_rounds):
        publish_round(r)
    start = t0 + args.warmup_rounds * args.round_s
    time.sleep(max(0.0, start - time.monotonic()))
    before, window_from = snapshot(nodes, with_net), time.time()
    end = start + args.rounds * args.round_s
    for r in range(args.warmup_rounds, args.warmup_rounds + args.rounds):
        publish_round(r)
    late_s = max(0.0, time.monotonic() - end - offsets[-1])
    time.sleep(max(0.0, end - time.monotonic()))
    after, window_to = snapshot(nodes, with_net, memory=True), time.time()
    peers = [len(node.peers()) for node in nodes]
    return {"before": before, "after": after, "window": (window_from, window_to), "published": published,
            "late_s": late_s, "peers": peers}


def measure(transport: str, n: int, lab: SwitchLab | None, logs: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One transport at one N; raises RunFailed where this machine cannot hold it."""
    nodes: list[ProcNode] = []
    with_net = lab is not None
    phase = "start"
    t0 = time.monotonic()
    try:
        start_swarm(nodes, transport, n, lab, logs, args)
        startup_s = time.monotonic() - t0
        phase = "join"
        wait_joined(nodes, args.join_timeout)
        time.sleep(SETTLE_S)
        phase = "measured rounds"
        run = run_rounds(nodes, with_net, args)
        result = deliveries(run["published"], [node.messages() for node in nodes], args.rounds,
                            args.fetch_per_round, run["window"])
        rejected = Counter(e["reason"] for node in nodes for e in node.rejected())
        announced = announce_counts(nodes, args.rounds + args.warmup_rounds)
        phase = "stop"
        stop_all(nodes)
    except (AssertionError, OSError) as exc:  # a node died or stopped answering
        dead = [i for i, node in enumerate(nodes) if node.proc.poll() is not None]
        tail = _stderr_tail(nodes[dead[0]]) if dead else ""
        raise RunFailed(f"{phase}: {exc}; nodes that exited: {dead[:10] or 'none'}{tail}") from None
    finally:
        for node in nodes:
            node.kill()
    before, after = run["before"], run["after"]
    cpu = [a["usage"].cpu_s - b["usage"].cpu_s for a, b in zip(after, before)]
    window_s = _mean([a["t"] for a in after]) - _mean([b["t"] for b in before])

    def mb_per_round(key: str) -> list[float] | None:
        return [(a[key] - b[key]) / 1e6 / args.rounds for a, b in zip(after, before)] if with_net else None

    received = result.pop("received_per_node")
    per_round = {"cpu_s": [c / args.rounds for c in cpu], "recv_mb": mb_per_round("rx"), "sent_mb": mb_per_round("tx")}
    return {"transport": transport, "nodes": n, "rounds": args.rounds, "round_s": args.round_s, "stagger": args.stagger,
            "bundle_bytes": args.size, "fetch_per_round": args.fetch_per_round,
            "network": "namespaces" if with_net else "loopback", "startup_s": round(startup_s, 1),
            "publish_late_s": round(run["late_s"], 2),
            "recv_mb": _mean(per_round["recv_mb"]) if with_net else None,
            "sent_mb": _mean(per_round["sent_mb"]) if with_net else None,
            "cpu_s": _mean(per_round["cpu_s"]),
            "rss_mb": _mean([a["usage"].rss_mb for a in after]),
            "rss_mb_max": max(a["usage"].rss_mb for a in after),
            "pss_mb": _mean([a["usage"].pss_mb for a in after]),
            "processes_per_node": _mean([a["usage"].processes for a in after]),
            "cores": sum(cpu) / window_s if window_s > 0 else None,
            "peers_mean": _mean(run["peers"]), "peers_max": max(run["peers"]),
            "rejected_per_node_round": {reason: count / n / (args.rounds + args.warmup_rounds)
                                        for reason, count in sorted(rejected.items())},
            "announce_per_node_round": announced and announce_per_round(announced, args.rounds + args.warmup_rounds),
            **result, "per_node": {**per_round, "peers": run["peers"], "received": received}}


# -- the table --------------------------------------------------------------------------------

COLUMNS = ["transport", "N", "recv MB", "sent MB", "CPU s", "RSS MB", "bundles in (mean)", "bundles in (min)",
           "delivery", "p50 s", "p95 s", "cores", "peers (mean, max)"]


def table_row(r: dict[str, Any]) -> str:
    def f(value: float | None, digits: int) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    cells = [r["transport"], str(r["nodes"]), f(r["recv_mb"], 3), f(r["sent_mb"], 3), f(r["cpu_s"], 2),
             f(r["rss_mb"], 0), f(r["received_mean"], 1), f(r["received_min"], 1), f(r["delivery_ratio"], 2),
             f(r["latency_s_p50"], 2), f(r["latency_s_p95"], 2), f(r["cores"], 2),
             f"{f(r['peers_mean'], 1)}, {r['peers_max']}"]
    return "| " + " | ".join(cells) + " |"


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # so that every finally runs: nodes killed, namespaces removed


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--transports", nargs="+", default=["hivemind", "libp2p"], choices=["hivemind", "libp2p"])
    parser.add_argument("--rounds", type=int, default=4, help="measured rounds")
    parser.add_argument("--warmup-rounds", type=int, default=1, help="rounds published before the measured ones")
    parser.add_argument("--round-s", type=float, default=15.0, help="seconds between a node's publishes")
    parser.add_argument("--stagger", action="store_true",
                        help="node i publishes i / N of a round after node 0 (rounds not aligned, as in a real swarm)")
    parser.add_argument("--size", type=int, default=8000, help="approximate wire bytes of one bundle")
    parser.add_argument("--fetch-per-round", type=int, default=8, metavar="K",
                        help="bundles a node is meant to fetch a round (the delivery ratio's yardstick)")
    parser.add_argument("--start-batch", type=int, default=8, help="nodes started at once")
    parser.add_argument("--ready-timeout", type=float, default=120.0, help="seconds for a node to start")
    parser.add_argument("--join-timeout", type=float, default=180.0, help="seconds for the nodes to find peers")
    parser.add_argument("--min-free-mb", type=float, default=1500.0,
                        help="start no node while less memory than this is available")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    parser.add_argument("--logs", metavar="DIR", help="keep every node's stderr here (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or min(args.nodes) < 2:
        parser.error("need --rounds >= 1 and every --nodes >= 2")
    signal.signal(signal.SIGTERM, _raise_exit)
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    notes: list[str] = []
    lab: SwitchLab | None = SwitchLab(max(args.nodes))
    with contextlib.ExitStack() as stack:
        logs = Path(args.logs) if args.logs else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        logs.mkdir(parents=True, exist_ok=True)
        stack.callback(lab.remove)
        try:
            lab.build()
            network = f"one network namespace per node on a bridge ({lab.SUBNET}.0.0/16)"
        except LabUnavailable as exc:
            lab.remove()
            lab = None
            network = f"127.0.0.1: bytes are n/a because network namespaces are unavailable: {exc}"
        print(f"{args.rounds} rounds of {args.round_s:g} s{' (staggered)' if args.stagger else ''}, "
              f"bundles of about {args.size} bytes, "
              f"K = {args.fetch_per_round}, {os.cpu_count()} cores; network: {network}\n", flush=True)
        print("| " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * len(COLUMNS), flush=True)
        for transport in args.transports:
            for n in sorted(args.nodes):
                try:
                    r = measure(transport, n, lab, logs, args)
                except RunFailed as exc:
                    failures.append(f"{transport} N={n}: {exc}; larger N skipped")
                    break
                results.append(r)
                print(table_row(r), flush=True)
                if r["announce_per_node_round"]:
                    notes.append(announce_line(r))
                if r["publish_late_s"] > 0:
                    notes.append(f"{transport} N={n}: the last round's publishes ended {r['publish_late_s']:.1f} s "
                                 f"after the window: the rounds took longer than --round-s")
    if notes or failures:
        print("\n" + "\n".join(notes + failures), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"network": network, "results": results, "notes": notes,
                                               "failures": failures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
