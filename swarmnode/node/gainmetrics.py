"""What the swarm gives this node (:mod:`swarmnode.gain`) in ``/v1/peers`` and ``/metrics``: each
peer's groups drawn into the updates beside its row of the peer table, and the metric families
of the signal shares, rewards, peers and yardstick trend.

The per-peer families name at most :data:`MAX_EXPORTED_PEERS` peers, so the label set stays
bounded however large the swarm.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swarmnode.node.families import Families

# Peers /metrics names one by one (the most drawn from); the rest are summed as peer "other", so
# the label set stays bounded however large the swarm.
MAX_EXPORTED_PEERS = 16
OTHER_PEERS = "other"
_REWARD_SOURCES = (("own", "own_reward"), ("peers", "peer_reward"))


def with_drawn(rows: list[dict], gain: Mapping[str, Any]) -> list[dict]:
    """The peer table's rows with ``drawn`` and ``drawn_recent``: the peer's groups that entered
    this node's updates over its history and over the recent window (``gain``: the status's)."""
    total, recent = gain["total"]["drawn_by_peer"], gain["recent"]["drawn_by_peer"]
    return [{**row, "drawn": total.get(row["peer_id"], 0), "drawn_recent": recent.get(row["peer_id"], 0)}
            for row in rows]


def _exported_peers(rows: list[dict]) -> list[tuple[dict[str, str], dict]]:
    """``(labels, row)`` of the peers /metrics names, then one summed row for the rest."""
    ranked = sorted(rows, key=lambda r: (-r.get("drawn", 0), -r.get("groups", 0), r["peer_id"]))
    named = [({"peer": r["peer_id"], "name": r.get("name") or ""}, r) for r in ranked[:MAX_EXPORTED_PEERS]]
    rest = ranked[MAX_EXPORTED_PEERS:]
    if rest:
        dropped: dict[str, int] = {}
        for r in rest:
            for reason, n in (r.get("groups_dropped") or {}).items():
                dropped[reason] = dropped.get(reason, 0) + n
        kept = sum(r.get("groups", 0) for r in rest)
        reward = sum(r["reward_here"] * r["groups"] for r in rest if r.get("reward_here") is not None)
        named.append(({"peer": OTHER_PEERS, "name": OTHER_PEERS}, {
            "drawn": sum(r.get("drawn", 0) for r in rest), "groups": kept,
            "groups_with_signal": sum(r.get("groups_with_signal", 0) for r in rest),
            "reward_here": reward / kept if kept else None, "groups_dropped": dropped}))
    return named


def gain_families(out: Families, gain: Mapping[str, Any], trend: Mapping[str, Any],
                   peer_rows: list[dict]) -> None:
    """What the swarm gives: signal shares, rewards own against peers', each peer's groups, the
    yardstick against the untrained score (NaN where there is no data yet)."""
    total = gain["total"]
    out.counter("swarmnode_update_groups_total",
                "Groups with signal that entered this node's updates over its history, by source (local, "
                "external) and task family.",
                [({"source": source, "family": f}, fig[source])
                 for f, fig in sorted(total["families"].items()) for source in ("local", "external")])
    windows = (("recent", gain["recent"]), ("total", total))
    out.gauge("swarmnode_external_signal_share",
              f"Share of the groups with signal in the updates that came from peers, over the last "
              f"{gain['window']} rounds (recent) and the node's history (total); family \"\" is all.",
              [({"window": w, "family": ""}, fig["external_share"])
               for w, fig in windows]
              + [({"window": w, "family": f}, ff["external_share"])
                 for w, fig in windows for f, ff in sorted(fig["families"].items())])
    out.gauge("swarmnode_family_reward",
              "Mean reward under this node's verifier of its own completions (own) and of peers' groups "
              "(peers), by window and task family; family \"\" is all.",
              [({"source": src, "window": w, "family": ""}, fig[key])
               for w, fig in windows for src, key in _REWARD_SOURCES]
              + [({"source": src, "window": w, "family": f}, ff[key])
                 for w, fig in windows for f, ff in sorted(fig["families"].items()) for src, key in _REWARD_SOURCES])
    peers = _exported_peers(peer_rows)
    out.counter("swarmnode_peer_groups_total",
                f"Each peer's groups: kept after re-scoring (since start), with signal among them, drawn into "
                f"updates (over the node's history); the first {MAX_EXPORTED_PEERS} peers by groups drawn, the "
                f"rest summed as peer \"{OTHER_PEERS}\".",
                [({**labels, "kind": kind}, row.get(key, 0))
                 for labels, row in peers
                 for kind, key in (("kept", "groups"), ("with_signal", "groups_with_signal"), ("drawn", "drawn"))])
    out.counter("swarmnode_peer_groups_dropped_total",
                "Each peer's groups dropped on arrival (not drawn), by reason; peers as in "
                "swarmnode_peer_groups_total.",
                [({**labels, "reason": reason}, n)
                 for labels, row in peers for reason, n in sorted((row.get("groups_dropped") or {}).items())])
    out.gauge("swarmnode_peer_reward_here",
              "Mean reward of each peer's kept groups under this node's verifier; peers as in "
              "swarmnode_peer_groups_total.",
              [(labels, row.get("reward_here")) for labels, row in peers])
    out.gauge("swarmnode_yardstick_untrained",
              "The yardstick's score before any training.",
              [({}, trend["untrained"])])
    out.gauge("swarmnode_yardstick_change",
              "The latest yardstick score minus the untrained one (NaN until both exist).",
              [({}, trend["change"])])
