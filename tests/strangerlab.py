"""A stranger with many free keys against a real relay or training node, measured from outside:
for ``tests/test_strangers.py`` and ``benchmarks/strangers.py``.

:class:`Target` starts ``swarmnode relay`` or ``swarmnode start`` (the tiny model) on
127.0.0.1 and names its processes (the relay or node, the node's forked DHT process, p2pd);
:class:`Memory` samples their RSS with psutil; :class:`Stranger` runs
``tests/programs/stranger_<transport>.py`` (keys and records of its own, from ``docs/protocol.md``);
:class:`HonestPair` is two private network-only nodes (``tests/transport_node.py``) that
exchange bundles through the target only, so each bundle one gets from the other was kept
and served by the target, and the latency says whether it came within a round.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil

import programs
from eventproc import EventProcess
from nodeproc import free_port, home_peer_id, start_argv, write_signal_tasks
from transport_node import ProcNode
from waiting import wait_until

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SWARM = "contract-test"  # transport_node.py's swarm: the honest pair is in it
HONEST_SIZE = 8_000      # bytes of an honest bundle: a few questions of realistic completions


def _listening(port: int) -> bool:
    """True when something accepts connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


class Target:
    """``swarmnode relay`` (kind ``relay``) or a training node on ``model`` (kind ``node``), in
    ``home``, listening on 127.0.0.1, in a session of its own."""

    def __init__(self, kind: str, transport: str, home: Path, model: Path | None = None,
                 stderr: Path | None = None, metrics_port: int | None = None):
        self.kind, self.transport, self.home = kind, transport, home
        self.port = port = free_port()
        listen = f"/ip4/127.0.0.1/tcp/{port}"
        self.metrics_port = metrics_port
        if kind == "relay":
            argv = [sys.executable, "-m", "swarmnode", "relay", "--transport", transport, "--swarm", SWARM,
                    "--home", str(home), "--listen", listen]
            if metrics_port is not None:
                argv += ["--api-port", str(metrics_port)]
        else:
            assert model is not None
            home.mkdir(parents=True, exist_ok=True)
            none = home.parent / f"{home.name}-no-bootstrap.txt"
            none.write_text("# this node is the first of its swarm\n")
            tasks = write_signal_tasks(home.parent / f"{home.name}-tasks.toml")
            argv = start_argv(home, model, "--tasks", str(tasks), "--transport", transport, "--swarm", SWARM,
                              "--listen", listen, "--bootstrap-file", str(none), "--external", "2")
        self.address = f"{listen}/p2p/{home_peer_id(home)}"
        self._stderr = open(stderr, "w") if stderr else subprocess.DEVNULL
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                     start_new_session=True)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for _ in self.proc.stdout:
            pass

    def ready(self, timeout: float = 180) -> "Target":
        """Wait until it listens (a node: once its first round is written), and its processes are up."""
        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"the {self.kind} exited with {self.proc.returncode}")
            if self.kind == "node" and not (self.home / "metrics.jsonl").exists():
                return False
            if self.transport != "hivemind":  # py-libp2p runs in the process itself: it listens when up
                return _listening(self.port)
            names = self.processes()
            return "p2pd" in names and (self.kind == "relay" or "dht" in names)
        wait_until(up, timeout, f"the {self.kind} to start")
        return self

    def processes(self) -> dict[str, int]:
        """name -> pid: ``relay`` or ``node``, ``dht`` (a hivemind node's DHT process), ``p2pd``."""
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return {}
        out = {self.kind: self.proc.pid}
        for child in children:
            try:
                name = child.name()
            except psutil.NoSuchProcess:
                continue
            if name == "p2pd":
                out["p2pd"] = child.pid
            elif name.startswith("python"):
                out["dht"] = child.pid
        return out

    def metrics(self) -> str:
        """The target's ``/metrics`` text (a node's API port from its api.json); "" for a
        relay started without ``metrics_port``."""
        if self.kind == "node":
            port = json.loads((self.home / "api.json").read_text())["port"]
        elif self.metrics_port is None:
            return ""
        else:
            port = self.metrics_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            return answer.read().decode()

    def accepted_round(self, peer_id: str) -> int | None:
        """The newest round of ``peer_id`` a node accepted (its ``/v1/peers``), None before any."""
        port = json.loads((self.home / "api.json").read_text())["port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/peers", timeout=10) as answer:
            rows = json.loads(answer.read())
        rows = rows.get("peers", rows) if isinstance(rows, dict) else rows
        return next((r["last_round"] for r in rows if r["peer_id"] == peer_id and r["accepted"]), None)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self._stderr is not subprocess.DEVNULL:
            self._stderr.close()


def refusal_counts(metrics: str) -> dict[str, float]:
    """``refused_<reason>``, ``evicted`` and ``stored_bytes`` of a ``/metrics`` text."""
    out: dict[str, float] = {}
    for line in metrics.splitlines():
        found = re.match(r'swarmnode_transport_(refused_total|evicted_total|stored_bytes)'
                         r'(?:\{(\w+)="([^"]*)"\})? (\S+)$', line)
        if not found:
            continue
        family, _, label, value = found.groups()
        name = {"refused_total": f"refused_{label}", "evicted_total": "evicted",
                "stored_bytes": f"{label}_bytes"}[family]
        out[name] = float(value)
    return out


class Memory:
    """RSS (MB) of named processes, sampled every ``every`` seconds in a thread: the first
    sample, the peak and the last, per name."""

    def __init__(self, processes: dict[str, int], every: float = 0.5):
        self._procs = {name: psutil.Process(pid) for name, pid in processes.items()}
        self._every = every
        self.first: dict[str, float] = {}
        self.peak: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self._stop = threading.Event()
        self.sample()
        self.first = dict(self.last)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> dict[str, float]:
        for name, proc in self._procs.items():
            try:
                rss = proc.memory_info().rss / 2**20
            except psutil.NoSuchProcess:
                continue
            self.last[name] = rss
            self.peak[name] = max(self.peak.get(name, 0.0), rss)
        return dict(self.last)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.sample()

    def growth(self) -> dict[str, float]:
        """Last minus first sample, per process, MB."""
        return {name: self.last[name] - self.first[name] for name in self.first if name in self.last}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sample()


class Stranger(EventProcess):
    """``tests/programs/stranger_<transport>.py`` against ``target`` (a multiaddr), its own session; its
    JSON events in :attr:`events`."""

    def __init__(self, transport: str, target: str, keys: int, rounds: int, *extra: str, stderr: Path | None = None):
        super().__init__(programs.argv(f"stranger_{transport}", "--target", target, "--swarm", SWARM, "--keys", keys,
                                       "--rounds", rounds, *extra), stderr)


class HonestPair:
    """Two private network-only nodes joined through ``target`` only, each publishing a
    bundle every ``period`` seconds (from a thread, :meth:`start`; a node fetches K bundles a
    round of its own, so the reader must publish too): ``reader`` fetches ``sender``'s
    through the target (hivemind: from the target's DHT storage; libp2p: held by the target
    or pulled from it). :meth:`latencies` gives, per round of the sender, how long until the
    reader had it (None: not yet), :meth:`staleness` how long until it had it or a newer one."""

    def __init__(self, transport: str, target: str, period: float, work: Path):
        self.period = period
        self.sender = ProcNode(transport, 101, bootstrap=[target], private=True, stderr_path=work / "honest-sender.err")
        self.reader = ProcNode(transport, 102, bootstrap=[target], private=True, stderr_path=work / "honest-reader.err")
        self.sender.ready(120)
        self.reader.ready(120)
        target_id = target.rsplit("/p2p/", 1)[1]
        wait_until(lambda: target_id in self.sender.peers() and target_id in self.reader.peers(), 120,
                 "the honest nodes to join the target")
        self.published: dict[int, float] = {}  # round -> time.time() of its publish
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        round_no = 0
        while not self._stop.is_set():
            tick = time.monotonic()
            event = self.sender.publish(round_no, HONEST_SIZE)
            self.published[round_no] = event["t_pub"]
            self.reader.publish(round_no, HONEST_SIZE)
            round_no += 1
            self._stop.wait(max(0.0, self.period - (time.monotonic() - tick)))

    def latencies(self, since: float = 0.0, until: float = float("inf")) -> dict[int, float | None]:
        """Seconds from publish to the reader's receipt, for rounds published in [since, until)."""
        got = self._arrivals()
        return {r: (got[r] - t if r in got else None) for r, t in sorted(self.published.items()) if since <= t < until}

    def staleness(self, since: float = 0.0, until: float = float("inf")) -> dict[int, float | None]:
        """Seconds from publish until the reader had that round or a newer one of the sender, for
        rounds published in [since, until) (None: neither yet). A node fetches only the newest
        announced round of a peer (docs/protocol.md), so one that heard of two rounds at once
        takes the second: what the exchange promises is this, not every round."""
        got = self._arrivals()
        out: dict[int, float | None] = {}
        for r, t in sorted(self.published.items()):
            if since <= t < until:
                held = [t_recv for later, t_recv in got.items() if later >= r]
                out[r] = min(held) - t if held else None
        return out

    def _arrivals(self) -> dict[int, float]:
        """Round -> time.time() the reader received the sender's bundle of it."""
        return {m["round"]: m["t_recv"] for m in self.reader.messages() if m["sender"] == self.sender.peer_id}

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)
        self.sender.kill()
        self.reader.kill()
