"""``swarmnode models``: the models a node can fetch by name, which are cached, and what ``auto`` picks here."""

from __future__ import annotations

import argparse
import json
from typing import Any

from swarmnode.catalogue import ALIASES, AUTO_RULE, CATALOGUE
from swarmnode.cli.flags import command_summary
from swarmnode.config import load_config
from swarmnode.docsgen import toml_value


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list the models a node can fetch by name, and which one 'auto' picks here",
                       description=f"{command_summary(__doc__)}. {AUTO_RULE}")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--device", help="the device 'auto' decides for (default: the config's, else auto)")
    p.add_argument("--config", metavar="PATH", help="TOML config file to read the device from")
    p.set_defaults(func=cmd_models)


def _mb(n: int) -> str:
    return f"{n / 1e6:.0f} MB"


def cmd_models(args: argparse.Namespace) -> int:
    cfg = load_config({"device": args.device} if args.device else {}, config_path=args.config).config
    # torch comes with these (the device decides what auto picks)
    from swarmnode.node.modelchoice import auto_choice, node_dtype
    from swarmnode.train.fetch import ModelError, is_ready, model_dir
    from swarmnode.train.model import precision_name

    try:
        machine, choice = auto_choice(cfg.device)
        precision = precision_name(node_dtype(cfg))
    except ModelError as exc:
        raise SystemExit(f"swarmnode: {exc}") from None
    rows: list[dict[str, Any]] = [
        dict(name=m.name, title=m.title, parameters=m.parameters, download_bytes=m.download_bytes,
             license=m.license, license_url=m.license_url, attribution=m.attribution,
             cached=is_ready(m, precision), path=str(model_dir(m, precision)), precision=precision,
             sha256=m.sha256, packages=[p.spec for p in m.packages],
             aliases=[a for a, n in ALIASES.items() if n == m.name], round=dict(m.round))
        for m in CATALOGUE.values()]
    if args.json:
        print(json.dumps({"models": rows, "auto": {"name": choice.name, "reason": choice.reason,
                                                   "accelerator": machine.accelerator,
                                                   "memory_bytes": machine.memory_bytes, "cores": machine.cores}},
                         indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    lic = max(len(r["license"]) for r in rows)
    print(f"{'name':<{width}}  {'parameters':>10}  {'download':>8}  {'license':<{lic}}  cached")
    for r in rows:
        print(f"{r['name']:<{width}}  {r['parameters'] / 1e6:>8.0f} M  {_mb(r['download_bytes']):>8}  "
              f"{r['license']:<{lic}}  {'yes' if r['cached'] else 'no'}")
    print(f"\nauto picks {choice.name} on this machine: {choice.reason}")
    picked = dict(CATALOGUE[choice.name].round)
    print("its round, for the keys a config leaves at their defaults: "
          + (", ".join(f"{k} = {toml_value(v)}" for k, v in picked.items()) if picked else "the defaults")
          + " (docs/configuration.md says why)\n")
    for m in CATALOGUE.values():
        print(f"{m.name}: {m.notice}")
    return 0
