"""The node's and the relay's ``/metrics`` families, made from their state at each scrape
(:class:`~swarmnode.node.families.Families`); :mod:`swarmnode.node.api` serves them from a
registry of its own in the Prometheus text format (version 0.0.4)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.core import Metric

from swarmnode.node.credits import credit_families
from swarmnode.node.families import Families
from swarmnode.node.gainmetrics import gain_families
from swarmnode.node.peermetrics import left_out_families
from swarmnode.node.state import NodeState
from swarmnode.swarm.transport.counters import RoomGauges, TransportCounters


def node_families(state: NodeState, peers: int, transport: Mapping[str, int] | None = None,
                  counters: TransportCounters | None = None, peer_rows: list[dict] | None = None,
                  credits: dict | None = None) -> list[Metric]:
    """The node's families: ``transport`` and ``counters`` as :meth:`NodeControl.transport_stats`
    and :meth:`NodeControl.counters` give them (their families only when there are some);
    ``peer_rows`` as :func:`with_drawn` gives them (see
    :func:`swarmnode.node.gainmetrics.gain_families`); ``credits`` as :meth:`NodeControl.credits`
    gives them."""
    snap = state.snapshot()
    finished = snap["rounds_finished"]
    out = Families()
    out.counter("swarmnode_rounds_total", "Rounds finished since the node started.", [({}, finished)])
    out.gauge("swarmnode_round", "The round the node is in.", [({}, snap["round"])])
    out.gauge("swarmnode_reward_last", "Mean reward of the node's own completions in the last round.",
              [({}, snap["last_reward"])])
    out.gauge("swarmnode_reward_mean", "Mean reward over the rounds finished since the node started.",
              [({}, snap["reward_sum"] / finished if finished else None)])
    out.counter("swarmnode_tokens_generated_total", "Completion tokens generated since the node started.",
                [({}, snap["tokens_generated"])])
    out.counter("swarmnode_bundles_total",
                "Rollout bundles received from peers, by outcome (and reason, for rejected ones).",
                [({"outcome": outcome, "reason": reason}, count)
                 for (outcome, reason), count in sorted(snap["bundles"].items())]
                or [({"outcome": "accepted", "reason": ""}, 0)])
    out.gauge("swarmnode_peers", "Peers connected now.", [({}, peers)])
    out.gauge("swarmnode_paused", "1 while the node is paused (starts no new round).", [({}, int(snap["paused"]))])
    out.gauge("swarmnode_threads", "Torch intra-op threads the node uses now (see /v1/status for why).",
              [({}, snap["threads"].get("count"))])
    out.gauge("swarmnode_signal_rate", "Share of the last round's groups (local and external) with non-zero advantage.",
              [({}, snap["signal_rate"])])
    out.gauge("swarmnode_level", "Difficulty level of each task family (the next round draws at it).",
              [({"family": f}, lv) for f, lv in sorted(snap["levels"].items())])
    out.gauge("swarmnode_family_dormant",
              "1 for a task family drawn rarely because its last groups at an end of its ladder had no signal.",
              [({"family": f}, int(f in snap["dormant"])) for f in sorted(snap["levels"])])
    yardstick = snap["yardstick"]
    out.gauge("swarmnode_yardstick_score",
              "Greedy score on the fixed held-out yardstick, latest record, overall and by family.",
              [] if yardstick is None else
              [({"family": ""}, yardstick["score"])] + [({"family": f}, v) for f, v in yardstick["by_family"].items()])
    out.gauge("swarmnode_yardstick_round", "Rounds trained when the latest yardstick record was taken.",
              [({}, None if yardstick is None else yardstick["round"])])
    out.summary("swarmnode_round_seconds", "Wall-clock seconds per finished round.",
                count=finished, total=float(snap["round_seconds_sum"]))
    left_out_families(out, peer_rows or [])
    _transport_families(out, transport, counters)
    gain_families(out, snap["gain"], snap["yardstick_trend"], peer_rows or [])
    credit_families(out, credits)
    return out.metrics


def _by_standing(room: RoomGauges | None, prefix: str = "") -> tuple[list, list]:
    """A room's bytes and signers, each as (labels, value) samples by standing (``prefix``
    before the standing: ``announce_`` for hivemind's announcements)."""
    if room is None:
        return [], []
    return ([({"store": f"{prefix}newcomer"}, room.newcomer_bytes),
             ({"store": f"{prefix}established"}, room.established_bytes)],
            [({"standing": f"{prefix}newcomer"}, room.newcomers),
             ({"standing": f"{prefix}established"}, room.established)])


def _transport_families(out: Families, transport: Mapping[str, int] | None,
                        counters: TransportCounters | None) -> None:
    """The transport's families, each only when there is something to show: its events
    (:meth:`NodeControl.transport_stats`) and what it refused, evicted and holds
    (:meth:`NodeControl.counters`)."""
    if transport:
        out.counter("swarmnode_transport_events_total",
                    "Transport events since start: bundles published, publish errors, messages delivered to the "
                    "node, duplicates dropped, handler errors, join attempts.",
                    [({"event": name}, count) for name, count in sorted(transport.items())])
    if counters is None:
        return
    out.counter("swarmnode_transport_refused_total",
                "Records the transport itself refused (hivemind: its DHT's validator and storage; libp2p: "
                "pushes, holds and announcements it dropped), by reason.",
                [({"reason": r}, n) for r, n in sorted(counters.refused.items())] or [({"reason": ""}, 0)])
    out.counter("swarmnode_transport_evicted_total",
                "Records the transport's stores evicted to stay within their bounds.", [({}, counters.evicted)])
    room_bytes, room_signers = _by_standing(counters.room)
    announce_bytes, announce_signers = _by_standing(counters.announce_room, "announce_")
    out.gauge("swarmnode_transport_stored_bytes",
              "Bytes of peers' records the transport holds now: by store (stored, cached, held) and by the "
              "signers' standing with it (newcomer, established; hivemind's announcements apart: announce_*).",
              [({"store": store}, n) for store, n in counters.stored_bytes.items()] + room_bytes + announce_bytes)
    stores = counters.announce_stores
    if stores is not None:
        out.counter("swarmnode_transport_announce_stores_total",
                    "This node's announcements stored straight at its shard's remembered replicas (direct), by a "
                    "DHT traversal, and direct stores that reached too few and traversed in the same round "
                    "(direct_failed, counted in both).",
                    [({"how": "direct"}, stores.direct), ({"how": "traversal"}, stores.traversal),
                     ({"how": "direct_failed"}, stores.direct_failed)])
    out.gauge("swarmnode_transport_signers",
              "Signers whose records the transport holds now, by standing with it (announcements: announce_*).",
              room_signers + announce_signers)


def relay_families(peers: int, transport: Mapping[str, int], counters: TransportCounters | None,
                   holds: Mapping[str, int]) -> list[Metric]:
    """A relay's families: its peers, its transport's families (see :func:`node_families`) and
    ``holds``, the bundles private peers left with it (libp2p) by outcome (``held``, ``dropped``)."""
    out = Families()
    out.gauge("swarmnode_peers", "Peers connected now.", [({}, peers)])
    _transport_families(out, transport, counters)
    out.counter("swarmnode_relay_holds_total",
                "Bundles private peers pushed to this relay to hold, by outcome (libp2p).",
                [({"outcome": outcome}, n) for outcome, n in sorted(holds.items())])
    return out.metrics
