"""A private swarm on each transport, for real: nodes in their own processes on 127.0.0.1
(``tests/transport_node.py``). Two members with the swarm key exchange bundles; an outsider
that knows the swarm's name but has no key, and one with a wrong key, join the same network
(the same DHT, the same libp2p peers) yet receive no member's bundle and plant none of
theirs: the members' handlers never see them, and the members count what they refused as
``wrong_key``. The second member is private (``--reachability private``: a DHT client whose
records live at the others; on libp2p it leaves its bundles with the first to hold), so the
sealed stores, reads and holds through another member are crossed too. A third member is a
daemon, ``swarmnode start --swarm-key KEY`` as a user runs it: it and the first exchange
bundles, and it accepts none of the outsiders' and they read none of its."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from nodeproc import cli_json, free_port, start_argv, write_signal_tasks
from swarmnode.swarm.sealing import format_swarm_key
from transport_node import SWARM, ProcNode, identity_for
from waiting import wait_until

pytestmark = pytest.mark.slow

KEY = format_swarm_key(bytes(range(32)))
WRONG_KEY = format_swarm_key(bytes(32))


@pytest.fixture
def nodes():
    started: list[ProcNode] = []
    yield started
    for node in started:
        node.kill()


@pytest.fixture
def daemons():
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def wrong_key_refusals(node: ProcNode) -> int:
    return node.refusals().get("wrong_key", 0)


@pytest.mark.parametrize("transport", ["hivemind", "libp2p"])
def test_members_exchange_and_outsiders_neither_read_nor_plant(nodes, daemons, tmp_path, transport, tiny_model_dir):
    def spawn(seed: int, key: str | None, bootstrap: list[str], private: bool = False,
              listen: str | None = None) -> ProcNode:
        node = ProcNode(transport, seed, bootstrap=bootstrap, swarm_key=key, private=private, listen=listen,
                        stderr_path=tmp_path / f"n{seed}.err")
        nodes.append(node)
        return node

    # The daemon first, its start (a model to load) the slowest: bootstrapped to where the first will be.
    port = free_port()
    home = tmp_path / "daemon"
    home.mkdir()
    tasks = write_signal_tasks(tmp_path / "tasks.toml")
    daemon = subprocess.Popen(start_argv(home, tiny_model_dir, "--tasks", str(tasks), "--transport", transport,
                                         "--swarm", SWARM, "--swarm-key", KEY, "--listen", "/ip4/127.0.0.1/tcp/0",
                                         "--bootstrap", f"/ip4/127.0.0.1/tcp/{port}/p2p/{identity_for(0).peer_id}"),
                              stdout=subprocess.DEVNULL, stderr=open(home / "stderr.txt", "w"), start_new_session=True)
    daemons.append(daemon)
    first = spawn(0, KEY, [], listen=f"/ip4/127.0.0.1/tcp/{port}").ready()
    boot = first.addresses[:1]
    member, outsider, wrong = (spawn(1, KEY, boot, private=True), spawn(2, None, boot), spawn(3, WRONG_KEY, boot))
    for node in (member, outsider, wrong):
        node.ready()
    members, others = (first, member), (outsider, wrong)
    # A private hivemind node is a DHT client, in no routing table: it counts the first as a peer.
    wait_until(lambda: set(first.peers()) >= {outsider.peer_id, wrong.peer_id} and first.peer_id in member.peers(),
               45, "every node to join the first")

    sent = {node.peer_id: node.publish(1, 20_000)["digest"] for node in (*members, *others)}
    for node, peer in ((first, member), (member, first)):
        wait_until(lambda: sent[peer.peer_id] in {m["digest"] for m in node.messages()}, 45,
                   "each member to receive the other's bundle")
    # The outsiders published into the same network: the members refuse what reached them.
    wait_until(lambda: sum(wrong_key_refusals(n) for n in members) > 0, 30, "a refusal counted as wrong_key")
    for node in others:  # and again, now that everyone has long been connected
        sent[node.peer_id + "/2"] = node.publish(2, 20_000)["digest"]
    time.sleep(4.0)  # several polls and pushes: a bundle that crossed would show by now

    # The daemon member: it and the first exchange bundles (the first publishes on every poll: a
    # bundle published before the daemon joined may reach no one).
    daemon_id = wait_until(lambda: (cli_json(home, "status") or {}).get("peer_id"), 90, "the daemon's API",
                           interval=1.0, procs=[daemon], context=lambda: (home / "stderr.txt").read_text()[-3000:])
    rounds = iter(range(10, 1000))

    def exchanged() -> bool:
        first.send(cmd="publish", round=next(rounds), size=2000)
        accepted = {p["peer_id"] for p in cli_json(home, "peers") or [] if p["accepted"]}
        assert not accepted & {n.peer_id for n in others}, "the daemon accepted an outsider's bundle"
        return first.peer_id in accepted and daemon_id in {m["sender"] for m in first.messages()}

    wait_until(exchanged, 90, "the daemon and the first to exchange bundles", interval=1.0, procs=[daemon],
               context=lambda: (home / "stderr.txt").read_text()[-3000:])
    member_ids = {n.peer_id for n in members}
    for node in members:
        assert {m["sender"] for m in node.messages()} <= member_ids | {daemon_id}, \
            "a member received an outsider's bundle"
        assert not set(sent.values()) - {sent[p] for p in member_ids} & {m["digest"] for m in node.messages()}
    for node in others:
        assert not {m["sender"] for m in node.messages()} & (member_ids | {daemon_id}), \
            "an outsider read a member's bundle"
    if transport == "libp2p":  # the private member's bundle went through a sealed hold at the first
        assert first.counters()["stored_bytes"]["held"] > 0
    assert all("Traceback" not in (tmp_path / f"n{seed}.err").read_text() for seed in range(4))
