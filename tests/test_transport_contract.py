"""The transport contract, run against all three transports.

Publish, receive (exactly once, never one's own), peers, shutdown (idempotent, nothing left
running) and a ~200 kB message. hivemind and libp2p nodes are separate OS processes on
127.0.0.1 (``tests/transport_node.py``): the two stacks cannot share a process, and a
swarm of one process would prove little. memory nodes share one hub in this process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import programs
from memory_transport import MemoryHub, MemoryTransport
from nodeproc import free_port
from swarmnode.backoff import Backoff
from swarmnode.swarm.address import peer_id_of
from swarmnode.swarm.transport import TransportError, create_transport
from swarmnode.swarm.transport.base import expand_unspecified, relay_rejection
from transport_node import SWARM, MemNode, ProcNode, descendants, identity_for, make_bundle, process_name
from waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
_ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + str(ROOT / "tests")}
# Process-wide helpers hivemind starts on first use and keeps for the life of the process
# (its MPFuture backend, multiprocessing's resource sharer, torch's shared-memory manager):
# not per transport, so not leaks of one.
PROCESS_WIDE_THREADS = {"hivemind.utils.mpfuture.BACKEND", "_serve"}
PROCESS_WIDE_CHILDREN = {"torch_shm_manager"}


@pytest.fixture
def spawn(tmp_path):
    """Start nodes of one transport; every node still running at the end is killed."""
    nodes: list = []
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()
    hub = MemoryHub()

    def start(transport: str, seed: int, **kw: Any):
        if transport == "memory":
            node = MemNode(loop, hub, seed)
        else:
            node = ProcNode(transport, seed, stderr_path=tmp_path / f"node{seed}.err", **kw)
        nodes.append(node)
        return node.ready()

    yield start
    for node in nodes:
        node.kill()
    loop.call_soon_threadsafe(loop.stop)
    loop_thread.join(10)
    loop.close()


def assert_clean(report: dict) -> None:
    """After stop: no transport thread and no transport process (DHT fork, p2pd) left."""
    threads = [t for t in report["threads"] if not any(w in t for w in PROCESS_WIDE_THREADS)]
    assert threads == [], f"threads left after stop: {threads}"
    children = [(pid, name) for pid, name in report["children_after"] if name not in PROCESS_WIDE_CHILDREN]
    assert children == [], f"processes left after stop: {children}"


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["memory", "hivemind", "libp2p"])
def test_contract(spawn, transport):
    first = spawn(transport, 0)
    others = [spawn(transport, seed, bootstrap=first.addresses[:1]) if transport != "memory"
              else spawn(transport, seed) for seed in (1, 2)]
    nodes = [first, *others]
    assert all(a.endswith("/p2p/" + n.peer_id) for n in nodes for a in n.addresses) and first.addresses
    if transport != "memory":
        assert all(n.start_s < 20 for n in nodes)

    # peers: the bootstrap node sees both others, each other node sees the bootstrap node
    wait_until(lambda: set(first.peers()) >= {n.peer_id for n in others}, 30, "the bootstrap node's peers")
    for node in others:
        wait_until(lambda: first.peer_id in node.peers(), 30, "peers of a joined node")
    # and the others find each other through it (DHT lookups, or the libp2p peer exchange)
    wait_until(lambda: all(len(n.peers()) >= 2 for n in nodes), 40, "every node to connect to every other")
    assert all(n.peer_id not in n.peers() for n in nodes)

    # publish: a large bundle, a small one, and one from the bootstrap node
    sent = [(others[0], others[0].publish(3, 200_000)), (others[1], others[1].publish(3, 2_000)),
            (first, first.publish(4, 50_000))]
    assert sent[0][1]["bytes"] > 190_000
    for node in nodes:
        expected = {p["digest"] for sender, p in sent if sender is not node}
        wait_until(lambda: {m["digest"] for m in node.messages()} >= expected, 30, "every bundle to arrive")
    time.sleep(3.0)  # several poll / heartbeat periods: a duplicate would show up by now
    for node in nodes:
        got = [m["digest"] for m in node.messages()]
        expected = {p["digest"] for sender, p in sent if sender is not node}
        assert sorted(got) == sorted(expected), "each peer's bundle exactly once, never one's own"
        assert all(m["sender"] != node.peer_id for m in node.messages())

    # shutdown: stop (twice, inside the node) and nothing left behind
    for node in reversed(nodes):
        assert_clean(node.stop())



@pytest.mark.slow
@pytest.mark.parametrize("transport", ["hivemind", "libp2p"])
def test_unreachable_bootstrap_then_join(spawn, transport, tmp_path):
    port = free_port()
    bootstrap = f"/ip4/127.0.0.1/tcp/{port}/p2p/{identity_for(0).peer_id}"
    late = spawn(transport, 1, bootstrap=[bootstrap])
    # start() itself (not the interpreter's imports, which a loaded machine slows) returns
    # without dialing; the first dial runs in the background
    assert late.start_s < 15, "start() must not wait for the bootstrap peer"
    time.sleep(2.0)  # a while with no bootstrap peer up: nothing to join, and no error
    assert late.peers() == []
    first = spawn(transport, 0, listen=f"/ip4/127.0.0.1/tcp/{port}")
    wait_until(lambda: first.peer_id in late.peers(), 45, "the node to join once the bootstrap peer is up")
    published = first.publish(1, 5_000)
    wait_until(lambda: any(m["digest"] == published["digest"] for m in late.messages()), 30,
             "a bundle from the bootstrap node")
    assert_clean(late.stop())
    first.stop()
    warnings = [line for line in late.stderr_path.read_text().splitlines() if "bootstrap peer(s) answered" in line]
    assert len(warnings) == 1, warnings


@pytest.mark.slow
def test_joins_a_bootstrap_peer_whose_dht_answers_after_its_p2pd(spawn, tmp_path):
    """A node that dialed while the bootstrap peer's p2pd was up but its DHT not yet (a peer
    mid-start, slow on a loaded machine) has a connection and no DHT route; it must ask again
    rather than take the connection for a join and never exchange a record."""
    port = free_port()
    half = subprocess.Popen([PYTHON, str(ROOT / "tests" / "halfstarted_peer.py"), "--seed", "0",
                             "--listen", f"/ip4/127.0.0.1/tcp/{port}", "--spool", str(tmp_path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        boot_id = json.loads(half.stdout.readline())["peer_id"]
        late = spawn("hivemind", 1, bootstrap=[f"/ip4/127.0.0.1/tcp/{port}/p2p/{boot_id}"])
        wait_until(lambda: "answered" in late.stderr_path.read_text(), 30, "a first dial that got no DHT reply")
        time.sleep(8.0)  # past the join loop's first retries
        assert late.peers() == []
        half.stdin.write("dht\n")
        half.stdin.flush()
        published = json.loads(half.stdout.readline())
        wait_until(lambda: any(m["digest"] == published["digest"] for m in late.messages()), 60,
                 "a bundle from the bootstrap peer once its DHT answers")
        assert boot_id in late.peers()
    finally:
        os.killpg(half.pid, signal.SIGKILL)
        half.wait()


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_hivemind_helpers_end_with_a_killed_node(spawn):
    """A node killed by a signal (OOM, kill -9) must not leave its DHT process and p2pd running."""
    node = spawn("hivemind", 0)
    helpers = [pid for pid in descendants(node.proc.pid) if process_name(pid) != "torch_shm_manager"]
    assert len(helpers) >= 2, "expected the DHT process and p2pd"
    os.kill(node.proc.pid, signal.SIGKILL)
    node.proc.wait(10)
    wait_until(lambda: not any(alive(pid) for pid in helpers), 20, "the DHT process and p2pd to exit")


@pytest.mark.slow
def test_ctrl_c_to_the_process_group_leaves_the_hivemind_dht_to_the_node(spawn):
    """Ctrl-C in a terminal (or ``timeout``) signals the node's whole process group. The node
    still finishes its round (here: 3 s, three polls) and may publish; only then does it stop
    its DHT, in order. So the DHT process and p2pd must not act on that signal themselves: no
    failed read, no relaunch, no hard stop, exit 0 and nothing left running."""
    node = spawn("hivemind", 0, signal_grace=3.0)
    os.killpg(node.proc.pid, signal.SIGINT)  # ProcNode starts each node in a session of its own
    node.publish(1, 2_000)
    report = node.wait_event("stopped", 60)
    assert node.proc.wait(30) == 0
    assert_clean(report)
    # Before the fix: "reading the swarm's records failed", and hivemind's "DHT did not shut down".
    logged = [line for line in node.stderr_path.read_text().splitlines() if "no bootstrap peers" not in line]
    assert logged == [], "\n".join(logged)


# -- pieces of the contract that need no network ------------------------------------------------


async def test_memory_semantics():
    hub = MemoryHub()
    a, b = (MemoryTransport(identity_for(i), SWARM, hub=hub) for i in (10, 11))
    other_swarm = MemoryTransport(identity_for(12), "elsewhere", hub=hub)
    await a.stop()  # stop before start is a no-op
    got: list[bytes] = []
    b.set_handler(got.append)
    failing = []

    def broken(data: bytes) -> None:
        failing.append(data)
        raise RuntimeError("handler bug")

    other_swarm.set_handler(failing.append)
    a.set_handler(broken)
    await a.publish(1, b"early")  # not started: counted, not raised
    assert a.stats.publish_errors == 1
    for t in (a, b, other_swarm):
        await t.start()
    with pytest.raises(ValueError):
        hub.join(MemoryTransport(identity_for(10), SWARM, hub=hub))
    assert a.peers() == [b.identity.peer_id]
    await a.publish(1, b"x")
    await b.publish(1, b"y")
    await b.publish(1, b"y")  # the same bytes again: the transport delivers them once
    await asyncio.sleep(0.05)  # the hub delivers on the loop's next turns
    assert got == [b"x"] and failing == [b"y"]
    assert a.stats.handler_errors == 1 and a.stats.duplicates == 1
    await a.publish(1, b"z" * (400 * 1024))  # over the size limit: logged and counted
    assert a.stats.publish_errors == 2
    await a.stop()
    await a.stop()
    assert b.peers() == [] and a.peers() == []


def test_helpers():
    backoff = Backoff(first=1.0, cap=8.0)
    delays = [backoff.next_delay() for _ in range(6)]
    assert 0.8 <= delays[0] <= 1.2 and all(6.4 <= d <= 9.6 for d in delays[3:])
    backoff.reset()
    assert backoff.next_delay() <= 1.2
    assert peer_id_of("/ip4/1.2.3.4/tcp/5/p2p/12D3KooWabc") == "12D3KooWabc"
    assert peer_id_of("/ip4/1.2.3.4/tcp/5") is None
    expanded = expand_unspecified("/ip4/0.0.0.0/tcp/7/p2p/X")
    assert expanded[0] == "/ip4/127.0.0.1/tcp/7/p2p/X" and all("0.0.0.0" not in a for a in expanded)
    assert expand_unspecified("/ip4/10.0.0.1/tcp/7") == ["/ip4/10.0.0.1/tcp/7"]


def test_relay_check_accepts_only_the_authors_bundles():
    import random

    author, other = identity_for(20), identity_for(21)
    data = make_bundle(author, SWARM, 1, 1000, random.Random(0))
    assert relay_rejection(author.peer_id, data) is None
    assert relay_rejection(other.peer_id, data) == "peer_id_mismatch"
    assert relay_rejection(author.peer_id, data[:-1] + bytes([data[-1] ^ 1])) is not None
    assert relay_rejection(author.peer_id, b"garbage") is not None


def test_unknown_transport_is_a_clear_error():
    with pytest.raises(TransportError, match="unknown transport"):
        create_transport("carrier-pigeon", identity_for(0), SWARM)


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=_ENV)


def _run_program(name: str) -> subprocess.CompletedProcess:
    """Program ``name`` of tests/programs/, run to its end (its stderr is checked by the caller)."""
    return subprocess.run(programs.argv(name), cwd=ROOT, capture_output=True, text=True, timeout=120, env=_ENV)


@pytest.mark.slow
def test_second_stack_in_one_process_is_a_clear_error():
    result = _run_python(
        "import hivemind\n"
        "from transport_node import identity_for\n"
        "from swarmnode.swarm.transport import TransportError, create_transport\n"
        "try:\n"
        "    create_transport('libp2p', identity_for(0), 's')\n"
        "except TransportError as exc:\n"
        "    print('ERR', exc)\n")
    assert result.returncode == 0, result.stderr
    assert "ERR" in result.stdout and "one transport per process" in result.stdout



@pytest.mark.slow
def test_hivemind_record_validator():
    result = _run_program("hivemind_record_checks")
    assert result.returncode == 0, result.stderr[-3000:]
    verdicts = json.loads(result.stdout.strip().splitlines()[-1])
    assert verdicts == {
        "valid bundle": True, "someone else's subkey": False, "another round's key": False,
        "another swarm": False, "garbage": False, "not bytes": False, "no subkey": False,
        "signed head": True, "unsigned head": False, "head with a later expiration": False,
        "head moved to another subkey": False, "head in another shard": False, "version 1 head": False,
        "version 1 rounds record": False, "others' heads are not signed": True,
        "strip restores the value": True,
        "bundle, expiry in TTL": True, "bundle, expiry 3 years ahead": False,
        "old bundle re-stored with a fresh expiry": False, "old bundle with its own expiry": True,
        "signed envelope, not a bundle": False, "oversized record": False, "head expiring in 3 years": False,
        # malformed: not bytes, no subkey, the unsigned head; bad_signature: the head's later
        # expiry, the head moved (to its new signer's shard); foreign_key: another's subkey,
        # round, swarm; old_version: the two version 1 records; wrong_shard: the one it names.
        "counted": {"bad_envelope": 1, "bad_signature": 2, "far_expiry": 2, "foreign_key": 3, "malformed": 3,
                    "not_a_bundle": 1, "old_version": 2, "too_large": 1, "unsigned_expiry": 1, "wrong_shard": 1},
        "stored: header only": [True, "foreign_key", False, None, None],
    }



@pytest.mark.slow
def test_hivemind_bounded_storage():
    result = _run_program("hivemind_bounded_storage")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "honest stores": [True, True, True, True], "honest established": True,
        "honest over its bound": [True, True], "honest holds at most its bound": True,
        "crowd stored": 3, "crowd checked": 3, "newcomers within their room": True, "honest kept all": True,
        "a smaller newcomer fits": True, "a bad record is refused after the room check": False,
        "no empty keys": True, "total within budget": True, "budget shared by the established": True,
        "re-store too soon refused": False, "heaps stay small": True,
        "one record over a signer's bound": False, "regular (not subkeyed) value": False,
        "per key": [True, True, True, False], "a held signer refreshes": True, "another key": True,
        "own announcement": True, "junk announcements held": 9, "a newcomer's bundle beside them": True,
        "own announcement refreshed, longer": True,
        "refused": {"key_full": 1, "newcomers_full": 68, "not_a_bundle": 1, "not_subkeyed": 1, "too_frequent": 1,
                    "too_large": 1},
    }


@pytest.mark.slow
def test_libp2p_relay_drops_are_reported_under_the_signed_origin(spawn, tmp_path):
    """A hostile libp2p peer (tests/flooder.py, its own relay check removed) announces and
    serves garbage, flipped bytes, a stolen key's bundles and replays, and pushes malformed
    announcements: the receiver's announcement check, its pull check or its repeat check
    drops each, and reports it under that peer. The node publishes a round a
    second: it pulls within the budget its rounds give it."""
    log = tmp_path / "flooder.log"
    flooder = subprocess.Popen([sys.executable, str(Path(__file__).parent / "flooder.py"), "--mix", "relay",
                                "--swarm", SWARM, "--seconds", "120", "--start-file", str(tmp_path / "go")],
                               stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ready = wait_until(lambda: next((json.loads(line) for line in log.read_text().splitlines()
                                       if line.startswith('{"event": "ready"')), None), 60, "the flooder")
        node = spawn("libp2p", 5, bootstrap=ready["addresses"][:1])
        (tmp_path / "go").touch()
        rounds = iter(range(10**6))
        wait_until(lambda: node.publish(next(rounds), 1_000) and {r["reason"] for r in node.rejected()}
                 >= {"malformed", "bad_signature", "peer_id_mismatch", "replay", "bad_announcement"}, 90,
                 "every kind of drop to be reported")
        assert {r["author"] for r in node.rejected()} == {ready["peer_id"]}
        assert len(node.messages()) == 1  # the replayed bundle's first copy, and nothing else
    finally:
        os.killpg(flooder.pid, signal.SIGKILL)
        flooder.wait(10)



@pytest.mark.slow
def test_peer_exchange_answers_are_parsed_defensively():
    result = _run_program("libp2p_peer_answer_parsing")
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    good = "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWHjcpeecN6FBgGGp3wsFGJHrgcuNa5hBpcbHAViLPpjEB"
    assert got["good"] == [good, good]
    assert got["garbage"] == got["not a list"] == got["deep"] == got["too long"] == got["oversized"] == []
    assert got["too many"] == [good] * 64



@pytest.mark.slow
def test_a_hung_dht_call_ends_as_a_timeout_not_a_destroyed_task():
    """hivemind keeps no reference to the task running a call in the DHT process: once a call
    hangs on a future nothing else holds, the garbage collector destroys it mid-await and
    hivemind prints a GeneratorExit traceback (seen in CI when a node restarted). The call must
    instead end as an ordinary error within the timeout."""
    result = _run_program("hivemind_hung_call")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "destroyed" not in result.stderr, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["error"] is not None and got["error"].startswith("RuntimeError"), got
    assert "no answer within 2 s" in got["error"], got  # the DHT side's limit, not the caller's
