"""The swarm at 1,000 and 10,000 nodes, rehearsed: the transports' own rules in a simulated network.

One process, virtual time (``swarmsim``): every node runs the decision code of
the real transport (libp2p protocol 3, hivemind layout 2) over a model of the network (latency,
bandwidth, NAT, py-libp2p's and p2pd's connection limits, hivemind's DHT), with churn and a
mix of hardware. Imports neither hivemind nor py-libp2p. Usage, from the repository root::

    PYTHONPATH=. python benchmarks/swarm_sim.py [--nodes 1000 10000] [--transports hivemind libp2p]
        [--nat 0.7] [--churn 0.2] [--relays R] [--relay-cap C] [--warmup-s 900] [--measure-s 1200]
        [--round-s S] [--slots-held] [--no-standing] [--no-asks-by-name] [--refresh-rounds N] [--seed 0]
        [--json PATH] [--progress]
    PYTHONPATH=. python benchmarks/swarm_sim.py --machine [--nodes 8 32 64] [--warmup-rounds 1] [--rounds 4]

``--machine`` simulates the swarm ``benchmarks/swarm_scale.py`` runs on one machine: N public
nodes on one bridge joining through node 0, no churn, rounds of 15 s all at once,
``--warmup-rounds`` warm-up rounds (1) and ``--rounds`` measured ones (4), bundles of 8,000
bytes, no standing (its nodes have none).

Columns, per node per round of its own (mean over the nodes that published in the window):
``recv KB`` / ``sent KB`` (wire bytes), ``msgs`` (messages sent and received), ``sigs``
(signatures checked: announcements and bundles), ``bundles`` (distinct bundles of others
first received in the window; mean, 5th percentile and min over the nodes), ``fresh`` (share
of them received within the node's freshness window of being made), ``p50`` / ``p95``
(delivery latency, publish to receipt, in seconds and as a share of the receiver's round),
``late`` (nodes whose own p95 is past their round), and the busiest host (bytes a second in
and out, and what it is). A configuration that cannot hold ends in one line naming the
constraint, exit status 2.

Under the table, per run: a delivery's steps, its bytes by kind, and its events per node per
round of its own in the window (``counts_per_round`` in the JSON). For hivemind these
include how announcements were stored, named as the real transport reports them
(``benchmarks/swarm_scale.py``'s ``announce_per_node_round``): ``announce_direct``,
``announce_traversal``, ``announce_direct_failed`` (a direct store that reached too few
replicas, so that the round traversed too), and the share of rounds whose direct store stood;
and what reads lacked: ``read_news`` (announcements stored at any server since a read's bound,
its last read of the shard less 30 s), ``read_missed`` (those the copies it read lacked though
a server up held them: it stopped at a copy that missed them) and ``read_missed_asleep``
(held only by servers asleep), with the two as shares of the news.
swarm_scale counts its warm-up rounds too: ``--machine --warmup-rounds 0 --rounds R`` is its
``--warmup-rounds W --rounds M`` with R = W + M.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from swarmnode.swarm.transport.hivemind.announce import REFRESH_ROUNDS, direct_share
from swarmnode.swarm.transport.joining import JOIN_DIALS
from swarmsim.hivemind_node import HivemindCosts
from swarmsim.libp2p_node import Libp2pCosts
from swarmsim.run import run
from swarmsim.scenario import Hardware, Scenario, ScenarioError

MACHINE = dict(relays=0, nat_share=0.0, churn_per_hour=0.0, hardware=(Hardware("benchmark", 1.0, 15.0),),
               round_jitter=0.0, aligned=True, regions_s=((0.0002,),), access_s=(0.0001, 0.0001),
               home_up_mbit=(1000.0, 1000.0), home_down_mbit=(1000.0, 1000.0), join_s=20.0,
               extra={"standing": False})

COLUMNS = ["transport", "N", "relays", "recv KB", "sent KB", "msgs", "sigs", "bundles (mean, p5, min)", "fresh",
           "p50 s", "p95 s", "p50, p95 of round", "late", "busiest (KB/s, what)", "wall s"]


def machine_scenario(transport: str, nodes: int, seed: int, round_s: float = 15.0, rounds: int = 4,
                     warmup_rounds: int = 1) -> Scenario:
    """``benchmarks/swarm_scale.py``'s swarm: ``warmup_rounds`` unmeasured rounds after the
    join (0: the window starts with the first round), then ``rounds`` measured ones."""
    machine = {**MACHINE, "hardware": (Hardware("benchmark", 1.0, round_s),)}
    return Scenario(transport=transport, nodes=nodes, seed=seed,
                    warmup_s=MACHINE["join_s"] + warmup_rounds * round_s,
                    measure_s=rounds * round_s, **machine)


def breakdown(r: dict[str, Any]) -> list[str]:
    """Where a run's deliveries spent their time (each step's mean, p50 and p95 in seconds) and
    what its bytes and events were, per node per round (bytes: each message once, so a node's
    received plus sent are twice their sum); nothing for a run that measured neither."""
    head = f"{r['transport']}, {r['nodes']} nodes:"
    lines = []
    if r.get("steps_s"):
        lines.append(f"{head} a delivery's steps, s (mean, p50, p95): " + "; ".join(
            f"{name} {v['mean']:.1f}, {v['p50']:.1f}, {v['p95']:.1f}" for name, v in r["steps_s"].items()))
    if r.get("bytes_by_kind"):
        lines.append(f"{head} KB a node a round by kind: " + ", ".join(
            f"{kind} {v / 1e3:.1f}" for kind, v in r["bytes_by_kind"].items()))
    counts = r.get("counts_per_round")
    if counts:
        share, news = direct_share(counts), counts.get("read_news")
        lines.append(f"{head} a node a round: " + ", ".join(f"{name} {v:.2f}" for name, v in counts.items())
                     + ("" if share is None else f"; announcements' direct share {share:.2f}")
                     + ("" if not news else f"; reads lacked {counts.get('read_missed', 0) / news:.2%} of the news"
                        f" held by servers up, {counts.get('read_missed_asleep', 0) / news:.2%} held only asleep"))
    return lines


def relays_for(transport: str, nodes: int, relay_inbound: int | None = None) -> int:
    """Enough relays for every node's bootstrap connections with a quarter to spare, and at least 4."""
    s = Scenario(transport=transport)
    cap = (s if relay_inbound is None else replace(s, relay_inbound=relay_inbound)).relay_cap()
    return max(4, math.ceil(nodes * JOIN_DIALS / max(cap, 1) * 1.25))  # a cap below 1 is refused by Scenario.check


def table_row(r: dict[str, Any]) -> str:
    def f(value: float | None, digits: int, scale: float = 1.0) -> str:
        return "n/a" if value is None else f"{value / scale:.{digits}f}"

    cells = [r["transport"], str(r["nodes"]), str(r["relays"]), f(r["rx_bytes"], 1, 1e3), f(r["tx_bytes"], 1, 1e3),
             f(r["messages"], 0), f(r["signatures"], 0),
             f"{f(r['bundles_mean'], 1)}, {f(r['bundles_p5'], 1)}, {f(r['bundles_min'], 1)}", f(r["fresh_share"], 2),
             f(r["latency_p50_s"], 1), f(r["latency_p95_s"], 1),
             f"{f(r['latency_p50_round'], 2)}, {f(r['latency_p95_round'], 2)}", str(r["nodes_p95_past_round"]),
             f"{f(r['busiest_bytes_per_s'], 0, 1e3)}, {r['busiest_bytes_role']}", f(r["wall_s"], 0)]
    return "| " + " | ".join(cells) + " |"


# The overheads fitted per transport (the rest of each cost model is the protocol's own sizes).
FITTED = {"libp2p": ("stream", "upkeep_per_connection_s"), "hivemind": ("rpc", "upkeep_s")}


def costs_with(transport: str, values: dict[str, float]) -> dict[str, Any]:
    """run()'s cost keyword for ``transport`` with ``values`` in place of its defaults."""
    if transport == "libp2p":
        return {"libp2p_costs": replace(Libp2pCosts(), **values)}
    return {"hivemind_costs": replace(HivemindCosts(), **values)}


def fit(directory: Path, transports: Sequence[str], fit_nodes: int, seed: int) -> None:
    """Fit each transport's overheads (:data:`FITTED`) to the bytes ``benchmarks/swarm_scale.py``
    measured in its runs of at most ``fit_nodes`` nodes (its JSON files in ``directory``, any
    round length), by least squares over received and sent bytes per node per round: the
    simulated bytes are linear in them. Prints the fitted values, then the simulated against the
    measured figures of every run in ``directory``."""
    measured = _measured(directory)
    for transport in transports:
        names = FITTED[transport]
        rows, targets = [], []
        for m in measured:
            if m["transport"] != transport or m["nodes"] > fit_nodes:
                continue
            s = machine_scenario(transport, m["nodes"], seed, m["round_s"], m["rounds"])
            zero = {name: 0 for name in names}
            base = run(s, **costs_with(transport, zero))
            unit = [run(s, **costs_with(transport, {**zero, name: 1})) for name in names]
            for key, target in (("rx_bytes", m["recv_mb"] * 1e6), ("tx_bytes", m["sent_mb"] * 1e6)):
                rows.append([u[key] - base[key] for u in unit])
                targets.append(target - base[key])
        if not rows:
            raise SystemExit(f"swarm_sim: no {transport} run of at most {fit_nodes} nodes in {directory}")
        values = dict(zip(names, _least_squares(rows, targets)))
        print(f"{transport}: " + ", ".join(f"{k} = {v:.1f}" for k, v in values.items()))
        for m in measured:
            if m["transport"] == transport:
                r = run(machine_scenario(transport, m["nodes"], seed, m["round_s"], m["rounds"]),
                        **costs_with(transport, values))
                print(f"  N={m['nodes']}, rounds of {m['round_s']:g} s: recv {r['rx_bytes'] / 1e3:.1f} KB "
                      f"simulated, {m['recv_mb'] * 1e3:.1f} measured ({r['rx_bytes'] / (m['recv_mb'] * 1e6) - 1:+.0%})")


def _measured(directory: Path) -> list[dict[str, Any]]:
    """Every result of the swarm_scale.py JSON files in ``directory``, fewest nodes first."""
    out = [r for path in directory.glob("*.json") for r in json.loads(path.read_text())["results"]]
    return sorted(out, key=lambda r: (r["transport"], r["nodes"], r["round_s"]))


def _least_squares(rows: list[list[float]], targets: list[float]) -> list[float]:
    """x minimising |A x - b| for a few unknowns (normal equations, Gaussian elimination)."""
    k = len(rows[0])
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    atb = [sum(r[i] * t for r, t in zip(rows, targets)) for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda i: abs(ata[i][col]))
        ata[col], ata[pivot] = ata[pivot], ata[col]
        atb[col], atb[pivot] = atb[pivot], atb[col]
        for i in range(k):
            if i != col and ata[col][col]:
                f = ata[i][col] / ata[col][col]
                ata[i] = [a - f * b for a, b in zip(ata[i], ata[col])]
                atb[i] -= f * atb[col]
    return [atb[i] / ata[i][i] if ata[i][i] else 0.0 for i in range(k)]


def _progress(s: Scenario) -> Callable[[float, float], None]:
    def say(now: float, end: float) -> None:
        print(f"swarm_sim: {s.transport}, {s.nodes} nodes: {now:.0f} of {end:.0f} simulated s after "
              f"{time.process_time():.0f} CPU-s", file=sys.stderr, flush=True)

    return say


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=None)
    parser.add_argument("--transports", nargs="+", default=["hivemind", "libp2p"], choices=["hivemind", "libp2p"])
    parser.add_argument("--machine", action="store_true", help="benchmarks/swarm_scale.py's swarm (see above)")
    parser.add_argument("--nat", type=float, default=0.7, help="share of the nodes behind NAT")
    parser.add_argument("--churn", type=float, default=0.2, help="share of the nodes that leave in an hour")
    parser.add_argument("--relays", type=int, default=None, help="relays (default: enough for every node, at least 4)")
    parser.add_argument("--rounds", type=int, default=4, help="with --machine: measured rounds")
    parser.add_argument("--warmup-rounds", type=int, default=1,
                        help="with --machine: rounds before the measured ones (0: measure from the first)")
    parser.add_argument("--warmup-s", type=float, default=900.0)
    parser.add_argument("--measure-s", type=float, default=1200.0)
    parser.add_argument("--relay-cap", type=int, default=None, metavar="C",
                        help="libp2p: inbound connections a host accepts (default: py-libp2p's 250)")
    parser.add_argument("--round-s", type=float, default=None, metavar="S",
                        help="every node's rounds last S seconds (default: the hardware mix, 20 s to 300 s)")
    parser.add_argument("--slots-held", action="store_true",
                        help="libp2p: a host's inbound slot stays taken until the host stops, as py-libp2p 0.8.1 "
                             "holds it (default: free again when its connection closes)")
    parser.add_argument("--no-standing", action="store_true",
                        help="nodes without a standing: a transport then counts as established the peers whose "
                             "bundles arrived and those connected (default: Standing, 3 rounds of probation)")
    parser.add_argument("--no-asks-by-name", action="store_true",
                        help="libp2p: nodes that do not ask by name (/swarmnode/latest/3.0.0), as older releases; "
                             "they still answer")
    parser.add_argument("--refresh-rounds", type=int, metavar="N",
                        help="hivemind: a node traverses to store its announcement one round in N at least "
                             f"(default: the transport's, {REFRESH_ROUNDS}; 1: every round)")
    parser.add_argument("--fetch-per-round", type=int, default=8, metavar="K")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    parser.add_argument("--progress", action="store_true",
                        help="say on stderr, every simulated minute, how far a run got and its CPU time so far")
    parser.add_argument("--fit", metavar="DIR", type=Path,
                        help="fit the cost models' overheads to swarm_scale.py's JSON files in DIR (see fit())")
    args = parser.parse_args(argv)
    if args.refresh_rounds is not None and args.refresh_rounds < 1:
        parser.error("--refresh-rounds: at least 1 (1: traverse every round)")
    if args.fit:
        fit(args.fit, args.transports, max(args.nodes or [4]), args.seed)
        return 0
    sizes = args.nodes or ([8, 32, 64] if args.machine else [1000, 10000])
    scenarios = []
    for transport in args.transports:
        for n in sizes:
            if args.machine:
                s = machine_scenario(transport, n, args.seed, rounds=args.rounds, warmup_rounds=args.warmup_rounds)
            else:
                s = Scenario(transport=transport, nodes=n, nat_share=args.nat, churn_per_hour=args.churn,
                             relays=relays_for(transport, n, args.relay_cap) if args.relays is None else args.relays,
                             warmup_s=args.warmup_s, measure_s=args.measure_s, seed=args.seed)
            s = replace(s, fetch_per_round=args.fetch_per_round)
            if args.relay_cap is not None:
                s = replace(s, relay_inbound=args.relay_cap)
            if args.round_s is not None and not args.machine:
                s = replace(s, hardware=(Hardware("one class", 1.0, args.round_s),))
            if args.slots_held:
                s = replace(s, inbound_held=True)
            if args.no_standing:
                s = replace(s, extra={**s.extra, "standing": False})
            if args.no_asks_by_name:
                s = replace(s, extra={**s.extra, "asks_by_name": False})
            if args.refresh_rounds is not None:
                s = replace(s, extra={**s.extra, "refresh_rounds": args.refresh_rounds})
            scenarios.append(s)
    try:
        for s in scenarios:
            s.check()
    except ScenarioError as exc:
        print(f"swarm_sim: {exc}", file=sys.stderr)
        return 2
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS), flush=True)
    results = []
    for s in scenarios:
        r = run(s, progress=_progress(s) if args.progress else None)
        results.append(r)
        print(table_row(r), flush=True)
    for r in results:
        for line in breakdown(r):
            print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
