"""``swarmnode status``, ``peers`` and ``tui``: views of a running node through its local API."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from swarmnode.cli.flags import add_home_flag
from swarmnode.node.client import (
    ApiError,
    NodeApi,
    NoNodeRunning,
    peer_table_lines,
    status_lines,
)
from swarmnode.paths import NodeHome

# -- subcommands -------------------------------------------------------------------------------


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


def _tui(args: argparse.Namespace) -> int:
    from swarmnode.tui.app import (
        run_dashboard,  # Textual is slow to import; only this command needs it
    )

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
