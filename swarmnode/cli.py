"""The ``swarmnode`` command line.

Each subcommand lives in the module that holds its work and exposes ``add_parser(sub)``
(which registers it and sets ``func``); this file only wires them together and turns the
errors users can fix into one line and an exit status (2 for bad configuration).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import typing

from swarmnode import __version__
from swarmnode.config import ConfigError, NodeConfig, _HINTS, _base_type

# Modules that contribute subcommands, in the order `--help` lists them.
COMMAND_MODULES = [
    "swarmnode.daemon",
    "swarmnode.identity",
    "swarmnode.configcmd",
    "swarmnode.service",
    "swarmnode.doctor",
    "swarmnode.client",
    "swarmnode.experiment",
]


def add_config_flags(parser: argparse.ArgumentParser, exclude: typing.Container[str] = ()) -> None:
    """One flag per config key (``--max-new-tokens`` for ``max_new_tokens``), default unset.

    Flags stay strings (or True for switches) so :func:`swarmnode.config.load_config` types
    and checks them in one place and can tell which ones the user gave.
    """
    groups: dict[str, argparse._ArgumentGroup] = {}
    parser.add_argument("--config", metavar="PATH", help="TOML config file (default: <home>/config.toml, "
                                                          "else the platform config directory)")
    for f in NodeConfig.keys():
        if f.name in exclude:
            continue
        section = f.metadata["section"]
        group = groups.setdefault(section, parser.add_argument_group(f"{section} options"))
        flag = "--" + f.name.replace("_", "-")
        tp, _ = _base_type(_HINTS[f.name])
        help_text = f.metadata["help"]
        if tp is bool:
            group.add_argument(flag, dest=f.name, action="store_const", const="true", default=None, help=help_text)
            group.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name, action="store_const",
                               const="false", default=None, help=argparse.SUPPRESS)
        elif tp is list:
            group.add_argument(flag, dest=f.name, action="append", default=None, metavar="VALUE",
                               help=help_text + " Repeatable.")
        else:
            group.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(), help=help_text)


def given_flags(args: argparse.Namespace) -> dict[str, typing.Any]:
    """The config flags the user actually gave (list flags joined for the text parser)."""
    out: dict[str, typing.Any] = {}
    for f in NodeConfig.keys():
        value = getattr(args, f.name, None)
        if value is None:
            continue
        out[f.name] = ",".join(value) if isinstance(value, list) else value
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swarmnode", description=__doc__.splitlines()[0].rstrip("."))
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
