"""Flags several subcommands share: one per config key, and ``--home``."""

from __future__ import annotations

import argparse
import sys
import typing

from swarmnode.config import NodeConfig, field_type
from swarmnode.paths import NodeHome

HOME_FLAG_HELP = "the node's directory (default: $SWARMNODE_HOME, else the platform's user data directory)"


def command_summary(doc: str | None) -> str:
    """A subcommand's description from its module's docstring, whose first line reads
    ``swarmnode X``: what it does. That line after its label, less the full stop; "" under
    ``python -OO``, which strips docstrings."""
    return (doc or "").partition("\n")[0].partition(": ")[2].rstrip(".")


def add_home_flag(parser: argparse.ArgumentParser) -> None:
    """``--home DIR`` for a command that works on one node's files (read with NodeHome.from_flag)."""
    parser.add_argument("--home", metavar="DIR", help=HOME_FLAG_HELP)


def created_home(home: str | None, what: str) -> NodeHome | None:
    """The home directory ``home`` (None: the default), created; None after printing why it cannot
    be (``what`` names whose home it is, for the message)."""
    resolved = NodeHome.resolve(home)
    try:
        return resolved.create()
    except OSError as exc:
        print(f"swarmnode: cannot create the {what}'s home {resolved.root}: {exc.strerror}; choose another with "
              "--home DIR", file=sys.stderr)
        return None


def add_config_flags(parser: argparse.ArgumentParser, exclude: typing.Container[str] = (),
                     config_help: str = "TOML config file (default: <home>/config.toml, else the platform config "
                                        "directory)") -> None:
    """One flag per config key (``--max-new-tokens`` for ``max_new_tokens``), default unset.

    Flags stay strings (or True for switches) so :func:`swarmnode.config.load_config` types
    and checks them in one place and can tell which ones the user gave.
    """
    groups: dict[str, argparse._ArgumentGroup] = {}
    parser.add_argument("--config", metavar="PATH", help=config_help)
    for f in NodeConfig.keys():
        if f.name in exclude:
            continue
        section = f.metadata["section"]
        group = groups.setdefault(section, parser.add_argument_group(f"{section} options"))
        flag = "--" + f.name.replace("_", "-")
        tp, _ = field_type(f.name)
        help_text = f.metadata["help"].replace("%", "%%")  # argparse formats help with %
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
