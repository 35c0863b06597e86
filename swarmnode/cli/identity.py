"""``swarmnode identity``: this node's PeerID, name and key file."""

from __future__ import annotations

import argparse
import json
import sys

from swarmnode.cli.flags import add_home_flag
from swarmnode.paths import NodeHome
from swarmnode.swarm.identity import Identity, IdentityError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("identity", help="Show this node's PeerID, name and key file (created if missing).",
                       description="Show this node's PeerID, name and key file; create the key if missing.")
    add_home_flag(p)
    p.add_argument("--json", action="store_true", help="Print one JSON object (peer_id, name, key_path).")
    p.set_defaults(func=_cmd_identity)


def _cmd_identity(args: argparse.Namespace) -> int:
    home = NodeHome.from_flag(args.home)
    try:
        identity = Identity.load_or_create(home.identity_file)
    except IdentityError as exc:
        print(f"swarmnode: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"peer_id": identity.peer_id, "name": identity.name, "key_path": str(identity.path)}))
    else:
        print(f"PeerID:   {identity.peer_id}\nname:     {identity.name}\nkey file: {identity.path}")
    return 0
