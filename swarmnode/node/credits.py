"""What this node's rollouts gave the swarm, as the API, ``/metrics`` and the CLI show it.

The counting is the ledger's (:mod:`swarmnode.swarm.ledger`): groups peers trained on, by how
many peers, with signal, from signed receipts of peers established with this node. This module
only shapes its summary for people and for Prometheus.
"""

from __future__ import annotations

from swarmnode.node.families import Families


def credit_families(out: Families, summary: dict | None) -> None:
    """The credit families of ``summary`` (:meth:`Ledger.summary`); none when the node keeps no ledger."""
    if summary is None:
        return
    total = summary["total"]
    out.counter("swarmnode_credited_groups_total",
                "This node's groups that established peers say, in signed receipts, they trained on "
                "(each group once per peer), and those of them with signal under the peer's verifier.",
                [({"signal": "any"}, total["groups"]),
                 ({"signal": "yes"}, total["with_signal"])])
    out.gauge("swarmnode_credited_peers",
              "Peers whose receipts the ledger holds, all and in the last hour.",
              [({"window": "all"}, total["peers"]),
               ({"window": "hour"}, summary["last_hour"]["peers"])])
    out.counter("swarmnode_receipts_refused_total",
                "Receipts addressed to this node refused, by reason.",
                [({"reason": r}, n) for r, n in sorted(summary["refused"].items())]
                or [({"reason": ""}, 0)])
    out.gauge("swarmnode_receipts_pending",
              "Receipts from newcomers waiting for their standing.",
              [({}, summary["pending"])])


def credit_lines(summary: dict | None, limit: int = 20) -> list[str]:
    """The human form of ``/v1/credits``: totals, the last hour and day, then the peers."""
    if summary is None:
        return ["this node keeps no ledger (solo: nobody trains on its rollouts)"]

    def row(label: str, t: dict) -> str:
        return f"{label:<10} {t['groups']:>6} groups  {t['with_signal']:>6} with signal  " \
               f"{t['peers']:>4} peers  {t['receipts']:>6} receipts"

    lines = [row("last hour", summary["last_hour"]), row("last day", summary["last_day"]),
             row("all kept", summary["total"])]
    if summary["pending"] or summary["refused"]:
        refused = ", ".join(f"{r} {n}" for r, n in sorted(summary["refused"].items())) or "none"
        lines.append(f"waiting    {summary['pending']} from newcomers; refused: {refused}")
    if not summary["by_peer"]:
        return lines + ["", "no peer has credited this node's rollouts yet"]
    lines += ["", f"{'PEER':<32} {'GROUPS':>6} {'SIGNAL':>6} {'RECEIPTS':>8}"]
    lines += [f"{p['name']:<32} {p['groups']:>6} {p['with_signal']:>6} {p['receipts']:>8}"
              for p in summary["by_peer"][:limit]]
    if len(summary["by_peer"]) > limit:
        lines.append(f"... and {len(summary['by_peer']) - limit} more peers (--json lists them all)")
    return lines
