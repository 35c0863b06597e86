"""The node's and the relay's metrics in the Prometheus text format (version 0.0.4), served
at ``/metrics`` by :mod:`swarmnode.node.api`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from swarmnode.node.credits import credit_families
from swarmnode.node.gainmetrics import gain_families
from swarmnode.node.peermetrics import left_out_families
from swarmnode.node.state import NodeState


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value) if isinstance(value, float) else str(value)


class _Exposition:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str,
               samples: list[tuple[str, dict[str, str], Any]]) -> None:
        help_text = help_text.replace("\\", "\\\\").replace("\n", "\\n")
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for sample_name, labels, value in samples:
            label_text = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels.items())
            self.lines.append(f"{sample_name}{{{label_text}}} {_number(value)}" if labels
                              else f"{sample_name} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def prometheus_text(state: NodeState, peers: int, transport: Mapping[str, int] | None = None,
                    refusals: Mapping[str, int] | None = None, peer_rows: list[dict] | None = None,
                    credits: dict | None = None) -> str:
    """The node's metrics in the Prometheus text format (version 0.0.4): ``transport`` and
    ``refusals`` as :meth:`NodeControl.transport_stats` and :meth:`NodeControl.refusals` give
    them (their families only when there are some); ``peer_rows`` as :func:`with_drawn` gives
    them (see :func:`swarmnode.node.gainmetrics.gain_families`); ``credits`` as
    :meth:`NodeControl.credits` gives them."""
    snap = state.snapshot()
    finished = snap["rounds_finished"]
    out = _Exposition()
    out.family("swarmnode_rounds_total", "counter", "Rounds finished since the node started.",
               [("swarmnode_rounds_total", {}, finished)])
    out.family("swarmnode_round", "gauge", "The round the node is in.", [("swarmnode_round", {}, snap["round"])])
    out.family("swarmnode_reward_last", "gauge", "Mean reward of the node's own completions in the last round.",
               [("swarmnode_reward_last", {}, snap["last_reward"])])
    out.family("swarmnode_reward_mean", "gauge", "Mean reward over the rounds finished since the node started.",
               [("swarmnode_reward_mean", {}, snap["reward_sum"] / finished if finished else None)])
    out.family("swarmnode_tokens_generated_total", "counter", "Completion tokens generated since the node started.",
               [("swarmnode_tokens_generated_total", {}, snap["tokens_generated"])])
    bundles = snap["bundles"]
    out.family("swarmnode_bundles_total", "counter",
               "Rollout bundles received from peers, by outcome (and reason, for rejected ones).",
               [("swarmnode_bundles_total", {"outcome": outcome, "reason": reason}, count)
                for (outcome, reason), count in sorted(bundles.items())]
               or [("swarmnode_bundles_total", {"outcome": "accepted", "reason": ""}, 0)])
    out.family("swarmnode_peers", "gauge", "Peers connected now.", [("swarmnode_peers", {}, peers)])
    out.family("swarmnode_paused", "gauge", "1 while the node is paused (starts no new round).",
               [("swarmnode_paused", {}, int(snap["paused"]))])
    threads = snap["threads"]
    out.family("swarmnode_threads", "gauge", "Torch intra-op threads the node uses now (see /v1/status for why).",
               [("swarmnode_threads", {}, threads.get("count"))])
    out.family("swarmnode_signal_rate", "gauge",
               "Share of the last round's groups (local and external) with non-zero advantage.",
               [("swarmnode_signal_rate", {}, snap["signal_rate"])])
    out.family("swarmnode_level", "gauge", "Difficulty level of each task family (the next round draws at it).",
               [("swarmnode_level", {"family": f}, lv) for f, lv in sorted(snap["levels"].items())])
    out.family("swarmnode_family_dormant", "gauge",
               "1 for a task family drawn rarely because its last groups at an end of its ladder had no signal.",
               [("swarmnode_family_dormant", {"family": f}, int(f in snap["dormant"])) for f in sorted(snap["levels"])])
    yardstick = snap["yardstick"]
    out.family("swarmnode_yardstick_score", "gauge",
               "Greedy score on the fixed held-out yardstick, latest record, overall and by family.",
               [] if yardstick is None else
               [("swarmnode_yardstick_score", {"family": ""}, yardstick["score"])]
               + [("swarmnode_yardstick_score", {"family": f}, v) for f, v in yardstick["by_family"].items()])
    out.family("swarmnode_yardstick_round", "gauge", "Rounds trained when the latest yardstick record was taken.",
               [("swarmnode_yardstick_round", {}, None if yardstick is None else yardstick["round"])])
    out.family("swarmnode_round_seconds", "summary", "Wall-clock seconds per finished round.",
               [("swarmnode_round_seconds_sum", {}, float(snap["round_seconds_sum"])),
                ("swarmnode_round_seconds_count", {}, finished)])
    left_out_families(out, peer_rows or [])
    _transport_families(out, transport, refusals)
    gain_families(out, snap["gain"], snap["yardstick_trend"], peer_rows or [])
    credit_families(out, credits)
    return out.text()


def _transport_families(out: _Exposition, transport: Mapping[str, int] | None,
                        refusals: Mapping[str, int] | None) -> None:
    """The transport's families, each only when there is something to show: its events
    (:meth:`NodeControl.transport_stats`) and what it refused, evicted and holds
    (:meth:`NodeControl.refusals`)."""
    if transport:
        out.family("swarmnode_transport_events_total", "counter",
                   "Transport events since start: bundles published, publish errors, messages delivered to the "
                   "node, duplicates dropped, handler errors, join attempts.",
                   [("swarmnode_transport_events_total", {"event": name}, count)
                    for name, count in sorted(transport.items())])
    if not refusals:
        return
    refused = sorted((k.removeprefix("refused_"), n) for k, n in refusals.items() if k.startswith("refused_"))
    out.family("swarmnode_transport_refused_total", "counter",
               "Records the transport itself refused (hivemind: its DHT's validator and storage; libp2p: "
               "pushes, holds and announcements it dropped), by reason.",
               [("swarmnode_transport_refused_total", {"reason": r}, n) for r, n in refused]
               or [("swarmnode_transport_refused_total", {"reason": ""}, 0)])
    out.family("swarmnode_transport_evicted_total", "counter",
               "Records the transport's stores evicted to stay within their bounds.",
               [("swarmnode_transport_evicted_total", {}, refusals.get("evicted", 0))])
    out.family("swarmnode_transport_stored_bytes", "gauge",
               "Bytes of peers' records the transport holds now: by store (stored, cached, held) and by the "
               "signers' standing with it (newcomer, established; hivemind's announcements apart: announce_*).",
               [("swarmnode_transport_stored_bytes", {"store": store}, refusals[f"{store}_bytes"])
                for store in ("stored", "cached", "held", "newcomer", "established", "announce_newcomer",
                              "announce_established") if f"{store}_bytes" in refusals])
    stores = [(how, refusals[f"announce_{how}"]) for how in ("direct", "traversal", "direct_failed")
              if f"announce_{how}" in refusals]
    if stores:
        out.family("swarmnode_transport_announce_stores_total", "counter",
                   "This node's announcements stored straight at its shard's remembered replicas (direct), by a "
                   "DHT traversal, and direct stores that reached too few and traversed in the same round "
                   "(direct_failed, counted in both).",
                   [("swarmnode_transport_announce_stores_total", {"how": how}, n) for how, n in stores])
    out.family("swarmnode_transport_signers", "gauge",
               "Signers whose records the transport holds now, by standing with it (announcements: announce_*).",
               [("swarmnode_transport_signers", {"standing": standing}, refusals[plural])
                for standing, plural in (("newcomer", "newcomers"), ("established", "established"),
                                         ("announce_newcomer", "announce_newcomers"),
                                         ("announce_established", "announce_established"))
                if plural in refusals])


def relay_prometheus_text(peers: int, transport: Mapping[str, int], refusals: Mapping[str, int],
                          holds: Mapping[str, int]) -> str:
    """A relay's metrics in the Prometheus text format: its peers, its transport's families
    (see :func:`prometheus_text`) and ``holds``, the bundles private peers left with it
    (libp2p) by outcome (``held``, ``dropped``)."""
    out = _Exposition()
    out.family("swarmnode_peers", "gauge", "Peers connected now.", [("swarmnode_peers", {}, peers)])
    _transport_families(out, transport, refusals)
    out.family("swarmnode_relay_holds_total", "counter",
               "Bundles private peers pushed to this relay to hold, by outcome (libp2p).",
               [("swarmnode_relay_holds_total", {"outcome": outcome}, n) for outcome, n in sorted(holds.items())])
    return out.text()

