"""The dashboard, driven with Textual's Pilot: against an ApiServer whose NodeState the test drives,
and once against a real daemon."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import re
import shutil
import time

import pytest
from textual.widgets import DataTable, RichLog

from apifakes import FakeControl, RealDaemon, finished_row, make_state, peer_row, yardstick_row
from swarmnode.events import (
    BundleAccepted,
    BundleRefused,
    LevelsNow,
    PeerJoined,
    PhaseChanged,
    RoundFinished,
    RoundStarted,
    ThreadsChosen,
    YardstickScored,
)
from swarmnode.node.api import ApiServer
from swarmnode.node.client import NodeApi
from swarmnode.node.threads import ThreadChoice
from swarmnode.paths import NodeHome
from swarmnode.records import RoundRecord
from swarmnode.tui.app import Dashboard, NodeHeader, SwarmPanel, YardstickChart
from waiting import wait_until_async

SIZE = (130, 40)


async def until(pilot, condition, timeout: float = 10.0) -> None:
    await wait_until_async(condition, timeout, "the dashboard to get there", sleep=pilot.pause)


def header_text(app: Dashboard) -> str:
    return str(app.query_one(NodeHeader).content)


def event_lines(app: Dashboard) -> list[str]:
    return [strip.text for strip in app.query_one("#events", RichLog).lines]


@pytest.fixture
async def served(tmp_path):
    home = NodeHome(tmp_path / "home").create()
    state = make_state()
    control = FakeControl(state=state)
    server = ApiServer(state, control, home=home)
    await server.start()
    yield home, state, control
    await server.stop()


async def test_header_shows_the_round_and_follows_events(served):
    home, state, control = served
    state.emit(RoundStarted(3))
    state.emit(PhaseChanged("generating"))
    app = Dashboard(home, retry_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.online)
        assert "alice" in header_text(app) and "12D3KooWSelfAlice" in header_text(app)
        assert "round 3" in header_text(app) and "phase generating" in header_text(app)
        state.emit(RoundFinished(finished_row(3, 0.625)))
        state.emit(RoundStarted(4))
        state.emit(PhaseChanged("training"))
        await until(pilot, lambda: "round 4" in header_text(app) and "phase training" in header_text(app))
        assert "reward 0.625" in header_text(app)
        await until(pilot, lambda: any("round 3 finished: reward 0.625" in line for line in event_lines(app)))
        assert [r.round for r in app.view.rounds] == [3]


async def test_header_shows_the_thread_count_and_why(served):
    home, state, control = served
    state.info.priority = "background (nice 19)"
    state.emit(ThreadsChosen(**ThreadChoice(2, "auto: other programs use 0.03 of 2 cores", others_busy=0.03,
                                            cores=2).as_dict()))
    app = Dashboard(home, retry_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.online)
        assert "threads 2 (auto: other programs use 0.03 of 2 cores)" in header_text(app)
        assert "priority background (nice 19)" in header_text(app)
        # another program takes a core: the node sheds a thread, the header and the event log say so
        state.emit(ThreadsChosen(**ThreadChoice(1, "auto: other programs use 1.01 of 2 cores", others_busy=1.01,
                                                cores=2).as_dict()))
        await until(pilot, lambda: "threads 1 (auto: other programs use 1.01 of 2 cores)" in header_text(app))
        await until(pilot, lambda: any("threads: 1 (auto:" in line for line in event_lines(app)))


async def test_levels_signal_rate_and_yardstick_show_and_follow_events(served):
    home, state, control = served
    state.emit(LevelsNow({"bf": 0, "calendar_arithmetic": -1}))
    state.emit(YardstickScored(yardstick_row(0, 0.125, {"bf": 0.0})))
    app = Dashboard(home, retry_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.online)
        assert "levels bf 0, calendar_arithmetic -1" in header_text(app) and "signal -" in header_text(app)
        assert [r["round"] for r in app.query_one(YardstickChart).records] == [0]
        row = finished_row(1, 0.5, signal_rate=0.75, level_moves={"calendar_arithmetic": 0})
        state.emit(RoundFinished(row))
        state.emit(LevelsNow({"bf": 0, "calendar_arithmetic": 0}, ("bf",)))
        state.emit(YardstickScored(yardstick_row(2, 0.25, {"bf": 0.5})))
        await until(pilot, lambda: "bf (0), calendar_arithmetic 0" in header_text(app)
                    and "signal 0.750" in header_text(app))
        await until(pilot, lambda: [r["round"] for r in app.query_one(YardstickChart).records] == [0, 2])
        lines = event_lines(app)
        log = "".join(lines).replace(" ", "")  # the log wraps long lines
        assert "signal0.750" in log and "levelcalendar_arithmetic->0" in log
        assert "yardstickafter2rounds:0.250" in log
        assert not any(line.strip().endswith("levels") for line in lines)


async def test_peers_table_lists_a_peer(served):
    home, state, control = served
    app = Dashboard(home, retry_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.query_one("#peers", DataTable).row_count == 1)
        table = app.query_one("#peers", DataTable)
        cells = [str(cell) for cell in table.get_row("12D3KooWPeerBob")]
        assert cells[:10] + cells[11:] == \
            ["bob", "0", "—", "—", "0", "0", "5", "1", "0.250", "SmolLM2-135M-Instruct", "-", "0"]
        # the row was last seen 3 s before it was made; a busy machine draws it a second or more later
        ago = re.fullmatch(r"(\d+)s ago", cells[10])
        assert ago and 3 <= int(ago[1]) <= time.time() - control.peers[0]["last_seen"], cells[10]
        # a new peer shows up after its event; its model name is text, never markup
        control.peers.append(peer_row("12D3KooWPeerCarol", "carol", accepted=0, rejected=0, reward=0.5,
                                      model="[/oops] [bold]x"))
        state.emit(PeerJoined("12D3KooWPeerCarol"))
        await until(pilot, lambda: table.row_count == 2, timeout=5)
        await until(pilot, lambda: any("peer 12D3KooW…rCarol joined" in line for line in event_lines(app)))
        assert str(table.get_row("12D3KooWPeerCarol")[9]) == "[/oops] [bold]x"
        table.scroll_to(x=table.max_scroll_x, animate=False)  # the model column is past the usefulness ones
        await pilot.pause()
        assert "[/oops]&#160;[bold]x" in app.export_screenshot()  # drawn as it reads
        # a change without an event shows up on 'r'
        control.peers = control.peers[1:]
        await pilot.press("r")
        await until(pilot, lambda: table.row_count == 1)
        assert table.get_row("12D3KooWPeerCarol")[0] == "carol"


async def test_what_the_nodes_rollouts_gave_shows_in_the_header_and_the_peers_table(served):
    home, state, control = served

    def window(groups: int) -> dict:
        return {"groups": groups, "with_signal": groups - 1, "peers": 1, "receipts": 2}
    control.credit_summary = {"total": window(9), "last_hour": window(4), "last_day": window(9), "hours": [],
                              "by_peer": [{"peer_id": "12D3KooWPeerBob", "name": "bob", **window(9), "last": 0.0}],
                              "pending": 0, "refused": {}}
    app = Dashboard(home, retry_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.query_one("#peers", DataTable).row_count == 1)
        assert "gave   last hour 4 groups (3 with signal) to 1 peers   today 9 groups (8 with signal)" \
            in header_text(app)
        assert str(app.query_one("#peers", DataTable).get_row("12D3KooWPeerBob")[-1]) == "9"


def swarm_text(app: Dashboard) -> str:
    return str(app.query_one(SwarmPanel).content)


def gain_round(r: int, external: int, drawn_from: str, peer_reward: float) -> RoundRecord:
    """A round whose update took 3 of the node's own groups with signal and ``external`` of peers'."""
    return dataclasses.replace(
        finished_row(r, 0.5, {"basic_arithmetic": 0.5}), n_local=3, n_external=external,
        trained_by_family={"basic_arithmetic": 3}, trained_external_by_family={"basic_arithmetic": external},
        peer_groups_by_family={"basic_arithmetic": 4}, peer_reward_by_family={"basic_arithmetic": peer_reward},
        drawn_by_peer={drawn_from: external} if external else {})


async def test_swarm_panel_says_what_the_swarm_gives_and_follows_rounds(served):
    home, state, control = served
    control.peers[0].update(groups=12, groups_with_signal=9, reward_here=0.625, groups_dropped={"unverifiable": 1})
    state.emit(YardstickScored(yardstick_row(0, 0.125, {})))
    app = Dashboard(home, retry_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.online)
        text = swarm_text(app)
        assert "— (no round finished yet)" in text and "only the untrained score so far" in text
        state.emit(RoundFinished(gain_round(0, 0, "12D3KooWPeerBob", 0.5)))
        await until(pilot, lambda: "— (no external groups yet; 3 of this node's own)" in swarm_text(app))
        state.emit(RoundFinished(gain_round(1, 1, "12D3KooWPeerBob", 0.75)))
        state.emit(YardstickScored(yardstick_row(2, 0.375, {})))
        await until(pilot, lambda: "14% (1 of 7 groups) in the last 20 rounds" in swarm_text(app))
        text = swarm_text(app)
        assert "peers' 0.625 (8 groups)" in text and "basic_arithmetic 1/7" in text
        assert "+0.250 after 2 rounds (0.375 against 0.125)" in text
        table = app.query_one("#peers", DataTable)
        await until(pilot, lambda: str(table.get_row("12D3KooWPeerBob")[4]) == "1")  # drawn, after the round
        assert [str(c) for c in table.get_row("12D3KooWPeerBob")[:6]] == \
            ["bob", "12", "75%", "0.625", "1", "1"]


async def test_p_pauses_and_resumes_the_node(served):
    home, state, control = served
    app = Dashboard(home, retry_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.online)
        await pilot.press("p")
        await until(pilot, lambda: control.calls == ["pause"])
        assert state.paused
        await until(pilot, lambda: "phase paused" in header_text(app))
        await pilot.press("p")
        await until(pilot, lambda: control.calls == ["pause", "resume"])
        assert not state.paused
        await until(pilot, lambda: "phase idle" in header_text(app) or "phase loading" in header_text(app))


async def test_no_node_then_a_node_then_a_restarted_node(tmp_path):
    home = NodeHome(tmp_path / "home").create()
    app = Dashboard(home, retry_s=0.05, max_retry_s=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        offline = app.query_one("#offline")
        assert offline.display and not app.query_one("#dashboard").display
        assert f"no node running at {home.root}" in str(offline.content)
        await pilot.press("p")  # nothing to pause: a notice, no crash
        assert app.is_running

        for round_ in (5, 6):  # the node starts, stops, and starts again on a new port with a new token
            state = make_state()
            state.emit(RoundStarted(round_))
            server = ApiServer(state, FakeControl(), home=home)
            await server.start()
            await until(pilot, lambda: app.online and f"round {round_}" in header_text(app))
            await server.stop()
            await until(pilot, lambda: not app.online)
            assert app.query_one("#offline").display


async def test_q_quits(served):
    home, state, control = served
    app = Dashboard(home, retry_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause(0.1)
        assert not app.is_running


async def test_a_tick_holding_the_client_of_a_node_that_stopped_shows_it_offline(tmp_path):
    home = NodeHome(tmp_path / "home").create()
    server = ApiServer(make_state(), FakeControl(), home=home)
    await server.start()
    app = Dashboard(home, retry_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.online)
        held = app.api
        await server.stop()
        await until(pilot, lambda: not app.online)
        assert app.api is None
        app.api, app._peers_stale = held, True  # a tick that read the client before it closed
        await app._tick()
        assert app.is_running and app.query_one("#offline").display


class AnswersAfterQuit:
    """A node whose credits and peers answer only once the dashboard has quit and torn down."""

    def __init__(self) -> None:
        self.calls, self.quit = 0, asyncio.Event()

    async def _after_quit(self, answer):
        self.calls += 1
        await self.quit.wait()
        return answer

    async def credits(self):
        return await self._after_quit(None)

    async def peers(self):
        return await self._after_quit([])


@pytest.mark.parametrize("awaiting", ["credits", "peers"])
async def test_a_tick_resumed_after_a_quit_leaves_the_removed_widgets_alone(served, awaiting):
    home, state, control = served
    app = Dashboard(home, retry_s=0.05)
    slow = AnswersAfterQuit()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.online)
        app.api, app._peers_stale = slow, awaiting == "peers"
        app._credits_at = -math.inf if awaiting == "credits" else time.monotonic()
        tick = asyncio.ensure_future(app._tick())
        await until(pilot, lambda: slow.calls == 1)
        await pilot.press("q")
    slow.quit.set()
    await asyncio.wait_for(tick, 10)
    assert slow.calls == 1


async def test_screenshot_with_realistic_data(tmp_path):
    """Saves an SVG of the dashboard; SWARMNODE_SCREENSHOT=docs/dashboard.svg keeps a copy."""
    home = NodeHome(tmp_path / "home").create()
    state = make_state()
    state.info.peer_id = "12D3KooWLx9kDq7xWqvCtUmbNfhZ8cTPuJ4hQqU2sWkYdR3aXeFt"
    state.info.name = "amber-quiet-falcon"
    state.info.swarm = "swarmnode-demo"
    state.info.transport = "hivemind"
    state.info.model = "embedded"
    state.started_at = time.time() - 3725
    families = ("basic_arithmetic", "base_conversion", "propositional_logic")
    for r in range(40):
        by_task = {f: min(1.0, max(0.0, 0.15 + 0.012 * r * (i + 1) / 2 + 0.08 * math.sin(r / (2 + i))))
                   for i, f in enumerate(families)}
        external = {f: (r + i) % 3 // 2 for i, f in enumerate(families)} if r >= 4 else {}
        drawn = {("12D3KooWHn2fQvZsVqkUX1jY8gT4cR7pDmLa9bE6wNkPoS5tAyZc",
                  "12D3KooWRt8uVbN3xHqZpF6kLm2JcYsE9wDaG4oTiQ7vKe1nBxWp")[r % 2]: sum(external.values())}
        state.emit(RoundFinished(dataclasses.replace(
            finished_row(r, sum(by_task.values()) / 3, by_task, signal_rate=0.625),
            n_local=5, n_external=sum(external.values()), trained_by_family={f: 2 for f in families[:2]} | {
                families[2]: 1}, trained_external_by_family=external,
            peer_groups_by_family={f: 6 for f in families} if r >= 4 else {},
            peer_reward_by_family={f: min(1.0, v + 0.05) for f, v in by_task.items()} if r >= 4 else {},
            drawn_by_peer={p: n for p, n in drawn.items() if n} if r >= 4 else {})))
        if r % 10 == 0:
            score = {f: min(1.0, 0.05 + 0.01 * r * (i + 1) / 2) for i, f in enumerate(families)}
            state.emit(YardstickScored(yardstick_row(r, sum(score.values()) / 3, score, questions=54)))
    state.emit(LevelsNow({"basic_arithmetic": 1, "base_conversion": -1, "propositional_logic": 0}))
    state.emit(RoundStarted(40))
    control = FakeControl([
        peer_row("12D3KooWHn2fQvZsVqkUX1jY8gT4cR7pDmLa9bE6wNkPoS5tAyZc", "brisk-cedar-otter", accepted=112,
                 rejected=3, reward=0.41, seen_ago=4, groups=214, with_signal=131, reward_here=0.448,
                 dropped={"unverifiable": 2}),
        peer_row("12D3KooWRt8uVbN3xHqZpF6kLm2JcYsE9wDaG4oTiQ7vKe1nBxWp", "silent-maple-heron", accepted=87,
                 rejected=0, reward=0.37, seen_ago=17, groups=171, with_signal=88, reward_here=0.392),
    ])
    server = ApiServer(state, control, home=home)
    await server.start()
    app = Dashboard(home, retry_s=0.05)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            await until(pilot, lambda: app.online and app.query_one("#peers", DataTable).row_count == 2)
            state.emit(PhaseChanged("generating"))
            state.emit(BundleAccepted("12D3KooWHn2fQvZsVqkUX1jY8gT4cR7pDmLa9bE6wNkPoS5tAyZc", 40, 8))
            state.emit(BundleAccepted("12D3KooWRt8uVbN3xHqZpF6kLm2JcYsE9wDaG4oTiQ7vKe1nBxWp", 39, 8))
            state.emit(BundleRefused("12D3KooWEvil", "bad_signature"))
            state.emit(PhaseChanged("scoring"))
            await until(pilot, lambda: len(event_lines(app)) >= 4)
            path = app.save_screenshot("dashboard.svg", str(tmp_path))
    finally:
        await server.stop()
    svg = open(path, encoding="utf-8").read()
    assert svg.lstrip().startswith("<svg") and "amber-quiet-falcon" in svg and "brisk-cedar-otter" in svg
    keep = os.environ.get("SWARMNODE_SCREENSHOT")
    if keep:
        shutil.copyfile(path, keep)


@pytest.mark.slow
async def test_dashboard_on_a_real_daemon(tmp_path, tiny_model_dir):
    home = NodeHome(tmp_path / "home")
    app = Dashboard(home, retry_s=0.2, max_retry_s=0.5)
    with RealDaemon(home, tiny_model_dir, tmp_path / "daemon.log") as daemon:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.online, timeout=60)
            await until(pilot, lambda: app.view.rounds, timeout=60)  # a round finished and reached the chart
            assert f"round {app.view.round}" in header_text(app) and app.status["name"] in header_text(app)
            await pilot.press("p")
            await until(pilot, lambda: "phase paused" in header_text(app))
            async with NodeApi(home) as api:
                assert (await api.status())["paused"]
                await pilot.press("p")
                await until(pilot, lambda: "phase paused" not in header_text(app))
                assert not (await api.status())["paused"]
                await api.stop()
            await until(pilot, lambda: not app.online, timeout=60)
            assert await asyncio.to_thread(daemon.proc.wait, 60) == 0
