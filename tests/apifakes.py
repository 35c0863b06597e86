"""A fake node control, a filled NodeState and a real daemon process for the API and dashboard tests."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prometheus_client import generate_latest

from swarmnode.events import PauseChanged
from swarmnode.node.api import ApiServer
from swarmnode.node.state import NodeInfo, NodeState
from swarmnode.paths import NodeHome
from swarmnode.records import RoundRecord, YardstickRecord
from swarmnode.swarm.transport.counters import AnnounceStores, TransportCounters
from waiting import wait_until


class FakeControl:
    """Records what the API asked; serves a settable peer table."""

    def __init__(self, peers: list[dict] | None = None, state: NodeState | None = None) -> None:
        self.calls: list[str] = []
        self.credit_summary: dict | None = None
        self.key: str | None = None
        self.stats = {"published": 3, "delivered": 5}
        self.transport_counters: TransportCounters | None = TransportCounters(
            refused={"far_expiry": 3, "not_a_bundle": 1}, evicted=2, stored_bytes={"stored": 4096, "cached": 0},
            announce_stores=AnnounceStores(direct=6, traversal=2, direct_failed=1))
        self.state = state
        bob = peer_row("12D3KooWPeerBob", "bob", accepted=5, rejected=1, reward=0.25, via="lan")
        self.peers = [bob] if peers is None else peers

    def request_stop(self) -> None:
        self.calls.append("stop")

    def pause(self) -> None:
        self.calls.append("pause")
        if self.state is not None:  # as the daemon does: NodeState.emit is the one writer of paused
            self.state.emit(PauseChanged(True))

    def resume(self) -> None:
        self.calls.append("resume")
        if self.state is not None:
            self.state.emit(PauseChanged(False))

    def peer_rows(self) -> list[dict]:
        return self.peers

    def peer_count(self) -> int:
        return len(self.peers)

    def join_addresses(self) -> list[str]:
        return ["/ip4/192.168.1.20/tcp/4101/p2p/12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq"]

    def swarm_key(self) -> str | None:
        return self.key

    def transport_stats(self) -> dict[str, int]:
        return self.stats

    def credits(self) -> dict | None:
        return self.credit_summary

    def counters(self) -> TransportCounters | None:
        return self.transport_counters


def metrics_text(state: NodeState, control: FakeControl | None = None) -> str:
    """The ``/metrics`` text the API serves for ``state`` and ``control`` (default: no peer,
    no transport)."""
    if control is None:
        control = FakeControl([])
        control.stats, control.transport_counters = {}, None
    server = ApiServer(state, control, home=NodeHome(Path(tempfile.gettempdir()) / "unused-home"))
    return generate_latest(server.registry).decode()


def metric_values(text: str) -> dict[str, float]:
    """``/metrics`` samples: each line's name and labels as written (prometheus_client writes
    the labels sorted by name) to its value."""
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def peer_row(peer_id: str, name: str, *, accepted: int, rejected: int, reward: float, seen_ago: float = 3.0,
             model: str | None = "SmolLM2-135M-Instruct", groups: int = 0, with_signal: int = 0,
             reward_here: float | None = None, dropped: dict[str, int] | None = None, via: str | None = None) -> dict:
    """A row of the exchange's peer table (the API adds ``drawn``)."""
    return {"peer_id": peer_id, "name": name, "first_seen": time.time() - 600, "last_seen": time.time() - seen_ago,
            "accepted": accepted, "rejected": rejected,
            "rejected_by_reason": {"bad_signature": rejected} if rejected else {}, "last_round": 7,
            "reported_mean_reward": reward, "model": model, "groups": groups, "groups_with_signal": with_signal,
            "reward_here": reward_here, "groups_dropped": dropped or {}, "via": via}


def make_state() -> NodeState:
    return NodeState(info=NodeInfo(peer_id="12D3KooWSelfAlice", name="alice", swarm="test-swarm",
                                   transport="solo", model="tiny", device="cpu", home="/tmp/x"))


def finished_row(r: int, reward: float, by_task: dict[str, float] | None = None, **fields) -> RoundRecord:
    """A finished round's record, as swarmnode.node.round makes them; ``fields`` set others."""
    defaults = {"seconds_generate": 1.0, "tokens_generated": 100}
    return RoundRecord(round=r, started_at=1_750_000_000.0 + 10 * r, seconds=2.0,
                       seconds_score=0.5, seconds_train=0.5, reward_mean=reward,
                       reward_by_task=by_task if by_task is not None else {"basic_arithmetic": reward,
                                                                           "base_conversion": reward / 2},
                       n_local=4, n_external=0, n_dropped_zero_adv=0, completions=2,
                       max_new_tokens=8, loss=0.125, peers=0, **{**defaults, **fields})


def yardstick_row(r: int, score: float, by_family: dict[str, float], questions: int = 6) -> YardstickRecord:
    """A yardstick record after ``r`` rounds, as swarmnode.node.round makes them."""
    return YardstickRecord(round=r, started_at=1_750_000_000.0 + 10 * r, score=score, by_family=by_family,
                           by_level={}, questions=questions, seconds=1.0)


class RealDaemon:
    """``swarmnode start --solo`` on a tiny local model in a child process, for end-to-end tests."""

    def __init__(self, home: NodeHome, model_dir: Path, log: Path):
        self.home, self.model_dir, self.log = home, model_dir, log
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "RealDaemon":
        cmd = [sys.executable, "-m", "swarmnode", "start", "--home", str(self.home.root), "--model",
               str(self.model_dir), "--solo", "--questions", "2", "--completions", "2", "--max-new-tokens", "8",
               "--device", "cpu", "--threads", "1", "--priority", "normal"]  # nice 19 starves beside the workers
        self.proc = subprocess.Popen(cmd, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        return self

    def wait_for_api(self, timeout: float = 60.0) -> None:
        wait_until(self.home.api_file.exists, timeout, "the daemon's api.json", procs=[self.proc],
                   context=self.log.read_text)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
