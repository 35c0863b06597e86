"""``swarmnode status``, ``peers`` and ``tui``: views of a running node through its local API."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from swarmnode.cli.flags import add_home_flag
from swarmnode.node.client import ApiError, NodeApi, NoNodeRunning
from swarmnode.paths import NodeHome
from swarmnode.tui.gaintext import USEFULNESS, gain_rows, usefulness_cells
from swarmnode.tui.humanize import (
    format_ago,
    format_duration,
    format_left_out,
    format_levels,
    format_reward,
    short_peer_id,
)


def resolve_home(args: argparse.Namespace) -> NodeHome:
    return NodeHome.from_flag(args.home)


async def _fetch(home: NodeHome, what: str) -> Any:
    async with NodeApi(home) as api:
        return await (api.status() if what == "status" else api.peers())


def _show(args: argparse.Namespace) -> int:
    home = resolve_home(args)
    try:
        data = asyncio.run(_fetch(home, args.command))
    except (NoNodeRunning, ApiError) as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print("\n".join(status_lines(data) if args.command == "status" else peer_table_lines(data)))
    return 0


def status_lines(status: dict) -> list[str]:
    """The human form of ``/v1/status``."""
    rows = [
        ("node", f"{status['name']} ({status['peer_id']})"),
        ("swarm", f"{status['swarm']} over {status['transport']}"),
        ("model", f"{status['model']} on {status['device']}"),
        ("round", f"{status['round']} ({status['phase']}{', paused' if status['paused'] else ''})"),
        ("uptime", format_duration(status["uptime_s"])),
        ("peers", str(status["peers"])),
        ("reward", f"{format_reward(status['last_reward'])} (last round's mean)"),
        ("signal", f"{format_reward(status.get('signal_rate'))} (share of last round's groups with signal)"),
        ("levels", format_levels(status.get("levels") or {}, status.get("dormant") or ())),
        ("yardst.", format_yardstick(status.get("yardstick"))),
        *gain_rows(status.get("gain"), status.get("yardstick_trend")),
    ]
    threads = status.get("threads") or {}
    if threads:
        rows.append(("threads", f"{threads['count']} ({threads['reason']})"))
    if status.get("priority"):
        rows.append(("priority", status["priority"]))
    return [f"{key:<8} {value}" for key, value in rows]


def format_yardstick(record: dict | None) -> str:
    """The latest yardstick record in a few words; '-' before the first."""
    if record is None:
        return "-"
    return f"{format_reward(record['score'])} greedy on {record['questions']} held-out questions, " \
           f"after {record['round']} rounds"


def peer_table_lines(peers: list[dict], now: float | None = None) -> list[str]:
    """The human form of ``/v1/peers``: one aligned row per peer."""
    if not peers:
        return ["no peers seen yet"]
    header = ("NAME", "PEER ID", "VIA", "MODEL", "LAST SEEN", "ACCEPTED", "REJECTED", "ROUND", "CLAIMED", "LEFT OUT",
              *USEFULNESS)
    rows = [header] + [(
        p.get("name") or "-", short_peer_id(p["peer_id"]), p.get("via") or "-", p.get("model") or "-",
        format_ago(p.get("last_seen"), now),
        str(p.get("accepted", 0)), str(p.get("rejected", 0)),
        "-" if p.get("last_round") is None else str(p["last_round"]),
        format_reward(p.get("reported_mean_reward")), format_left_out(p), *usefulness_cells(p),
    ) for p in peers]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def _tui(args: argparse.Namespace) -> int:
    from swarmnode.tui.app import run_dashboard  # Textual is slow to import; only this command needs it

    return run_dashboard(resolve_home(args))


def add_parser(sub: argparse._SubParsersAction) -> None:
    for name, help_text in (("status", "show the running node's round, phase, peers and reward"),
                            ("peers", "list the peers the running node has heard from")):
        p = sub.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
        add_home_flag(p)
        p.add_argument("--json", action="store_true", help="print the API's JSON answer")
        p.set_defaults(func=_show)
    p = sub.add_parser("tui", help="watch and control the running node in a terminal dashboard",
                       description="Watch and control the running node in a terminal dashboard.")
    add_home_flag(p)
    p.set_defaults(func=_tui)
