"""``swarmnode service install|uninstall|status``: run the node in the background for the user."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from swarmnode.cli.flags import add_home_flag
from swarmnode.config import ENV_PREFIX, load_config
from swarmnode.node.service import NODE, RELAY, ServiceError, install, manager_for, start_command, status, uninstall
from swarmnode.paths import NodeHome, home_setting


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("service", help="run the node in the background at login (launchd / systemd)",
                            description="Install, remove or inspect a user service that runs `swarmnode start` "
                                        "at login and restarts it after a crash.")
    parser.add_argument("action", choices=("install", "uninstall", "status"))
    add_home_flag(parser)
    parser.add_argument("--config", metavar="PATH", help="config file the service uses")
    parser.add_argument("--relay", action="store_true", help="the service runs `swarmnode relay` (a network-only "
                                                             "public node) instead of a training node")
    parser.set_defaults(func=run_service)


def _service_paths(args: argparse.Namespace) -> tuple[Path | None, Path | None]:
    """Absolute --home and --config for the service, checked by loading the config once.

    The user's SWARMNODE_HOME is written into the command line because a service does not
    inherit the shell's environment; a config that would not load fails here instead of in a
    restart loop.
    """
    raw_home = home_setting(args.home)
    home = NodeHome.resolve(raw_home).root if raw_home else None
    config = Path(args.config).expanduser().resolve() if args.config else None
    load_config({"home": str(home)} if home else {}, config_path=config)
    return home, config


def run_service(args: argparse.Namespace) -> int:
    try:
        # Only install needs the node's paths; uninstall and status work whatever the config says.
        kind = RELAY if args.relay else NODE
        command = start_command(*_service_paths(args), kind=kind) if args.action == "install" else []
        manager = manager_for(sys.platform, command, Path.home(), os.environ, os.getuid(), kind)
        if args.action == "status":
            print(status(manager))
        elif args.action == "install":
            ignored = sorted(n for n in os.environ if n.startswith(ENV_PREFIX) and n != ENV_PREFIX + "HOME")
            if ignored:
                print(f"note: the service does not see {', '.join(ignored)}; put those settings in config.toml")
            install(manager)
            print(f"installed the {manager.name} {manager.path}; it runs: {' '.join(command)}")
            print(manager.logs_hint)
        elif uninstall(manager):
            print(f"asked {manager.tool} to stop the service, and removed {manager.path}")
        else:
            print(f"nothing to remove: {manager.path} does not exist")
        return 0
    except ServiceError as exc:
        print(f"swarmnode: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"swarmnode: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
