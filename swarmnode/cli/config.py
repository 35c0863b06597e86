"""``swarmnode config show`` and ``swarmnode config init``.

``show`` takes the same config flags as ``swarmnode start`` and prints the configuration that
command would run with, each value with where it came from (default, file, environment,
flag). ``init`` writes a ``config.toml`` into the node home with every key commented out at
its default, under its help text, so a user edits a file instead of reading documentation.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import textwrap
from pathlib import Path
from typing import Any

from swarmnode.catalogue import AUTO, catalogue_entry, model_round
from swarmnode.cli.flags import add_config_flags, add_home_flag, given_flags
from swarmnode.config import ConfigError, LoadedConfig, load_config
from swarmnode.docsgen import SECTION_TITLES, KeyDoc, key_docs, toml_value
from swarmnode.paths import NodeHome

_WRAP = 92


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("config", help="show the effective configuration, or write a commented config file",
                            description="Show the effective configuration, or write a commented config.toml.")
    actions = parser.add_subparsers(dest="config_action", metavar="ACTION", required=True)

    show = actions.add_parser("show", help="print every key's effective value and where it came from",
                              description="Print the configuration `swarmnode start` would use with the same "
                                          "flags, and where each value came from.")
    show.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_config_flags(show)
    show.set_defaults(func=run_show)

    init = actions.add_parser("init", help="write a commented config.toml into the node home",
                              description="Write <home>/config.toml with every key commented out at its default.")
    add_home_flag(init)
    init.add_argument("--force", action="store_true", help="overwrite an existing config.toml")
    init.set_defaults(func=run_init)


def _display(value: Any) -> str:
    return "(unset)" if value is None else toml_value(value)


def show_data(loaded: LoadedConfig) -> dict[str, Any]:
    """The JSON form of ``config show``: the file read, the resolved home, each key's value and source."""
    return {
        "file": str(loaded.file) if loaded.file else None,
        "home": str(NodeHome.resolve(loaded.config.home).root),
        "keys": {name: {"value": value, "source": loaded.sources[name]}
                 for name, value in dataclasses.asdict(loaded.config).items()},
    }


def show_text(loaded: LoadedConfig) -> str:
    """The table form of ``config show``: one line per key, grouped by section."""
    data = show_data(loaded)
    lines = [f"config file: {data['file'] or '(none)'}", f"node home:   {data['home']}"]
    docs = key_docs()
    width = max(len(d.name) for d in docs)
    value_width = min(40, max(len(_display(v["value"])) for v in data["keys"].values()))
    section = None
    for d in docs:
        if d.section != section:
            section = d.section
            lines += ["", f"[{section}]"]
        entry = data["keys"][d.name]
        lines.append(f"{d.name:<{width}}  {_display(entry['value']):<{value_width}}  {entry['source']}")
    return "\n".join(lines)


def with_model_round(loaded: LoadedConfig) -> LoadedConfig:
    """``loaded`` with the round of the catalogue model it names (source ``model:<name>``) for
    the keys it leaves at their defaults, as ``swarmnode start`` runs them. With ``auto`` the
    model is known only on the machine that starts (``swarmnode models``), and nothing changes."""
    taken = model_round(loaded.config.model, loaded.sources)
    if not taken:
        return loaded
    entry = catalogue_entry(loaded.config.model)
    source = f"model:{entry.name if entry else loaded.config.model}"
    return LoadedConfig(dataclasses.replace(loaded.config, **taken), {**loaded.sources, **dict.fromkeys(taken, source)},
                        loaded.file)


def run_show(args: argparse.Namespace) -> int:
    loaded = with_model_round(load_config(given_flags(args), config_path=args.config))
    print(json.dumps(show_data(loaded), indent=2) if args.json else show_text(loaded))
    if loaded.config.model == AUTO and not args.json:
        print(f"\nmodel {AUTO}: the model is picked at start (`swarmnode models` says which, here); its round then "
              "sets the keys above left at their defaults (docs/configuration.md, 'The round each model runs').")
    return 0


def _commented(text: str, indent: str = "# ") -> list[str]:
    return textwrap.wrap(text, width=_WRAP, initial_indent=indent, subsequent_indent=indent)


def _key_block(d: KeyDoc) -> list[str]:
    lines = _commented(d.help)
    if d.limits:
        lines += _commented(f"Allowed: {d.limits.replace('`', '')}.")
    lines += _commented(f"Environment: {d.env}; flag: {d.flag}.")
    if d.default is None:
        lines.append(f"# {d.name} = <{d.type}>    (unset by default)")
    else:
        lines.append(f"# {d.name} = {toml_value(d.default)}")
    return lines


def render_init() -> str:
    """A config file with every key commented out at its default under its help text.

    Section headers stay uncommented: the file parses as is, and uncommenting one key line
    is enough to set it.
    """
    lines = [
        "# swarmnode configuration.",
        "# Every key is commented out at its default: uncomment a line to change it.",
        "# Flags and SWARMNODE_* environment variables override this file;",
        "# `swarmnode config show` prints the effective values and where they came from.",
        "# Section headers are for reading only: any key may sit under any of them.",
    ]
    section = None
    for d in key_docs():
        if d.section != section:
            section = d.section
            lines += ["", f"# --- {SECTION_TITLES.get(section, section)} ---", f"[{section}]"]
        lines += [""] + _key_block(d)
    return "\n".join(lines) + "\n"


def _init_home(home_flag: str | None) -> NodeHome:
    return NodeHome.from_flag(home_flag)


def write_init(home: NodeHome, force: bool = False) -> Path:
    """Write :func:`render_init` to ``home.config_file``; refuse to overwrite unless ``force``."""
    path = home.config_file
    if path.exists() and not force:
        raise ConfigError("home", f"{path} exists already; pass --force to overwrite it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_init(), encoding="utf-8")
    except OSError as exc:
        raise ConfigError("home", f"cannot write {path}: {exc.strerror}; choose another --home") from None
    return path


def run_init(args: argparse.Namespace) -> int:
    path = write_init(_init_home(args.home), force=args.force)
    print(f"wrote {path}")
    print("edit it, then check the result with `swarmnode config show"
          + (f" --home {args.home}`" if args.home else "`"))
    return 0
