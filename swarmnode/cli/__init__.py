"""The ``swarmnode`` command line.

Each subcommand is a module of this package exposing ``add_parser(sub)`` (which registers it
and sets ``func``): parsing and printing only, the work lives in the layers below. This file
wires them together and turns the errors users can fix into one line and an exit status (2
for bad configuration).

May import: base, compat, train, swarm, node, experiment, tui (a handler imports what it
needs when it runs, so ``--help`` and the relay load no torch).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from swarmnode import __version__
from swarmnode.config import ConfigError

# Modules that contribute subcommands, in the order `--help` lists them.
COMMAND_MODULES = [
    "swarmnode.cli.start",
    "swarmnode.cli.relay",
    "swarmnode.cli.identity",
    "swarmnode.cli.config",
    "swarmnode.cli.service",
    "swarmnode.cli.doctor",
    "swarmnode.cli.models",
    "swarmnode.cli.status",
    "swarmnode.cli.credits",
    "swarmnode.cli.invite",
    "swarmnode.cli.experiment",
    "swarmnode.cli.evaluate",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swarmnode", description=(__doc__ or "").partition("\n")[0].rstrip("."))
    parser.add_argument("--version", action="version", version=f"swarmnode {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"swarmnode: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
