"""``swarmnode invite``: print the running node's invite code, one line another node joins with."""

from __future__ import annotations

import argparse
import asyncio
import sys

from swarmnode.cli.flags import add_home_flag
from swarmnode.node.client import ApiError, NodeApi, NoNodeRunning
from swarmnode.paths import NodeHome
from swarmnode.swarm.invite import Invite, InviteError, encode_invite


async def _status(home: NodeHome) -> dict:
    async with NodeApi(home) as api:
        return await api.status()


def cmd_invite(args: argparse.Namespace) -> int:
    try:
        status = asyncio.run(_status(NodeHome.from_flag(args.home)))
    except (NoNodeRunning, ApiError) as exc:
        print(exc, file=sys.stderr)
        return 1
    if status["transport"] == "solo":
        print("swarmnode: this node runs solo: there is no swarm to invite to (start it without --solo)",
              file=sys.stderr)
        return 1
    try:
        code = encode_invite(Invite(status["swarm"], status["transport"], tuple(status.get("join_addresses") or ())))
    except InviteError as exc:
        print(f"swarmnode: {exc}; try again in a few seconds", file=sys.stderr)
        return 1
    print(code)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("invite", help="print an invite code for the running node's swarm (swarmnode start --join CODE)",
                       description="Print one line holding the running node's swarm, transport and the addresses "
                                   "to dial (its relays' when it is behind NAT), with a checksum. Another node "
                                   "joins with `swarmnode start --join CODE`.")
    add_home_flag(p)
    p.set_defaults(func=cmd_invite)
