"""Three networked nodes on 127.0.0.1: the bootstrap peer dies and comes back, a peer dies mid-round
and comes back; every node keeps training throughout and the swarm joins up again.

B is the bootstrap peer (fixed listen address and identity); N1 and N2 bootstrap through it. Each
node runs in its own session, so killing one takes its DHT process and p2pd daemon with it, as a
crash or power loss of that machine would.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nodeproc import free_port, home_peer_id, metric_rows, start_argv, write_signal_tasks
from swarmnode.swarm.address import peer_id_of
from swarmnode.swarm.identity import Identity
from swarmnode.swarm.transport import joining
from swarmnode.swarm.transport.base import Transport
from waiting import wait_until

SWARM = "rejoin-test"



class Node:
    """One ``swarmnode start`` process (and its children) with its home."""

    def __init__(self, name: str, home: Path, argv: list[str], logs: Path):
        self.name, self.home, self.argv, self.logs = name, home, argv, logs
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with open(self.logs / f"{self.name}-{self.starts}.txt", "w") as err:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> int | None:
        """SIGINT to the node alone (it stops its own DHT and daemons); its exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def rows(self) -> list[dict]:
        return metric_rows(self.home)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        return (self.logs / f"{self.name}-{self.starts}.txt").read_text()


def _until(what: str, check, nodes: list[Node], timeout: float = 180.0) -> float:
    """Wait for ``check()``; fail naming ``what`` if it times out or a node dies. Returns seconds waited."""
    t0 = time.monotonic()
    wait_until(check, timeout, what, interval=0.2, procs=[n.proc for n in nodes],
               context=lambda: "\n".join(f"{n.name}: {n.stderr()[-3000:]}" for n in nodes if not n.alive()))
    return time.monotonic() - t0


def _rows_since(node: Node, n: int) -> list[dict]:
    return node.rows()[n:]


def _contiguous(node: Node) -> None:
    rounds = [r["round"] for r in node.rows()]
    assert rounds == list(range(len(rounds))), (node.name, rounds)


class _FakeTransport(Transport):
    """Connected to whoever the test says; a dial succeeds when the test says the peer is up."""

    name = "fake"

    def __init__(self, bootstrap: list[str]):
        super().__init__(Identity.generate(), "fake-swarm", bootstrap)
        self.connected: list[str] = []
        self.up: set[str] = set()
        self.dials: list[str] = []

    async def _start(self) -> None:
        pass

    async def _stop(self) -> None:
        pass

    async def _publish(self, round_no: int, data: bytes) -> None:
        pass

    async def _dial(self, maddr: str) -> bool:
        self.dials.append(maddr)
        peer = peer_id_of(maddr)
        if peer in self.up:
            self.connected.append(peer)
            return True
        return False

    def peers(self) -> list[str]:
        return list(self.connected)

    def addresses(self) -> list[str]:
        return []


async def test_a_node_with_other_peers_still_redials_its_returning_bootstrap_peer(monkeypatch):
    fast = joining.Backoff
    monkeypatch.setattr(joining, "Backoff", lambda rng=None: fast(first=0.01, cap=0.05, rng=rng))
    boot = Identity.generate().peer_id
    t = _FakeTransport([f"/ip4/127.0.0.1/tcp/1/p2p/{boot}"])
    t.connected = ["12D3KooWsomeOtherPeer"]  # N1 still sees N2, but the bootstrap peer is down
    await t.start()
    await asyncio.sleep(0.2)
    assert len(t.dials) >= 2 and boot not in t.connected
    t.up.add(boot)  # it comes back
    deadline = time.time() + 5
    while boot not in t.connected:
        assert time.time() < deadline, "the returning bootstrap peer was never dialled"
        await asyncio.sleep(0.01)
    dials = len(t.dials)
    await asyncio.sleep(0.3)
    assert len(t.dials) == dials  # connected again: no more dialling
    await t.stop()


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["hivemind", "libp2p"])
def test_bootstrap_and_peer_leave_and_return_while_nodes_train(tmp_path, tiny_model_dir, transport):
    tasks = write_signal_tasks(tmp_path / "tasks.toml")
    port = free_port()
    b_home = tmp_path / "B"
    b_addr = f"/ip4/127.0.0.1/tcp/{port}/p2p/{home_peer_id(b_home)}"
    common = ["--transport", transport, "--swarm", SWARM, "--tasks", str(tasks), "--external", "2"]
    b = Node("B", b_home, start_argv(b_home, tiny_model_dir, *common, "--listen", f"/ip4/127.0.0.1/tcp/{port}"),
             tmp_path)
    peers = [Node(name, tmp_path / name, start_argv(tmp_path / name, tiny_model_dir, *common, "--bootstrap", b_addr,
                                                    "--listen", "/ip4/127.0.0.1/tcp/0"), tmp_path)
             for name in ("N1", "N2")]
    n1, n2 = peers
    nodes = [b, *peers]
    figures = {}
    try:
        for n in nodes:
            n.start()
        figures["joined_s"] = _until("N1 and N2 to see a peer",
                                     lambda: all(n.rows() and n.rows()[-1]["peers"] >= 1 for n in peers), nodes)

        # The bootstrap peer goes away: N1 and N2 go on training, five rounds each before it returns.
        b.kill()
        before = {n.name: len(n.rows()) for n in peers}
        figures["without_B_s"] = _until("N1 and N2 to train five rounds without B (within 20 s)",
                                        lambda: all(len(n.rows()) - before[n.name] >= 5 for n in peers), peers,
                                        timeout=20)
        for n in peers:
            figures[f"{n.name}_rounds_without_B"] = len(n.rows()) - before[n.name]

        # It comes back on the same address and identity: the swarm finds it again.
        b_rows = len(b.rows())
        b.start()
        figures["B_rejoined_s"] = _until(
            "the restarted B to see a peer", lambda: any(r["peers"] >= 1 for r in _rows_since(b, b_rows)),
            nodes, timeout=240)
        mark = {n.name: len(n.rows()) for n in peers}
        _until("N1 and N2 to see a peer after B's return",
               lambda: all(any(r["peers"] >= 1 for r in _rows_since(n, mark[n.name])) for n in peers), nodes)

        # A peer dies mid-round and comes back: it resumes from its checkpoint and rejoins.
        n1_rows = len(n1.rows())
        n2.kill()
        _until("N1 to train on when N2 left (a round within 5 s)", lambda: len(n1.rows()) > n1_rows, [b, n1],
               timeout=5)
        n2_rows = len(n2.rows())
        n2.start()
        figures["N2_rejoined_s"] = _until(
            "the restarted N2 to see a peer", lambda: any(r["peers"] >= 1 for r in _rows_since(n2, n2_rows)), nodes)
        assert "next round is" in n2.stderr()

        figures["rounds"] = {n.name: len(n.rows()) for n in nodes}
        for n in nodes:
            assert n.stop() == 0, n.stderr()[-3000:]
            _contiguous(n)
            assert "Traceback" not in n.stderr(), n.stderr()[-3000:]
        print(f"\nrejoin ({transport}): {figures}")
    finally:
        for n in nodes:
            n.stop()
