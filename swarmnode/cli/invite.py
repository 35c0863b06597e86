"""``swarmnode invite``: print the running node's invite code, one line another node joins with;
``swarmnode swarm-key``: print a new private swarm's key."""

from __future__ import annotations

import argparse
import asyncio
import sys

from swarmnode.cli.flags import add_home_flag
from swarmnode.node.client import ApiError, NodeApi, NoNodeRunning
from swarmnode.paths import NodeHome
from swarmnode.swarm.invite import Invite, InviteError, encode_invite
from swarmnode.swarm.sealing import new_swarm_key


async def _status(home: NodeHome) -> tuple[dict, str | None]:
    async with NodeApi(home) as api:
        return await api.status(), await api.swarm_key()


def cmd_invite(args: argparse.Namespace) -> int:
    try:
        status, swarm_key = asyncio.run(_status(NodeHome.from_flag(args.home)))
    except (NoNodeRunning, ApiError) as exc:
        print(exc, file=sys.stderr)
        return 1
    if status["transport"] == "solo":
        print("swarmnode: this node runs solo: there is no swarm to invite to (start it without --solo)",
              file=sys.stderr)
        return 1
    try:
        code = encode_invite(Invite(status["swarm"], status["transport"], tuple(status.get("join_addresses") or ()),
                                    swarm_key))
    except InviteError as exc:
        print(f"swarmnode: {exc}; try again in a few seconds", file=sys.stderr)
        return 1
    if swarm_key:
        print("swarmnode: this invite carries the private swarm's key: whoever gets the line can join the swarm "
              "and read its bundles; share it only with them", file=sys.stderr)
    print(code)
    return 0


def cmd_swarm_key(args: argparse.Namespace) -> int:
    print(new_swarm_key())
    print("swarmnode: a new swarm key: set it as swarm_key on every node of the private swarm (or start one "
          "node with it and share `swarmnode invite`); whoever has it can join", file=sys.stderr)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("invite", help="print an invite code for the running node's swarm (swarmnode start --join CODE)",
                       description="Print one line holding the running node's swarm, transport and the addresses "
                                   "to dial (its relays' when it is behind NAT), with a checksum, and the swarm "
                                   "key of a private swarm. Another node joins with `swarmnode start --join CODE`.")
    add_home_flag(p)
    p.set_defaults(func=cmd_invite)
    k = sub.add_parser("swarm-key", help="print a new secret key for a private swarm (config key swarm_key)",
                       description="Print a new random swarm key (32 bytes, with a checksum). Nodes with it "
                                   "seal their records, announcements and bundles under it; nodes without it "
                                   "can neither read nor write them.")
    k.set_defaults(func=cmd_swarm_key)
