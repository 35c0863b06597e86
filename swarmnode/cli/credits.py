"""``swarmnode credits``: what this node's rollouts gave the swarm, from peers' signed receipts."""

from __future__ import annotations

import argparse
import asyncio
import json

from swarmnode.cli.flags import add_home_flag
from swarmnode.node.client import ApiError, NodeApi, NoNodeRunning
from swarmnode.node.credits import credit_lines
from swarmnode.paths import NodeHome
from swarmnode.swarm.ledger import summary_of_files


async def _fetch(home: NodeHome) -> dict | None:
    async with NodeApi(home) as api:
        return await api.credits()


def _show(args: argparse.Namespace) -> int:
    """The running node's ledger through its API; with no node running, the ledger's files as
    the node left them (no refusal counts then: those live in the running node)."""
    home = NodeHome.from_flag(args.home)
    try:
        summary = asyncio.run(_fetch(home))
        source = "the running node"
    except (NoNodeRunning, ApiError):
        summary = summary_of_files(home.credits) if home.credits.is_dir() else None
        source = f"{home.credits} (no node running)"
    if args.json:
        print(json.dumps({"credits": summary}, indent=2))
        return 0
    print(f"what this node's rollouts gave its peers, from their signed receipts ({source}):")
    print("\n".join(credit_lines(summary)))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    help_text = "show what this node's rollouts gave the swarm: groups peers trained on, with signal, per peer"
    p = sub.add_parser("credits", help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
    add_home_flag(p)
    p.add_argument("--json", action="store_true", help="print the ledger's summary as JSON (as /v1/credits)")
    p.set_defaults(func=_show)
