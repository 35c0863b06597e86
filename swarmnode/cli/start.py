"""``swarmnode start``: run a node in the foreground, or beside the dashboard with ``--tui``."""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys

from swarmnode.cli.flags import add_config_flags, created_home, given_flags
from swarmnode.config import NodeConfig, field_type, load_config
from swarmnode.node.logs import setup_logging
from swarmnode.paths import NodeHome
from swarmnode.swarm.invite import apply_invite


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("start", help="start a node (joins the swarm unless --solo)",
                       description="Start a node: it trains its model round after round and shares rollouts.")
    p.add_argument("--tui", action="store_true", help="run the node in the background and show the dashboard; "
                                                      "quitting the dashboard stops the node")
    add_config_flags(p)
    p.set_defaults(func=cmd_start)


def _child_argv(args: argparse.Namespace) -> list[str]:
    """``swarmnode start`` with the same flags, minus ``--tui``."""
    argv = [sys.executable, "-m", "swarmnode", "start"]
    if args.config:
        argv += ["--config", args.config]
    for key, value in given_flags(args).items():
        flag = "--" + key.replace("_", "-")
        if isinstance(getattr(args, key), list):
            for item in getattr(args, key):
                argv += [flag, item]
        elif field_type(key)[0] is bool:
            argv.append(flag if value == "true" else "--no-" + flag[2:])
        else:
            argv += [flag, str(value)]
    return argv


def _prepare(cfg: NodeConfig, home: NodeHome) -> None:
    """The model made ready in this (child) process: exit 2 with one line when it cannot be had."""
    setup_logging(home, cfg.log_level)
    from swarmnode.node.modelchoice import prepare
    from swarmnode.train.model import ModelError

    try:
        prepare(cfg)
    except ModelError as exc:
        print(f"swarmnode: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


def _prepare_in_foreground(cfg: NodeConfig, home: NodeHome) -> int:
    """Fetch and convert the node's model before the dashboard takes the screen, in a child
    process on this terminal: its progress bar and log lines show, a model that cannot be had
    ends here (exit 2), and torch never loads into the dashboard's process. Returns the exit code."""
    child = multiprocessing.get_context("spawn").Process(target=_prepare, args=(cfg, home))
    child.start()
    try:
        child.join()
    except KeyboardInterrupt:  # the child got the same Ctrl-C and stops by itself
        child.join()
        return 130
    return child.exitcode or 0


def _stop_child_on_hangup(child: subprocess.Popen) -> None:
    """A dashboard ended by its terminal closing (SIGHUP) or by ``kill`` (SIGTERM) dies without
    running its cleanup, and the node, in a session of its own, would train on unseen. So these
    signals first ask the node to stop (it finishes on its own), then end this process as they would have."""

    def stop(signum: int, frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for signum in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, stop)


def _start_with_dashboard(args: argparse.Namespace, home: NodeHome) -> int:
    """The node as a child process (logging to its home), the dashboard in the foreground."""
    from swarmnode.tui.app import run_dashboard

    child = subprocess.Popen(_child_argv(args), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    _stop_child_on_hangup(child)
    try:
        run_dashboard(home)
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=120)
            except subprocess.TimeoutExpired:
                child.kill()
    return child.wait()


def cmd_start(args: argparse.Namespace) -> int:
    loaded = load_config(given_flags(args), config_path=args.config)
    cfg = apply_invite(loaded)
    home = created_home(cfg.home, "node")
    if home is None:
        return 1
    if args.tui:
        return _prepare_in_foreground(cfg, home) or _start_with_dashboard(args, home)
    setup_logging(home, cfg.log_level)
    # torch comes with these: imported only when a node starts, so other commands (the relay,
    # --help) never load it.
    from swarmnode.node.checkpoint import CheckpointError
    from swarmnode.node.daemon import Daemon, StartupError
    from swarmnode.node.metrics import MetricsError
    from swarmnode.node.modelchoice import prepare
    from swarmnode.train.model import ModelError
    from swarmnode.train.tasks import TaskConfigError

    try:
        cfg = prepare(cfg, loaded.sources)  # before the node: a model that cannot be had is bad input (exit 2)
    except ModelError as exc:
        print(f"swarmnode: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(Daemon(cfg, home).run())
    except TaskConfigError as exc:
        print(f"swarmnode: tasks: {exc}", file=sys.stderr)
        return 2
    except (StartupError, CheckpointError, MetricsError) as exc:  # the last two: a round could not be saved
        print(f"swarmnode: {exc}", file=sys.stderr)
        return 1
