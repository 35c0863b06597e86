"""The terminal dashboard: watches one node through its local API and pauses or resumes it.

It follows ``/v1/events`` and re-reads status, rounds and peers whenever it (re)connects, so
a node that restarts (new port, new token in ``api.json``) is picked up again after a short
back-off; while no node answers it shows "no node running at <home>" and keeps trying.
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import datetime

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.widgets import DataTable, Footer, RichLog, Static
from textual_plotext import PlotextPlot

from swarmnode.backoff import Backoff
from swarmnode.events import (
    BundleAccepted,
    BundleRefused,
    LevelsNow,
    NodeEvent,
    NodeView,
    PauseChanged,
    PeerJoined,
    PeerLeft,
    PhaseChanged,
    RoundFinished,
    RoundStarted,
    ThreadsChosen,
    YardstickScored,
)
from swarmnode.gain import yardstick_trend
from swarmnode.node.client import ApiError, NodeApi, NoNodeRunning
from swarmnode.paths import NodeHome
from swarmnode.tui.gaintext import gain_rows, usefulness_cells
from swarmnode.tui.humanize import (
    format_ago,
    format_duration,
    format_left_out,
    format_levels,
    format_reward,
    short_peer_id,
)

CHART_ROUNDS = 300  # rounds shown in the chart (the latest)
# A peer's usefulness first (see swarmnode.cli.status.USEFULNESS), then what it sent and said.
PEER_COLUMNS = (("name", "Name"), ("groups", "Groups"), ("signal", "Signal"), ("reward_here", "Here"),
                ("drawn", "Drawn"), ("dropped", "Dropped"), ("accepted", "Accepted"), ("rejected", "Rejected"),
                ("reward", "Claimed"), ("model", "Model"), ("last_seen", "Last seen"),
                ("left_out", "Left out"), ("credited", "Trained on ours"))
CREDITS_EVERY_S = 10  # how often the dashboard re-reads /v1/credits


class NodeHeader(Static):
    """Who the node is and what it is doing."""

    def show(self, status: dict, view: NodeView, uptime_s: float, credits: dict | None = None) -> None:
        """``status``: the node's ``/v1/status`` (who it is, its peers); ``view``: what it does now;
        ``credits``: its ``/v1/credits`` (what its rollouts gave), None for a solo node."""
        text = Text()
        text.append(status["name"] or "(unnamed)", style="bold")
        text.append(f"  {status['peer_id']}\n", style="dim")
        last = view.last_round
        for label, value in (("swarm", f"{status['swarm']} ({status['transport']})"),
                             ("round", str(view.round)), ("phase", "paused" if view.paused else view.phase),
                             ("device", status["device"]), ("uptime", format_duration(uptime_s)),
                             ("peers", str(status["peers"])),
                             ("reward", format_reward(None if last is None else last.reward_mean)),
                             ("signal", format_reward(None if last is None else last.signal_rate))):
            text.append(f"{label} ", style="dim")
            text.append(value, style="bold reverse" if label == "phase" and view.paused else "bold")
            text.append("   ")
        threads = view.threads
        if threads:
            text.append("\nthreads ", style="dim")
            text.append(str(threads["count"]), style="bold")
            text.append(f" ({threads['reason']})   ", style="dim")
        if status.get("priority"):
            text.append("\n" if not threads else "", style="dim")
            text.append("priority ", style="dim")
            text.append(status["priority"], style="bold")
        text.append("\nlevels ", style="dim")
        text.append(format_levels(view.levels, view.dormant))
        if credits is not None:
            text.append("\ngave   ", style="dim")
            for label, window in (("last hour", credits["last_hour"]), ("today", credits["last_day"])):
                text.append(f"{label} ", style="dim")
                text.append(f"{window['groups']} groups", style="bold")
                text.append(f" ({window['with_signal']} with signal) to {window['peers']} peers   ", style="dim")
        self.update(text)


class SwarmPanel(Static):
    """What the swarm gives: peers' share of the signal, rewards own against peers', per family,
    and the yardstick against the untrained score (:func:`swarmnode.tui.gaintext.gain_rows`)."""

    def show(self, view: NodeView) -> None:
        text = Text()
        for i, (label, value) in enumerate(gain_rows(view.gain.to_json(), yardstick_trend(view.yardstick))):
            text.append(("\n" if i else "") + f"{label:<9}", style="dim")
            text.append(value)
        self.update(text)


class FamilyChart(PlotextPlot):
    """A score in [0, 1] per round: one line per task family, and one for all of them."""

    def draw(self, title: str, xlabel: str, rows: list[dict], by_family: str, overall: str, label: str) -> None:
        plt = self.plt
        plt.clear_data()
        plt.title(title)
        plt.xlabel(xlabel)
        plt.ylim(0, 1)
        if rows:
            rounds = [r["round"] for r in rows]
            step = max(1, math.ceil((rounds[-1] - rounds[0]) / 6))
            plt.xticks(list(range(rounds[0], rounds[-1] + 1, step)))
            for family in sorted({f for r in rows for f in r.get(by_family, {})}):
                points = [(r["round"], r[by_family][family]) for r in rows if family in r.get(by_family, {})]
                plt.plot([x for x, _ in points], [y for _, y in points], label=family, marker="braille")
            plt.plot(rounds, [r[overall] for r in rows], label=label, marker="braille", color="white")
        self.refresh()


class RewardChart(FamilyChart):
    """Mean reward per round, and per task family."""

    def show(self, rows: list[dict]) -> None:
        self.draw("reward per round", "round", rows, "reward_by_task", "reward_mean", "mean")


class YardstickChart(FamilyChart):
    """The fixed yardstick's greedy score against rounds trained: overall and per family."""

    records: list[dict] = []

    def show(self, records: list[dict]) -> None:
        self.records = records
        self.draw("yardstick (greedy, fixed held-out set)", "rounds trained", records, "by_family", "score", "all")


class Dashboard(App):
    """``swarmnode tui``: one node's rounds, rewards, peers and events."""

    CSS_PATH = "app.tcss"
    TITLE = "swarmnode"
    BINDINGS = [("q", "quit", "Quit"), ("r", "refresh", "Refresh"), ("p", "toggle_pause", "Pause/resume")]

    online: reactive[bool] = reactive(False)

    def __init__(self, home: NodeHome, *, retry_s: float = 0.5, max_retry_s: float = 5.0):
        super().__init__()
        self.home = home
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self.api: NodeApi | None = None
        self.status: dict | None = None  # the last /v1/status: who the node is, its peers, its uptime
        self.status_at = 0.0  # monotonic time of the last status, to advance the uptime locally
        self.view: NodeView | None = None  # what the node does, rebuilt on (re)connecting, then followed
        self.peers: list[dict] = []
        self._peers_stale = False
        self.credits: dict | None = None  # the last /v1/credits (None: solo, or a node without it)
        self._credits_at = 0.0

    def compose(self) -> ComposeResult:
        yield Static(f"no node running at {self.home.root}\n\nwaiting for one to start… (q quits)", id="offline")
        with Vertical(id="dashboard"):
            yield NodeHeader(id="header")
            yield SwarmPanel(id="swarm")
            with Horizontal(id="charts"):
                yield RewardChart(id="rewards")
                yield YardstickChart(id="yardstick")
            with Horizontal(id="bottom"):
                yield DataTable(id="peers", cursor_type="row", zebra_stripes=True)
                yield RichLog(id="events", max_lines=1000, wrap=True, min_width=20)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#peers", DataTable)
        for key, label in PEER_COLUMNS:
            table.add_column(label, key=key)
        self.query_one("#peers").border_title = "peers: groups kept, with signal, their reward here, drawn, dropped"
        self.query_one("#events").border_title = "events"
        self.watch_online(self.online)
        self.set_interval(1.0, self._tick)
        self.follow()

    def watch_online(self, online: bool) -> None:
        self.query_one("#dashboard").display = online
        self.query_one("#offline").display = not online

    # -- following the node ------------------------------------------------------------------

    @work(exclusive=True, group="follow")
    async def follow(self) -> None:
        """Follow the node's events for as long as the app runs, reconnecting after ``retry_s``,
        doubling to ``max_retry_s`` (no jitter: one client of a local API), from ``retry_s``
        again once connected."""
        backoff = Backoff(self.retry_s, self.max_retry_s, jitter=0.0)
        while True:
            try:
                async with NodeApi(self.home) as api:
                    try:
                        async for event in api.events():
                            if event is None:  # subscribed: nothing from now on is missed
                                self.api = api
                                await self.reload()
                                self.online = True
                                backoff.reset()
                            else:
                                self.on_node_event(event)
                    finally:  # before the session closes, or a tick in between would use it
                        self.api = None
            except (NoNodeRunning, ApiError):
                pass
            self.online = False
            await asyncio.sleep(backoff.next_delay())

    async def reload(self) -> None:
        """Read status, recent rounds, the yardstick and peers again."""
        api = self.api
        if api is None:
            return
        status = await api.status()
        rounds = await api.rounds(since=max(0, status["round"] - CHART_ROUNDS))
        try:
            self.view = NodeView.from_api(status, rounds, await api.yardstick(), max_rounds=CHART_ROUNDS)
        except (KeyError, ValueError) as exc:
            raise ApiError(f"the node's answer does not fit this dashboard ({exc}); is it another version?") from None
        self.peers = await api.peers()
        self._peers_stale = False
        await self._read_credits()
        self._set_status(status)
        self._show_rounds()
        self.query_one(YardstickChart).show(self.view.yardstick)
        self.query_one(SwarmPanel).show(self.view)
        self._show_peers()

    async def _read_credits(self) -> None:
        """Re-read ``/v1/credits``; a node too old to serve it shows none."""
        if self.api is None:
            return
        self._credits_at = time.monotonic()
        try:
            self.credits = await self.api.credits()
        except ApiError:
            self.credits = None

    def _set_status(self, status: dict) -> None:
        self.status, self.status_at = status, time.monotonic()
        self._show_header()

    def _show_header(self) -> None:
        if self.status is not None and self.view is not None:
            uptime = self.status["uptime_s"] + time.monotonic() - self.status_at
            self.query_one(NodeHeader).show(self.status, self.view, uptime, self.credits)

    def _show_rounds(self) -> None:
        if self.view is not None:
            self.query_one(RewardChart).show([r.to_json() for r in self.view.rounds])

    def on_node_event(self, event: NodeEvent) -> None:
        if self.view is not None:
            self.view.apply(event)
            self._show_header()
        if isinstance(event, RoundFinished):
            self._show_rounds()
            self._peers_stale = True  # its groups drawn per peer changed
        elif isinstance(event, YardstickScored) and self.view is not None:
            self.query_one(YardstickChart).show(self.view.yardstick)
        if isinstance(event, (RoundFinished, YardstickScored)) and self.view is not None:
            self.query_one(SwarmPanel).show(self.view)
        elif isinstance(event, (BundleAccepted, BundleRefused, PeerJoined, PeerLeft)):
            self._peers_stale = True
        if not isinstance(event, LevelsNow):  # every round sends them; the moves are in its round_finished line
            self.query_one("#events", RichLog).write(self._describe(event))

    def _peer_name(self, peer: str | None) -> str:
        if peer is None:
            return "an unknown sender"
        for p in self.peers:
            if peer in (p["peer_id"], p.get("name")):
                return p.get("name") or short_peer_id(peer)
        return short_peer_id(peer)

    def _describe(self, event: NodeEvent) -> Text:
        style = ""
        match event:
            case RoundFinished(record=m):
                message = (f"round {m.round} finished: reward {format_reward(m.reward_mean)}, "
                           f"signal {format_reward(m.signal_rate)}, {m.tokens_generated} tokens, {m.seconds:.1f} s")
                if m.level_moves:
                    message += "; level " + ", ".join(f"{f} -> {lv}" for f, lv in sorted(m.level_moves.items()))
                style = "bold green"
            case RoundStarted(round=r):
                message = f"round {r} started"
            case PhaseChanged(phase=phase):
                message = f"phase: {phase}"
            case BundleAccepted(peer=peer, round=r):
                message = f"bundle from {self._peer_name(peer)} accepted (round {r})"
            case BundleRefused(peer=peer, reason=reason):
                message, style = f"bundle from {self._peer_name(peer)} rejected: {reason}", "red"
            case PeerJoined(peer=peer):
                message = f"peer {self._peer_name(peer)} joined"
            case PeerLeft(peer=peer):
                message = f"peer {self._peer_name(peer)} left"
            case PauseChanged(paused=paused):
                message, style = ("paused: no new round starts" if paused else "resumed"), "yellow"
            case ThreadsChosen(count=count, reason=reason):
                message = f"threads: {count} ({reason})"
            case YardstickScored(record=record):
                message = f"yardstick after {record.round} rounds: {format_reward(record.score)}"
            case _:
                message = event.TYPE
        stamp = datetime.fromtimestamp(event.time).strftime("%H:%M:%S")
        return Text.assemble((stamp + " ", "dim"), (message, style))

    def _show_peers(self) -> None:
        table = self.query_one("#peers", DataTable)
        now = time.time()
        seen = set()
        credited = {p["peer_id"]: p["groups"] for p in (self.credits or {}).get("by_peer", [])}
        for p in self.peers:
            key = p["peer_id"]
            seen.add(key)
            # the model is a stranger's string: a Text, so the table never reads it as markup
            cells = {"name": p.get("name") or short_peer_id(key), "model": Text(p.get("model") or "-"),
                     "last_seen": format_ago(p.get("last_seen"), now),
                     "accepted": str(p.get("accepted", 0)), "rejected": str(p.get("rejected", 0)),
                     "reward": format_reward(p.get("reported_mean_reward")),
                     **dict(zip(("groups", "signal", "reward_here", "drawn"), usefulness_cells(p))),
                     # the reasons are in `swarmnode peers`; the table is narrow
                     "dropped": str(sum((p.get("groups_dropped") or {}).values())),
                     "left_out": format_left_out(p), "credited": str(credited.get(key, 0))}
            if key in table.rows:
                for column, value in cells.items():
                    table.update_cell(key, column, value)
            else:
                table.add_row(*(cells[c] for c, _ in PEER_COLUMNS), key=key)
        for key in [k for k in table.rows if k.value not in seen]:
            table.remove_row(key)

    async def _tick(self) -> None:
        # After each await the app may be shutting down (a quit mid-request): its widgets are
        # gone then, and there is nothing left to show.
        if self.api is not None and time.monotonic() - self._credits_at >= CREDITS_EVERY_S:
            try:
                await self._read_credits()
            except NoNodeRunning:
                return
        if not self.is_running:
            return
        self._show_header()
        if self._peers_stale and self.api is not None:
            self._peers_stale = False
            try:
                self.peers = await self.api.peers()
            except (NoNodeRunning, ApiError):
                return
        if self.is_running:
            self._show_peers()

    # -- keys --------------------------------------------------------------------------------

    async def action_refresh(self) -> None:
        try:
            await self.reload()
        except (NoNodeRunning, ApiError) as exc:
            self.notify(str(exc), severity="error")

    async def action_toggle_pause(self) -> None:
        if self.api is None or self.view is None:
            self.notify(f"no node running at {self.home.root}", severity="warning")
            return
        try:  # the node's paused event updates the view
            await (self.api.resume() if self.view.paused else self.api.pause())
        except (NoNodeRunning, ApiError) as exc:
            self.notify(str(exc), severity="error")


def run_dashboard(home: NodeHome) -> int:
    """Run the dashboard for the node in ``home`` until the user quits; returns the exit status."""
    Dashboard(home).run()
    return 0
