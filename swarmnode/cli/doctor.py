"""``swarmnode doctor``: check that this machine can run a node, with a fix for each problem."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from swarmnode.cli.flags import add_config_flags, command_summary, given_flags
from swarmnode.config import load_config
from swarmnode.node.checks import PROBLEM
from swarmnode.node.doctor import render, run_checks
from swarmnode.swarm.invite import apply_invite


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("doctor", help="check that this machine can run a node, with a fix for each problem",
                            description=command_summary(__doc__))
    parser.add_argument("--json", action="store_true", help="print a JSON list of {check, status, detail, fix}")
    add_config_flags(parser)
    parser.set_defaults(func=run_doctor)


def run_doctor(args: argparse.Namespace) -> int:
    cfg = apply_invite(load_config(given_flags(args), config_path=args.config))
    checks = run_checks(cfg)
    print(json.dumps([asdict(c) for c in checks], indent=2) if args.json else render(checks))
    return 1 if any(c.status == PROBLEM for c in checks) else 0

