"""``swarmnode relay``: run a network-only public node (bootstrap peer, DHT server, relay)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from swarmnode.cli.flags import add_config_flags, created_home, given_flags
from swarmnode.config import load_config
from swarmnode.node.logs import setup_logging
from swarmnode.node.relay import Relay, RelayError, bootstrap_lines
from swarmnode.swarm.bootstrap import resolve_bootstrap
from swarmnode.swarm.sealing import check_swarm_key

# The keys a relay reads; the model, round and training keys do not apply to it.
RELAY_KEYS = ("home", "log_level", "transport", "swarm", "bootstrap", "bootstrap_file", "listen", "announce",
              "api_port", "swarm_key")


def add_parser(sub: argparse._SubParsersAction) -> None:
    from swarmnode.config import NodeConfig

    p = sub.add_parser("relay", help="run a network-only public node for swarm operators (no model)",
                       description="Run a public peer of the swarm with no model: a bootstrap peer, a DHT "
                                   "server and a relay for nodes behind NAT. It prints its address for "
                                   "other nodes' bootstrap lists.")
    add_config_flags(p, exclude=[k.name for k in NodeConfig.keys() if k.name not in RELAY_KEYS])
    p.set_defaults(func=cmd_relay)


def cmd_relay(args: argparse.Namespace) -> int:
    loaded = load_config(given_flags(args), config_path=args.config)
    check_swarm_key(loaded)
    cfg = loaded.config
    home = created_home(cfg.home, "relay")
    if home is None:
        return 1
    setup_logging(home, cfg.log_level)
    # An operator's relay joins only the peers it is told about, never the packaged demo list.
    bootstrap = resolve_bootstrap(cfg) if (cfg.bootstrap or cfg.bootstrap_file) else []

    def ready(addresses: list[str]) -> None:
        print(f"relay for swarm '{cfg.swarm}' over {cfg.transport} is up; give nodes this bootstrap entry:\n"
              f"{bootstrap_lines(addresses)}", flush=True)

    try:
        return asyncio.run(Relay(cfg, home, bootstrap).run(ready))
    except RelayError as exc:
        print(f"swarmnode: {exc}", file=sys.stderr)
        return 1
