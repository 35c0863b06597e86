"""The node daemon and ``swarmnode start``.

One asyncio event loop owns the schedule (and, once started, networking and the local
API); model work, which holds the CPU or GPU for seconds, runs in a worker thread so the
loop stays responsive. The first SIGINT or SIGTERM asks the round in flight to stop at the
next phase boundary (an abandoned round leaves no trace and runs again on restart); the
second forces an immediate exit.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading

from swarmnode.api import ApiServer
from swarmnode.checkpoint import CheckpointError
from swarmnode.config import NodeConfig, load_config
from swarmnode.exchange import Exchange
from swarmnode.identity import Identity, IdentityError
from swarmnode.logs import setup_logging
from swarmnode.metrics import MetricsError
from swarmnode.model import ModelError, load_base_model, pick_device
from swarmnode.node import Node, RoundAbandoned, derive_seed
from swarmnode.paths import NodeHome
from swarmnode.policy import Policy
from swarmnode.state import NodeInfo, NodeState
from swarmnode.swarm import NetworkLink, SoloLink
from swarmnode.tasks import Scorer, TaskConfigError, TaskSource, load_task_file
from swarmnode.transport import TransportError, transport_for

log = logging.getLogger("swarmnode")


class StartupError(RuntimeError):
    """The node cannot start; ``str()`` is one line for the user."""


class Daemon:
    def __init__(self, cfg: NodeConfig, home: NodeHome):
        self.cfg = cfg
        self.home = home
        self.state = NodeState()
        self._stop = threading.Event()
        self._unpaused: asyncio.Event | None = None
        self._signals = 0
        self.node: Node | None = None
        self.link: NetworkLink | None = None

    # ---- control (the local API calls these) --------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()
        if self._unpaused is not None:
            self._unpaused.set()

    def pause(self) -> None:
        self.state.paused = True
        if self._unpaused is not None:
            self._unpaused.clear()

    def resume(self) -> None:
        self.state.paused = False
        if self._unpaused is not None:
            self._unpaused.set()

    def peer_rows(self) -> list[dict]:
        return self.node.swarm.peer_rows() if self.node else []

    def peer_count(self) -> int:
        return self.node.swarm.peer_count() if self.node else 0

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: exiting now without saving the round in flight")
            os._exit(128 + signum)
        log.info("stopping: the round in flight is abandoned, the last checkpoint stands "
                 "(signal again to force)")
        self.request_stop()

    # ---- start-up ------------------------------------------------------------------------
    def _build_node(self) -> Node:
        """Identity, model, policy, tasks; runs in the worker thread (seconds to minutes)."""
        cfg = self.cfg
        if cfg.threads:
            import torch

            torch.set_num_threads(cfg.threads)
        identity = Identity.load_or_create(self.home.identity_file)
        seed = cfg.seed if cfg.seed is not None else derive_seed(identity.peer_id)
        device = pick_device(cfg.device)
        self.state.info = NodeInfo(peer_id=identity.peer_id, name=identity.name, swarm=cfg.swarm,
                                   transport="solo" if cfg.solo else cfg.transport, model=cfg.model,
                                   device=str(device), home=str(self.home.root))
        log.info("node %s (%s), home %s", identity.name, identity.peer_id, self.home.root)
        families = load_task_file(cfg.tasks)
        log.info("loading model %s on %s", cfg.model, device)
        base = load_base_model(cfg.model, device)
        policy = Policy(base, cfg)
        node = Node(cfg, self.home, policy, TaskSource(families, seed), Scorer(families), SoloLink(),
                    self.state, seed)
        node.resume()
        self.identity = identity
        return node

    # ---- the loop ------------------------------------------------------------------------
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self.state.bind_loop(loop)
        self._unpaused = asyncio.Event()
        self._unpaused.set()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, sig)
        self.state.emit("phase", phase="loading")
        api = ApiServer(self.state, self, home=self.home, port=self.cfg.api_port)
        try:
            port = await api.start()
        except OSError as exc:  # ApiServer.start's messages say what failed and what to do
            raise StartupError(f"local API: {exc}") from None
        try:
            try:
                self.node = await asyncio.to_thread(self._build_node)
            except (ModelError, CheckpointError, IdentityError, MetricsError) as exc:
                raise StartupError(str(exc)) from None
            if not self.cfg.solo:
                try:
                    await self._join(self.node)
                except TransportError as exc:
                    raise StartupError(str(exc)) from None
            log.info("running: %s (%s), API on http://127.0.0.1:%d; watch it with `swarmnode tui --home %s`",
                     self.state.info.name, self.state.info.peer_id, port, self.home.root)
            if not self._stop.is_set():
                await self._rounds(self.node)
        finally:
            if self.link is not None:
                await self.link.stop()
            await api.stop()
        return 0

    async def _join(self, node: Node) -> None:
        """Open the transport and switch the node from solo to the network link."""
        transport = transport_for(self.cfg, self.identity)
        exchange = Exchange(self.identity, self.cfg, node.scorer, node.policy.model_name, state=self.state,
                            on_ban=transport.block)
        self.link = NetworkLink(exchange, transport, self.state, asyncio.get_running_loop())
        await self.link.start()
        node.swarm = self.link
        log.info("joined swarm '%s' over %s; listening on %s", self.cfg.swarm, self.cfg.transport,
                 ", ".join(self.link.transport.addresses()) or "(no address yet)")

    async def _rounds(self, node: Node) -> None:
        done = 0
        while not self._stop.is_set() and (self.cfg.rounds is None or done < self.cfg.rounds):
            self.state.emit("phase", phase="idle")
            await self._unpaused.wait()
            if self._stop.is_set():
                break
            r = node.next_round
            try:
                row = await asyncio.to_thread(node.run_round, r, self._stop.is_set)
            except RoundAbandoned:
                log.info("round %d abandoned", r)
                break
            await asyncio.to_thread(node.finish_round, row)
            done += 1
            log.info("round %d: reward %.3f, %d local + %d external groups (%d dropped), loss %s, %d tokens, "
                     "%.1f s", r, row["reward_mean"], row["n_local"], row["n_external"],
                     row["n_dropped_zero_adv"], "n/a" if row["loss"] is None else f"{row['loss']:.4f}",
                     row["tokens_generated"], row["seconds"])


def add_parser(sub: argparse._SubParsersAction) -> None:
    from swarmnode.cli import add_config_flags

    p = sub.add_parser("start", help="start a node (joins the swarm unless --solo)",
                       description="Start a node: it trains its model round after round and shares rollouts.")
    p.add_argument("--tui", action="store_true", help="run the node in the background and show the dashboard; "
                                                      "quitting the dashboard stops the node")
    add_config_flags(p)
    p.set_defaults(func=cmd_start)


def _child_argv(args: argparse.Namespace) -> list[str]:
    """``swarmnode start`` with the same flags, minus ``--tui``."""
    from swarmnode.cli import given_flags
    from swarmnode.config import _HINTS, _base_type

    argv = [sys.executable, "-m", "swarmnode", "start"]
    if args.config:
        argv += ["--config", args.config]
    for key, value in given_flags(args).items():
        flag = "--" + key.replace("_", "-")
        if isinstance(getattr(args, key), list):
            for item in getattr(args, key):
                argv += [flag, item]
        elif _base_type(_HINTS[key])[0] is bool:
            argv.append(flag if value == "true" else "--no-" + flag[2:])
        else:
            argv += [flag, str(value)]
    return argv


def _start_with_dashboard(args: argparse.Namespace, home: NodeHome) -> int:
    """The node as a child process (logging to its home), the dashboard in the foreground."""
    import subprocess

    from tui.app import run_dashboard

    child = subprocess.Popen(_child_argv(args), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
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
    from swarmnode.cli import given_flags

    cfg = load_config(given_flags(args), config_path=args.config).config
    home = NodeHome.resolve(cfg.home)
    try:
        home.create()
    except OSError as exc:
        print(f"swarmnode: cannot create the node's home {home.root}: {exc.strerror}; choose another with "
              "--home DIR", file=sys.stderr)
        return 1
    if args.tui:
        return _start_with_dashboard(args, home)
    setup_logging(home, cfg.log_level)
    try:
        return asyncio.run(Daemon(cfg, home).run())
    except TaskConfigError as exc:
        print(f"swarmnode: tasks: {exc}", file=sys.stderr)
        return 2
    except (StartupError, CheckpointError, MetricsError) as exc:  # the last two: a round could not be saved
        print(f"swarmnode: {exc}", file=sys.stderr)
        return 1
