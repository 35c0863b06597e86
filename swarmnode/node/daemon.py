"""The node daemon and ``swarmnode start``.

One asyncio event loop owns the schedule (and, once started, networking and the local
API); model work, which holds the CPU or GPU for seconds, runs in one worker thread of its
own (:class:`~swarmnode.node.threads.ModelThread`, which sets the node's thread count before
each job) so the loop stays responsive. The daemon registers what follows the round on the
node's events: the thread policy (:mod:`swarmnode.node.roundthreads`) and the yardstick's
schedule. Between rounds the node takes a piece of its yardstick, within the time its rounds
earn (:mod:`swarmnode.node.yardsticks`), so round 0 never waits for it. The first SIGINT or
SIGTERM asks the round in flight to stop at the next phase boundary (an abandoned round leaves
no trace and runs again on restart); the second forces an immediate exit.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import signal
import threading

from swarmnode.config import ConfigError, NodeConfig
from swarmnode.events import PauseChanged, PhaseChanged, ThreadsChosen
from swarmnode.node.api import ApiServer
from swarmnode.node.checkpoint import CheckpointError
from swarmnode.node.logs import report_a_slow_stop
from swarmnode.node.metrics import MetricsError
from swarmnode.node.priority import apply_priority
from swarmnode.node.round import Node, RoundAbandoned, derive_seed
from swarmnode.node.roundthreads import RoundThreads
from swarmnode.node.state import NodeInfo, NodeState
from swarmnode.node.threads import ModelThread, ThreadChoice, ThreadPolicy, confine_library_threads
from swarmnode.node.yardsticks import YardstickSchedule
from swarmnode.paths import NodeHome
from swarmnode.swarm.exchange import Exchange
from swarmnode.swarm.identity import Identity, IdentityError
from swarmnode.swarm.invite import invite_addresses
from swarmnode.swarm.link import NetworkLink, SoloLink
from swarmnode.swarm.transport import TransportError, transport_for
from swarmnode.swarm.transport.counters import TransportCounters
from swarmnode.train.answers import TokenBudget
from swarmnode.train.curriculum import LevelError, Levels
from swarmnode.train.model import ModelError, load_base_model, pick_device, pick_dtype
from swarmnode.train.policy import Policy
from swarmnode.train.tasks import Scorer, TaskSource, load_task_file

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
        self.yardstick: YardstickSchedule | None = None
        self.link: NetworkLink | None = None
        self.priority = "normal"
        self.threads = ThreadPolicy(cfg.threads, on_change=self._threads_changed)
        self.model = ModelThread(self.threads)
        self.state.listen(RoundThreads(self.threads))

    # ---- control (the local API calls these) --------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()
        if self._unpaused is not None:
            self._unpaused.set()

    def pause(self) -> None:
        self.state.emit(PauseChanged(True))
        if self._unpaused is not None:
            self._unpaused.clear()

    def resume(self) -> None:
        self.state.emit(PauseChanged(False))
        if self._unpaused is not None:
            self._unpaused.set()

    def peer_rows(self) -> list[dict]:
        if not self.node:
            return []
        lan = self.link.transport.lan_peers() if self.link else set()
        return [{**row, "via": "lan" if row["peer_id"] in lan else None} for row in self.node.swarm.peer_rows()]

    def join_addresses(self) -> list[str]:
        transport = self.link.transport if self.link else None
        return invite_addresses(transport.addresses(), transport.bootstrap) if transport else []

    def swarm_key(self) -> str | None:
        return self.cfg.swarm_key

    def peer_count(self) -> int:
        return self.node.swarm.peer_count() if self.node else 0

    def transport_stats(self) -> dict[str, int]:
        return self.link.transport_stats() if self.link else {}

    def counters(self) -> TransportCounters | None:
        return self.link.counters() if self.link else None

    def credits(self) -> dict | None:
        ledger = self.link.exchange.ledger if self.link else None
        return ledger.summary() if ledger is not None else None

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: exiting now without saving the round in flight")
            os._exit(128 + signum)
        log.info("stopping: a round still generating or scoring is abandoned (the last checkpoint stands), "
                 "one already training finishes and is saved (signal again to force)")
        self.request_stop()

    # ---- start-up ------------------------------------------------------------------------
    def _load(self) -> tuple[Identity, Policy, dict, int, Levels]:
        """Identity, task families, model and policy; runs in the model thread (seconds to minutes).

        The thread policy was made before: the load is the probe window of the first thread count."""
        cfg = self.cfg
        identity = Identity.load_or_create(self.home.identity_file)
        seed = cfg.seed if cfg.seed is not None else derive_seed(identity.peer_id)
        device = pick_device(cfg.device)
        self.state.info = NodeInfo(peer_id=identity.peer_id, name=identity.name, swarm=cfg.swarm,
                                   transport="solo" if cfg.solo else cfg.transport, model=cfg.model,
                                   device=str(device), home=str(self.home.root), priority=self.priority)
        log.info("node %s (%s), home %s", identity.name, identity.peer_id, self.home.root)
        families = load_task_file(cfg.tasks)
        try:
            levels = Levels.configured(families, cfg.levels, adaptive=cfg.adaptive_difficulty)
        except LevelError as exc:
            raise ConfigError("levels", str(exc)) from None
        log.info("loading model %s on %s", cfg.model, device)
        policy = Policy(load_base_model(cfg.model, device, pick_dtype(device, cfg.dtype)), cfg)
        choice = self.threads.start()
        log.info("threads: %d (%s)", choice.count, choice.reason)
        return identity, policy, families, seed, levels

    async def _build_node(self) -> tuple[Node, YardstickSchedule]:
        """The node, its swarm link open (unless solo), its yardstick's schedule following it and
        its last checkpoint restored."""
        try:
            identity, policy, families, seed, levels = await self.model.run(self._load)
        except (ModelError, IdentityError) as exc:
            raise StartupError(str(exc)) from None
        # Peers' responses are checked on the receive thread while the round's thread samples:
        # that check reads a copy of the tokenizer of its own.
        scorer = Scorer(families, budget=TokenBudget(copy.deepcopy(policy.tokenizer), self.cfg.max_new_tokens,
                                                     self.cfg.prefill_answer_tag))
        swarm = SoloLink() if self.cfg.solo else await self._join(identity, scorer, policy.model_name, families,
                                                                  levels)
        node = Node(self.cfg, self.home, policy, TaskSource(families, seed), scorer, swarm, self.state, seed,
                    levels=levels)
        yardstick = YardstickSchedule(node)
        self.state.listen(yardstick)
        try:
            await self.model.run(node.resume)
            await self.model.run(yardstick.restore)
        except (CheckpointError, MetricsError) as exc:
            raise StartupError(str(exc)) from None
        return node, yardstick

    async def _join(self, identity: Identity, scorer: Scorer, model_name: str, families: dict,
                    levels: Levels) -> NetworkLink:
        """Open the transport; the node trains alone (and keeps retrying) while no peer answers.
        Peers' groups of other ``families`` than this node's are dropped on arrival; ``levels``
        (the node's) steer a level-aware draw."""
        transport = transport_for(self.cfg, identity)
        exchange = Exchange(identity, self.cfg, scorer, model_name, state=self.state, on_ban=transport.block,
                            credits_dir=self.home.credits, families=families, levels=levels)
        self.link = NetworkLink(exchange, transport, self.state, asyncio.get_running_loop())
        try:
            await self.link.start()
        except TransportError as exc:
            raise StartupError(str(exc)) from None
        log.info("joined swarm '%s' over %s; listening on %s", self.cfg.swarm, self.cfg.transport,
                 ", ".join(self.link.transport.addresses()) or "(no address yet)")
        return self.link

    def _threads_changed(self, choice: ThreadChoice) -> None:
        self.state.emit(ThreadsChosen(**choice.as_dict()))

    # ---- the loop ------------------------------------------------------------------------
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self.state.bind_loop(loop)
        self._unpaused = asyncio.Event()
        self._unpaused.set()
        # First, before the worker threads exist: they inherit the priority of the thread making them.
        self.priority = apply_priority(self.cfg.priority)
        confine_library_threads()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, sig)
        self.state.emit(PhaseChanged("loading"))
        api = ApiServer(self.state, self, home=self.home, port=self.cfg.api_port)
        try:
            port = await api.start()
        except OSError as exc:  # ApiServer.start's messages say what failed and what to do
            raise StartupError(f"local API: {exc}") from None
        try:
            self.node, self.yardstick = await self._build_node()
            log.info("running: %s (%s), API on http://127.0.0.1:%d; watch it with `swarmnode tui --home %s`",
                     self.state.info.name, self.state.info.peer_id, port, self.home.root)
            if not self._stop.is_set():
                await self._rounds(self.node, self.yardstick)
        finally:
            report_a_slow_stop(self.home)
            if self.yardstick is not None:
                self.yardstick.abandon()
            if self.link is not None:
                await self.link.stop()
            await api.stop()
            self.model.close()
        return 0

    async def _rounds(self, node: Node, yardstick: YardstickSchedule) -> None:
        unpaused = self._unpaused
        assert unpaused is not None, "run() makes the event before the rounds start"
        done = 0
        while not self._stop.is_set():
            if self.cfg.rounds is not None and done >= self.cfg.rounds:
                break
            await self._yardstick(yardstick)
            self.state.emit(PhaseChanged("idle"))
            await unpaused.wait()
            if self._stop.is_set():
                break
            r = node.next_round
            try:
                record = await self.model.run(node.run_round, r, self._stop.is_set)
            except RoundAbandoned:
                log.info("round %d abandoned", r)
                break
            await self.model.run(node.finish_round, record)
            done += 1
            log.info("round %d: reward %.3f, %d local + %d external groups (%d dropped), loss %s, %d tokens, "
                     "%.1f s, %d threads", r, record.reward_mean, record.n_local, record.n_external,
                     record.n_dropped_zero_adv, "n/a" if record.loss is None else f"{record.loss:.4f}",
                     record.tokens_generated, record.seconds, record.threads)

    async def _yardstick(self, schedule: YardstickSchedule) -> None:
        """Take the piece of the yardstick the node's yardstick clock allows in this gap between
        rounds (:mod:`swarmnode.node.yardsticks`), so no round waits on it for long and round
        timings leave it out. A failure costs the record, not the node."""
        if self._stop.is_set():
            return
        try:
            record = await self.model.run(schedule.between_rounds, self._stop.is_set)
        except MetricsError as exc:
            log.warning("yardstick not recorded: %s", exc)
            return
        if record is not None:
            log.info("yardstick after %d rounds: %s on %d held-out questions (%s)", record.round,
                     "n/a" if record.score is None else f"{record.score:.3f}", record.questions,
                     "kept from an earlier node of this model and task mix" if schedule.cached
                     else f"{record.seconds:.1f} s between rounds")
