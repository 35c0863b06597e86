"""The node's typed events and their one reducer: the wire form, parsing what a node sends,
and the dashboard's view agreeing with the node's own."""

from __future__ import annotations

import json

import pytest

from apifakes import finished_row, make_state, yardstick_row
from swarmnode.events import (
    BundleAccepted,
    BundleRefused,
    LevelsNow,
    NodeView,
    PauseChanged,
    PeerJoined,
    PeerLeft,
    PhaseChanged,
    RoundFinished,
    RoundStarted,
    ThreadsChosen,
    YardstickScored,
    parse_event,
)

EVENTS = [RoundStarted(3), PhaseChanged("generating"), BundleAccepted("bob", 2, 4), BundleRefused(None, "banned"),
          PeerJoined("carol"), PeerLeft("carol"), RoundFinished(finished_row(3, 0.5, signal_rate=0.25)),
          LevelsNow({"bf": 1, "arc_1d": -2}, ("arc_1d",)), YardstickScored(yardstick_row(4, 0.5, {"bf": 1.0})),
          ThreadsChosen(1, "auto: other programs use 1.00 of 2 cores", others_busy=1.0, cores=2),
          PauseChanged(True)]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.TYPE)
def test_an_event_survives_its_wire_form(event):
    wire = json.loads(json.dumps(event.to_json()))
    assert wire["type"] == event.TYPE and wire["time"] == event.time
    assert parse_event(wire) == event


@pytest.mark.parametrize("wire", [
    {"type": "a_newer_nodes_event", "time": 1.0, "x": 1},
    {"type": "round_started", "time": 1.0},  # a field missing
    {"type": "round_started", "time": 1.0, "round": "3"},
    {"type": "round_started", "time": 1.0, "round": True},
    {"type": "round_started", "round": 3},  # no time
    {"type": "paused", "time": 1.0, "paused": 1},
    {"type": "levels", "time": 1.0, "levels": {"bf": 1.5}, "dormant": []},
    {"type": "levels", "time": 1.0, "levels": {"bf": 1}, "dormant": "bf"},
    {"type": "round_finished", "time": 1.0, "round": 1, "metrics": {"round": 1}},
    {"type": "yardstick", "time": 1.0, "record": [1, 2]},
    {"type": "bundle_rejected", "time": 1.0, "peer": 7, "reason": "x"},
])
def test_what_does_not_fit_its_type_is_no_event(wire):
    assert parse_event(wire) is None


def test_the_view_reduces_rounds_levels_yardstick_threads_and_bundles():
    view = NodeView(max_rounds=2)
    for r in range(3):
        view.apply(RoundStarted(r))
        view.apply(RoundFinished(finished_row(r, r / 4, signal_rate=0.5)))
    view.apply(RoundFinished(finished_row(2, 0.75)))  # the same round again replaces it, counted once
    assert [r.round for r in view.rounds] == [1, 2] and view.rounds_finished == 3
    assert view.tokens_generated == 300 and view.reward_sum == pytest.approx(0.75)
    assert view.summary()["last_reward"] == 0.75 and view.summary()["signal_rate"] is None
    view.apply(YardstickScored(yardstick_row(0, 0.25, {})))
    view.apply(YardstickScored(yardstick_row(3, 0.5, {})))
    view.apply(YardstickScored(yardstick_row(3, 0.625, {})))  # a round's score again replaces it
    assert [(r["round"], r["score"]) for r in view.yardstick] == [(0, 0.25), (3, 0.625)]
    view.apply(LevelsNow({"bf": 2}, ("bf",)))
    view.apply(ThreadsChosen(2, "pinned", pinned=True))
    view.apply(BundleAccepted("bob", 1, 3))
    view.apply(BundleRefused("eve", "bad_signature"))
    view.apply(BundleRefused(None, "bad_signature"))
    view.apply(PauseChanged(True))
    summary = view.summary()
    assert (summary["levels"], summary["dormant"], summary["paused"], summary["round"]) == ({"bf": 2}, ["bf"], True, 2)
    assert summary["threads"] == {"count": 2, "reason": "pinned", "pinned": True, "others_busy": None, "cores": 0}
    assert summary["yardstick"]["score"] == 0.625
    assert view.bundles == {("accepted", ""): 1, ("rejected", "bad_signature"): 2}


def test_a_view_rebuilt_from_the_api_then_followed_agrees_with_the_node():
    """The dashboard's way: read status, rounds and yardstick, then apply the events that follow."""
    state = make_state()
    for event in EVENTS[:7]:
        state.emit(event)
    status = state.snapshot()
    view = NodeView.from_api(status, [r.to_json() for r in state.rounds_since(0)], state.yardstick_records())
    assert view.summary() == state.summary()
    for event in EVENTS[6:]:  # the round it read already comes again from the stream
        state.emit(event)
        view.apply(event)
    assert view.summary() == state.summary() and list(view.rounds) == list(state.rounds)


def test_a_rebuilt_view_refuses_rows_that_are_no_records():
    status = make_state().snapshot()
    with pytest.raises(ValueError, match="started_at"):
        NodeView.from_api(status, [{"round": 1}], [])
