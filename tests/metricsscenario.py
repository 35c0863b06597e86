"""Node and relay states with every ``/metrics`` family filled, shared by the test that
compares the exposition with the series recorded in ``tests/data/metrics_*.prom``.

The recorded files are the Prometheus text of these states as the node wrote it by hand
before it used prometheus_client (the transports' counters then a flat dict of the same
numbers); the series (names, labels, types, values) must stay the same.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from apifakes import finished_row, make_state, peer_row, yardstick_row
from swarmnode.events import BundleAccepted, BundleRefused, LevelsNow, RoundFinished, ThreadsChosen, YardstickScored
from swarmnode.node.state import NodeState
from swarmnode.swarm.transport.counters import AnnounceStores, RoomGauges, TransportCounters

DATA = Path(__file__).parent / "data"
BOB, EVE = "12D3KooWPeerBob", "12D3KooWPeerEve"
TRANSPORT_STATS = {"published": 3, "publish_errors": 1, "delivered": 5, "duplicates": 2, "join_attempts": 4}
# What a hivemind node's DHT process counted.
HIVEMIND = TransportCounters(refused={"far_expiry": 3, "not_a_bundle": 1}, evicted=2,
                             stored_bytes={"stored": 4096, "cached": 512}, room=RoomGauges(3000, 1096, 2, 1),
                             announce_room=RoomGauges(2324, 0, 1, 0), announce_stores=AnnounceStores(6, 2, 1))
# What a libp2p relay's host counted.
LIBP2P = TransportCounters(refused={"push_too_soon": 7, "hold_signer_full": 2, "inbound_idle": 1}, evicted=3,
                           stored_bytes={"held": 65536}, room=RoomGauges(60000, 5536, 4, 1))
# A hivemind relay that refused nothing yet (one sample of reason "" stands for the family).
QUIET = TransportCounters(stored_bytes={"stored": 0, "cached": 0}, room=RoomGauges(), announce_room=RoomGauges())
HOLDS = {"held": 4, "dropped": 1}
CREDITS = {"total": {"groups": 6, "with_signal": 5, "peers": 3, "receipts": 3}, "last_hour": {"peers": 2},
           "refused": {"bad_signature": 1, "not_established": 2}, "pending": 1}


def filled_state() -> NodeState:
    """A node after three rounds: bundles accepted and refused (one reason needing escapes),
    levels with a dormant family, threads chosen, two yardstick records, peers' groups drawn."""
    state = make_state()
    for r, reward in ((0, 0.25), (1, 0.5), (2, 0.75)):
        row = dataclasses.replace(
            finished_row(r, reward, {"bf": reward, "base_conversion": reward / 2}, signal_rate=0.5),
            n_external=2, trained_by_family={"bf": 2, "base_conversion": 1},
            trained_external_by_family={"bf": 1}, peer_groups_by_family={"bf": 4},
            peer_reward_by_family={"bf": 0.375}, drawn_by_peer={BOB: 2})
        state.emit(RoundFinished(row))
    state.emit(BundleAccepted(BOB, 2, 1))
    state.emit(BundleRefused(EVE, 'quote"back\\slash\nnewline'))
    state.emit(BundleRefused(EVE, "bad_signature"))
    state.emit(LevelsNow({"bf": 2, "base_conversion": -2}, ("base_conversion",)))
    state.emit(ThreadsChosen(count=2, reason="auto", pinned=False, others_busy=0.5, cores=4))
    state.emit(YardstickScored(yardstick_row(0, 0.125, {"bf": 0.25, "base_conversion": 0.0})))
    state.emit(YardstickScored(yardstick_row(3, 0.375, {"bf": 0.5, "base_conversion": 0.25})))
    return state


def filled_peers() -> list[dict]:
    """Two peers with groups kept, dropped and left out, as the node's control gives them (the
    API adds ``drawn``)."""
    bob = {**peer_row(BOB, "bob", accepted=3, rejected=0, reward=0.9, groups=8, with_signal=6, reward_here=0.375,
                      dropped={"unverifiable": 2}),
           "left_out_by_reason": {"no_answer": 2, "far_from_policy": 1}, "logprob_measured": 8}
    eve = {**peer_row(EVE, "eve", accepted=1, rejected=4, reward=1.0, dropped={"too_few_responses": 1}),
           "left_out_by_reason": {"nested_tag": 4}, "logprob_measured": 0}
    return [bob, eve]
