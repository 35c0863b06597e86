"""One transport node, driven over stdin/stdout with JSON lines: for the transport contract
tests and ``benchmarks/transport_latency.py``.

hivemind and py-libp2p cannot share a process, and real multi-node tests should cross
process boundaries anyway, so each node of a real transport runs this script in its own
process::

    python tests/transport_node.py --transport libp2p --seed 0 [--listen MA] [--bootstrap MA ...]
        [--reachability private|auto] [--lan] [--swarm-key KEY]

It prints ``{"event": "ready", "peer_id": ..., "addresses": [...], "start_s": ...}`` once
``Transport.start`` returns, ``{"event": "message", ...}`` for every message its handler
gets, ``{"event": "rejected", "author": ..., "reason": ...}`` for every message the
transport drops itself, and answers these commands (one JSON object a line on stdin):

* ``{"cmd": "publish", "round": R, "size": BYTES}``: publish a signed bundle of about BYTES
  wire bytes (random text, so compression cannot shrink it); answers ``published``.
* ``{"cmd": "peers"}``: answers ``{"event": "peers", "peers": [...]}``.
* ``{"cmd": "counters"}``: answers ``{"event": "counters", "counters": {...}}`` (Transport.counters, as a dict).
* ``{"cmd": "lan"}``: answers ``{"event": "lan", "counts": {...}, "joined": [...]}`` (Transport.lan_counts,
  Transport.lan_peers; with ``--lan``, which turns discovery on the local network on).
* ``{"cmd": "receipts"}`` (with ``--receipts``): answers ``{"event": "receipts", ...}``, the
  running totals of :class:`ReceiptSide`.
* ``{"cmd": "stop"}``: stops the transport twice (stop is idempotent), then answers
  ``stopped`` with the threads and child processes still alive, and exits.

With ``--receipts`` the node also does what a real node does with receipts, through the real
:class:`~swarmnode.swarm.exchange.Exchange` (with its ledger and this node's ``Scorer``): every
message is admitted and received on one worker thread (verified, re-scored, pooled, its
receipts checked and offered to the ledger), and each ``publish`` first draws the J external
groups of an update from the pool and signs their receipts (``Exchange.draw``,
``Exchange.trained_on``), then sends the bundle ``Exchange.outgoing`` makes, receipts attached.
Its bundles are then 8 groups of 8 responses, half answering right, so that peers' groups carry
signal and their senders become established, whose receipts alone the ledger counts.

SIGINT or SIGTERM acts as ``stop`` after ``--signal-grace`` seconds, as a daemon stops its
transport once its round in flight is done; commands are still answered meanwhile.

:class:`NodeDriver` is the same logic without the pipes, for in-process (memory) nodes.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from swarmnode.records import (
    Group,  # noqa: E402
    Question,  # noqa: E402
)
from swarmnode.swarm.bundle import encode_bundle, open_envelope  # noqa: E402
from swarmnode.swarm.identity import Identity  # noqa: E402
from swarmnode.swarm.reachability import follow_lan  # noqa: E402
from swarmnode.swarm.sealing import sealer_for  # noqa: E402
from swarmnode.swarm.transport import Transport, create_transport  # noqa: E402
from swarmnode.swarm.transport.lan import LanDiscovery  # noqa: E402
from waiting import wait_until  # noqa: E402

SWARM = "contract-test"
_RESPONSE_CHARS = 6000  # under BundleLimits.max_response_chars


def identity_for(seed: int) -> Identity:
    """A deterministic key per node number, so a test knows PeerIDs before nodes start."""
    return Identity.from_seed(hashlib.sha256(b"transport-node-%d" % seed).digest())


def bundle_groups(round_no: int, size: int, rng: random.Random, answered: bool = False) -> list[Group]:
    """Groups of about ``size`` wire bytes together (incompressible random text). ``answered``:
    8 groups of 8 responses, each ending in an answer, right (``4``) in half of each group's
    responses, so that a peer re-scoring them finds signal."""
    n_chars = max(int(size * 1.3), 64)  # base64 of random bytes compresses to about 3/4
    if answered:
        chunk = max(n_chars // 64, 1)
        texts = [base64.b64encode(rng.getrandbits(8 * chunk).to_bytes(chunk, "little")).decode("ascii")[:chunk]
                 for _ in range(64)]
        return [Group(Question("chain_sum", f"q{round_no}-{i}", "4", {"n": i}),
                      [f"{texts[8 * i + j]} <answer>{4 + j % 2}</answer>" for j in range(8)], [1.0, 0.0] * 4)
                for i in range(8)]
    responses = []
    while n_chars > 0:
        chunk = min(n_chars, _RESPONSE_CHARS)
        raw = rng.getrandbits(8 * chunk).to_bytes(chunk, "little")
        responses.append(base64.b64encode(raw).decode("ascii")[:chunk])
        n_chars -= chunk
    return [Group(Question("chain_sum", f"q{round_no}-{i}", "4", {"n": i}), responses[i:i + 16],
                  [0.0] * len(responses[i:i + 16]))
            for i in range(0, len(responses), 16)]


def make_bundle(identity: Identity, swarm: str, round_no: int, size: int, rng: random.Random) -> bytes:
    """A valid signed bundle of roughly ``size`` wire bytes (incompressible random text)."""
    return encode_bundle(identity, swarm=swarm, round_no=round_no, model="contract",
                         groups=bundle_groups(round_no, size, rng))


class ReceiptSide:
    """A node's receipts through the real :class:`~swarmnode.swarm.exchange.Exchange` (its ledger
    in ``home``), with running totals: the receipt frames' bytes sent and received, and, by call,
    the CPU seconds (``time.thread_time``: the calling thread's alone, so the transport's threads
    do not count) and wall seconds spent making (``trained_on``), attaching (``receipt.attach``),
    checking and counting (``Exchange._take_receipts``, which includes ``Ledger.offer``) and
    writing (``Ledger.note_shared``, ``Ledger.promote``) them."""

    TIMED_EXCHANGE = ("trained_on", "_take_receipts")
    TIMED_LEDGER = ("note_shared", "offer", "promote")

    def __init__(self, transport: Transport, home: Path):
        from swarmnode.config import NodeConfig
        from swarmnode.swarm import receipt
        from swarmnode.swarm.exchange import Exchange
        from swarmnode.train.tasks import Scorer

        self.receipt = receipt
        # Uniform: every node draws its J groups each round, so receipts cost what they cost at
        # most (above-best, the default, draws only groups better than the node's own best).
        self.cfg = NodeConfig(swarm=transport.swarm, external_sampling="uniform")  # type: ignore[arg-type]
        self.events: Counter[str] = Counter()
        self.exchange = Exchange(transport.identity, self.cfg, Scorer(), "contract", credits_dir=home,
                                 state=self)
        transport.set_established(self.exchange.standing.is_established)
        self.rng = random.Random(transport.identity.peer_id)
        self.totals: Counter[str] = Counter()
        self.cpu_s: Counter[str] = Counter()
        self.wall_s: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="receive")
        ledger = self.exchange.ledger
        assert ledger is not None
        for obj, names in ((self.exchange, self.TIMED_EXCHANGE), (ledger, self.TIMED_LEDGER)):
            for name in names:
                setattr(obj, name, self._timed(name.lstrip("_"), getattr(obj, name)))

    def _timed(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                with self._lock:
                    self.cpu_s[name] += time.thread_time() - cpu
                    self.wall_s[name] += time.perf_counter() - wall
        return timed

    def emit(self, event: Any) -> None:
        """The exchange's events (:class:`~swarmnode.swarm.exchange.EventSink`): counted by type."""
        with self._lock:
            self.events[event.TYPE] += 1

    def _frame(self, data: bytes) -> tuple[int, int]:
        """(bytes of ``data``'s receipt frame, its header included; receipts in it)."""
        _, section = self.receipt.split(data)
        if section is None:
            return 0, 0
        try:
            entries = len(self.receipt.open_section(section))
        except self.receipt.ReceiptRejected:
            entries = 0
        return len(section) + 8, entries

    def outgoing(self, round_no: int, size: int) -> bytes:
        """The update of the round just ended (J external groups drawn from the pool, their
        receipts signed), then this round's bundle, carrying them."""
        drawn = self.exchange.draw(round_no, self.cfg.external, self.rng)
        self.exchange.trained_on(round_no, drawn)
        groups = bundle_groups(round_no, size, self.rng, answered=True)
        attach = self.receipt.attach
        self.receipt.attach = self._timed("attach", attach)  # what Exchange.outgoing calls, for this call only
        try:
            data = self.exchange.outgoing(round_no, groups)
        finally:
            self.receipt.attach = attach
        frame, entries = self._frame(data)
        with self._lock:
            self.totals.update(bytes_sent=frame, receipts_sent=entries, drawn=len(drawn))
        return data

    def receive(self, data: bytes) -> None:
        """As a real node: the guard's word, then verification on one worker thread."""
        frame, entries = self._frame(data)
        with self._lock:
            self.totals.update(bytes_received=frame, receipts_received=entries)
        if self.exchange.admit(data) is None:
            self._executor.submit(self.exchange.receive, data)

    def report(self) -> dict[str, Any]:
        ledger = self.exchange.ledger
        assert ledger is not None
        summary = ledger.summary()
        with self._lock:
            return {"event": "receipts", **self.totals, "cpu_s": dict(self.cpu_s), "wall_s": dict(self.wall_s),
                    "events": dict(self.events), "counted": summary["total"]["receipts"],
                    "credited_groups": summary["total"]["groups"], "pending": summary["pending"],
                    "refused": summary["refused"]}

    def stop(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def descendants(pid: int) -> set[int]:
    """Live descendant processes of ``pid`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").rsplit("/", 1)[-1]
    except OSError:
        return ""


class NodeDriver:
    """A transport plus a record of what it received, reporting through ``emit``."""

    def __init__(self, transport: Transport, emit: Callable[[dict[str, Any]], None],
                 receipts: ReceiptSide | None = None):
        self.transport = transport
        self.emit = emit
        self.receipts = receipts
        self.rng = random.Random(transport.identity.peer_id)
        transport.set_handler(self._on_message)
        transport.set_reject_handler(lambda author, reason: emit({"event": "rejected", "author": author,
                                                                   "reason": reason}))

    def _on_message(self, data: bytes) -> None:
        now = time.time()
        sender, payload = open_envelope(data)
        self.emit({"event": "message", "digest": hashlib.sha256(data).hexdigest(), "sender": sender,
                   "round": payload["round"], "bytes": len(data), "t_recv": now})
        if self.receipts is not None:
            self.receipts.receive(data)

    async def start(self) -> dict[str, Any]:
        t0 = time.monotonic()
        await self.transport.start()
        return {"event": "ready", "peer_id": self.transport.identity.peer_id,
                "addresses": self.transport.addresses(), "start_s": time.monotonic() - t0}

    async def publish(self, round_no: int, size: int) -> dict[str, Any]:
        identity = self.transport.identity
        data = (self.receipts.outgoing(round_no, size) if self.receipts is not None
                else make_bundle(identity, self.transport.swarm, round_no, size, self.rng))  # type: ignore[arg-type]
        t_pub = time.time()
        await self.transport.publish(round_no, data)
        return {"event": "published", "round": round_no, "digest": hashlib.sha256(data).hexdigest(),
                "bytes": len(data), "t_pub": t_pub, "publish_s": time.time() - t_pub}

    async def stop(self) -> None:
        await self.transport.stop()
        await self.transport.stop()
        if self.receipts is not None:
            self.receipts.stop()


# -- the driving side: tests and the benchmark use these --------------------------------------


# test_transport_contract.py and the benchmarks import the tests' one wait under this name.
class ProcNode:
    """A node in its own process running this script (or ``SCRIPT``, which takes the same
    flags). Call :meth:`ready` before anything else."""

    SCRIPT = Path(__file__).resolve()

    def __init__(self, transport: str, seed: int, bootstrap: Sequence[str] = (), listen: str | None = None,
                 stderr_path: Path | None = None, private: bool = False, prefix: Sequence[str] = (),
                 signal_grace: float = 0.0, program: Sequence[str] = (), env: dict[str, str] | None = None,
                 lan: bool = False, receipts: Path | None = None, swarm_key: str | None = None,
                 auto: bool = False):
        """``prefix`` wraps the command (``ip netns exec NS``); ``private``: ``--reachability private``,
        ``auto``: ``--reachability auto`` (with ``lan`` and no bootstrap list: it may take a LAN
        neighbour's way in and go private);
        ``signal_grace``: ``--signal-grace``; ``program``: the interpreter and script to run instead
        of this one (another release's copy of it, which speaks these commands too), with ``env``;
        ``lan``: ``--lan``, ``receipts``: ``--receipts DIR``, ``swarm_key``: ``--swarm-key`` (a private
        swarm's); the last two in this release's copy only."""
        program = program or (sys.executable, str(self.SCRIPT))
        args = [*prefix, *program, "--transport", transport, "--seed", str(seed),
                "--signal-grace", str(signal_grace)]
        if private or auto:
            args += ["--reachability", "private" if private else "auto"]
        if lan:
            args.append("--lan")
        if receipts is not None:
            args += ["--receipts", str(receipts)]
        if swarm_key:
            args += ["--swarm-key", swarm_key]
        for b in bootstrap:
            args += ["--bootstrap", b]
        if listen:
            args += ["--listen", listen]
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "w") if stderr_path else subprocess.DEVNULL
        # A session of its own, so a test can signal the node's process group as a terminal would.
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, start_new_session=True, env=env)
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.peer_id = ""
        self.addresses: list[str] = []
        self.start_s = 0.0

    def ready(self, timeout: float = 60) -> "ProcNode":
        event = self.wait_event("ready", timeout)
        self.peer_id, self.addresses, self.start_s = event["peer_id"], event["addresses"], event["start_s"]
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def wait_event(self, name: str, timeout: float) -> dict:
        def take() -> dict | None:
            with self._lock:
                for i, event in enumerate(self.events):
                    if event["event"] == name:
                        return self.events.pop(i)
            if self.proc.poll() is not None and not self._reader.is_alive():
                raise AssertionError(f"node exited with {self.proc.returncode} before '{name}'")
            return None
        return wait_until(take, timeout, f"event '{name}'")

    def send(self, **command: Any) -> None:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def publish(self, round_no: int, size: int) -> dict:
        self.send(cmd="publish", round=round_no, size=size)
        return self.wait_event("published", 30)

    def peers(self) -> list[str]:
        self.send(cmd="peers")
        return self.wait_event("peers", 30)["peers"]

    def counters(self) -> dict:
        """``Transport.counters()`` as a dict (``dataclasses.asdict``); empty when it is None."""
        self.send(cmd="counters")
        return self.wait_event("counters", 30)["counters"]

    def refusals(self) -> dict[str, int]:
        """``Transport.refusals()``: what the transport refused, by reason."""
        return self.counters().get("refused", {})

    def receipts(self) -> dict:
        """The node's :meth:`ReceiptSide.report` (a node started with ``receipts``)."""
        self.send(cmd="receipts")
        return self.wait_event("receipts", 60)

    def lan(self) -> dict:
        """``{"counts": Transport.lan_counts(), "joined": Transport.lan_peers()}``."""
        self.send(cmd="lan")
        return self.wait_event("lan", 30)

    def messages(self) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e["event"] == "message"]

    def rejected(self) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e["event"] == "rejected"]

    def stop(self) -> dict:
        self.send(cmd="stop")
        report = self.wait_event("stopped", 60)
        self.proc.wait(30)
        return report

    def kill(self) -> None:
        """Kill the node's whole process group (this node's processes only) and reap it; the
        hivemind transport's helpers, in a session of their own, follow within seconds."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        if self._stderr is not subprocess.DEVNULL:
            self._stderr.close()


class MemNode:
    """A memory-transport node on an event loop running in another thread, with ProcNode's interface."""

    def __init__(self, loop: asyncio.AbstractEventLoop, hub: Any, seed: int, swarm: str = SWARM):
        from memory_transport import MemoryTransport

        self.loop = loop
        self._messages: list[dict] = []
        self._pending: list[Any] = []
        self.transport = MemoryTransport(identity_for(seed), swarm, hub=hub)
        self.driver = NodeDriver(self.transport, self._messages.append)
        self.peer_id = self.transport.identity.peer_id
        self.addresses: list[str] = []
        self.start_s = 0.0

    def ready(self, timeout: float = 60) -> "MemNode":
        event = self._run(self.driver.start())
        self.addresses, self.start_s = event["addresses"], event["start_s"]
        return self

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def send(self, **command: Any) -> None:
        """Only ``publish``: its ``published`` event is then read with :meth:`wait_event`."""
        assert command["cmd"] == "publish"
        self._pending.append(asyncio.run_coroutine_threadsafe(
            self.driver.publish(command["round"], command["size"]), self.loop))

    def wait_event(self, name: str, timeout: float) -> dict:
        assert name == "published" and self._pending
        return self._pending.pop(0).result(timeout)

    def publish(self, round_no: int, size: int) -> dict:
        return self._run(self.driver.publish(round_no, size))

    def peers(self) -> list[str]:
        return self.transport.peers()

    def messages(self) -> list[dict]:
        return list(self._messages)

    def stop(self) -> dict:
        self._run(self.driver.stop())
        return {"threads": [], "children_before": [], "children_after": []}

    def kill(self) -> None:
        pass


async def _serve(args: argparse.Namespace) -> dict[str, Any]:
    loop = asyncio.get_running_loop()

    def emit(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    transport = create_transport(args.transport, identity_for(args.seed), args.swarm,
                                 bootstrap=args.bootstrap, listen=args.listen,
                                 private=args.reachability == "private",
                                 sealer=sealer_for(args.swarm, args.swarm_key))
    if args.lan:
        transport.use_lan(LanDiscovery(args.swarm, args.transport, transport.identity.peer_id),
                          follow_lan(args.reachability, announce=None, bootstrap=args.bootstrap, listen=args.listen))
    driver = NodeDriver(transport, emit, ReceiptSide(transport, Path(args.receipts)) if args.receipts else None)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    ready = await driver.start()
    # After the start, so the DHT process does not fork with these handlers; before "ready",
    # which a test may answer with a signal at once.
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, loop.call_later, args.signal_grace, reader.feed_eof)
    emit(ready)
    while True:
        line = await reader.readline()
        if not line:
            break
        command = json.loads(line)
        if command["cmd"] == "publish":
            emit(await driver.publish(command["round"], command["size"]))
        elif command["cmd"] == "peers":
            emit({"event": "peers", "peers": transport.peers()})
        elif command["cmd"] == "counters":
            counters = transport.counters()
            emit({"event": "counters", "counters": dataclasses.asdict(counters) if counters is not None else {}})
        elif command["cmd"] == "receipts" and driver.receipts is not None:
            emit(driver.receipts.report())
        elif command["cmd"] == "lan":
            emit({"event": "lan", "counts": transport.lan_counts(), "joined": sorted(transport.lan_peers())})
        elif command["cmd"] == "stop":
            break
    before = descendants(os.getpid())
    await driver.stop()
    return {"event": "stopped", "children_before": sorted(before)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", required=True, choices=("hivemind", "libp2p"))
    parser.add_argument("--seed", type=int, required=True, help="node number: picks a deterministic key")
    parser.add_argument("--swarm", default=SWARM)
    parser.add_argument("--listen", default="/ip4/127.0.0.1/tcp/0")
    parser.add_argument("--bootstrap", action="append", default=[])
    parser.add_argument("--reachability", choices=("public", "private", "auto"), default="public",
                        help="auto: public, unless --lan finds a way in behind NAT (reachability.follow_lan)")
    parser.add_argument("--lan", action="store_true", help="advertise and find peers on the local network")
    parser.add_argument("--receipts", metavar="DIR",
                        help="make, send and count receipts as a real node does, its ledger in DIR")
    parser.add_argument("--swarm-key", help="a private swarm's key (swarmnode swarm-key)")
    parser.add_argument("--signal-grace", type=float, default=0.0,
                        help="on SIGINT or SIGTERM, run this many seconds more, then stop as on 'stop'")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    report = asyncio.run(_serve(args))
    # After asyncio.run: its executor threads are gone; what is left was leaked.
    time.sleep(0.2)
    report["threads"] = sorted(t.name for t in threading.enumerate()
                               if t is not threading.main_thread() and t.is_alive())
    report["children_after"] = [[pid, process_name(pid)] for pid in sorted(descendants(os.getpid()))]
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
