"""Nodes on one LAN find each other with no bootstrap list (root only; tests/natlab.py's SwitchLab
with a multicast route in each namespace).

Three transport nodes (tests/transport_node.py, ``--lan``), each alone in a namespace on one
bridge, start with no bootstrap peer; each must receive both others' bundles, over each
transport. Printed: the seconds from each node's start to its first peer and to its first
peer's bundle. Then again with a host that lies in mDNS (tests/programs/lan_liar.py: another
PeerID at a real node's address, other swarms, transports and versions, an oversized record,
a flood of services nobody answers) started first: the nodes still join each other, never
the forged PeerID, and count what they dropped; ``swarmnode doctor``'s LAN check on
another host of the LAN names the three.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time

import pytest

from natlab import HOME_IP, NatLab, SwitchLab, built_or_skip
from programs import argv
from programs.lan_liar import fake_id
from test_transport_contract import assert_clean
from transport_node import ProcNode
from waiting import wait_until

pytestmark = pytest.mark.slow
NODES = 3
FLOOD = 12  # past the 4 dials in flight; tests/test_lanrecord.py checks the table's bounds against hundreds


@pytest.fixture
def lab():
    with built_or_skip(SwitchLab(NODES + 1, multicast=True)) as built:
        yield built


def start_liar(lab: SwitchLab, transport: str, target: str) -> subprocess.Popen:
    proc = subprocess.Popen([*lab.exec_prefix(NODES), *argv("lan_liar", "contract-test", transport, target, FLOOD)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert wait_until(lambda: proc.stdout.readline().strip() == "ready", 60, "the liar's services", procs=[proc])
    return proc


@pytest.mark.parametrize("liar_on", [False, True], ids=["quiet", "liar"])
@pytest.mark.parametrize("transport", ["hivemind", "libp2p"])
def test_three_nodes_on_a_lan_find_each_other_and_exchange_bundles(lab, transport, liar_on, tmp_path):
    nodes: list[ProcNode] = []
    decoy = liar = None
    try:
        # A node of the swarm that is not one of the three and does not advertise: the liar
        # advertises its real address under another PeerID.
        decoy = ProcNode(transport, 9, listen=f"/ip4/{lab.address(NODES)}/tcp/4109",
                         stderr_path=tmp_path / "decoy.err", prefix=lab.exec_prefix(NODES)).ready()
        if liar_on:
            liar = start_liar(lab, transport, decoy.addresses[0])
        started = []
        for i in range(NODES):
            started.append(time.monotonic())
            nodes.append(ProcNode(transport, i, listen=f"/ip4/{lab.address(i)}/tcp/0", lan=True,
                                  stderr_path=tmp_path / f"node{i}.err", prefix=lab.exec_prefix(i)))
        ready = []
        for i, node in enumerate(nodes):
            node.ready()
            ready.append(time.monotonic() - started[i])
        ids = {n.peer_id for n in nodes}
        first_peer = [0.0] * NODES
        first_bundle = [0.0] * NODES
        round_no = 0

        def everyone_has_everyone() -> bool:
            nonlocal round_no
            round_no += 1
            for n in nodes:  # every poll: a bundle published before its node joined may reach no one
                n.send(cmd="publish", round=round_no, size=2000)
            now = time.monotonic()
            done = True
            for i, n in enumerate(nodes):
                if not first_peer[i] and set(n.peers()) & ids:
                    first_peer[i] = now - started[i]
                senders = {m["sender"] for m in n.messages()} - {n.peer_id}
                if senders and not first_bundle[i]:
                    first_bundle[i] = now - started[i]
                done &= senders >= ids - {n.peer_id}
            return done

        wait_until(everyone_has_everyone, 120, "every node's bundle at every other node", interval=1.0,
                   context=lambda: "\n".join((tmp_path / f"node{i}.err").read_text()[-1500:] for i in range(NODES)))
        print(f"\n{transport}, {'with' if liar_on else 'without'} the liar: seconds from a node's start (its "
              f"process) to ready {[round(t, 1) for t in ready]}, "
              f"to its first peer {[round(t, 1) for t in first_peer]}, to its first peer's bundle "
              f"{[round(t, 1) for t in first_bundle]} (median {statistics.median(first_bundle):.1f})")
        forged = fake_id(0)
        # A bundle may come through a third node first; each node also reaches the others it found
        # on the LAN, once its dials get past the flood's (4 in flight).
        wait_until(lambda: all(set(n.lan()["joined"]) >= ids - {n.peer_id} for n in nodes), 60,
                   "every node vouching for the other two as found on the LAN")
        for n in nodes:
            lan = n.lan()
            assert forged not in lan["joined"] and forged not in n.peers()
            counts = lan["counts"]
            for reason in ("other_swarm", "other_transport", "version", "oversized"):
                assert counts.get(f"lan_refused_{reason}", 0) >= liar_on, (reason, counts)
        # `swarmnode doctor` on another host of the LAN names the three; the forged service's address
        # answers TCP too (it is the decoy's: only a handshake unmasks it), the flood's do not.
        doctor = json.loads(subprocess.run([*lab.exec_prefix(NODES), *argv("lan_browse", "contract-test", transport)],
                                           capture_output=True, text=True, timeout=60, check=True).stdout)
        assert doctor["status"] == "ok" and all(n.peer_id in doctor["detail"] for n in nodes), doctor
        assert f"{NODES + liar_on} node(s)" in doctor["detail"] and fake_id(10) not in doctor["detail"], doctor
        if not liar_on:  # stopping leaves no zeroconf thread behind
            for n in nodes:
                assert_clean(n.stop())
            return
        # The handshake at the decoy's address shows the decoy's key, not the forged PeerID: after its
        # tries the forged service is dropped, as are the flood's services that nobody answers.
        wait_until(lambda: all(n.lan()["counts"].get("lan_refused_unanswered", 0) >= FLOOD + 1 for n in nodes),
                   120, "the forged and flooding services dropped as unanswered")
        assert all(forged not in n.lan()["joined"] for n in nodes)
    finally:
        for n in nodes:
            n.kill()
        if liar is not None:
            liar.stdin.close()
            liar.wait(20)
        if decoy is not None:
            decoy.kill()


@pytest.fixture
def homes():
    with built_or_skip(NatLab(multicast=True)) as built:
        yield built


@pytest.mark.parametrize("transport", ["hivemind", "libp2p"])
def test_behind_nat_a_node_finds_the_nodes_of_its_own_home_only(homes, transport, tmp_path):
    """Two homes behind their own routers (tests/natlab.py): in home 1 a node that takes itself
    for one behind NAT (``--reachability private``: it advertises nothing, it browses) joins the
    node beside it that advertises; the node of home 2, behind the other router, is never found."""
    nodes: list[ProcNode] = []
    try:
        beside, other = (ProcNode(transport, seed, listen=f"/ip4/{HOME_IP}/tcp/4101", lan=True,
                                  stderr_path=tmp_path / f"node{seed}.err", prefix=homes.exec_prefix(ns))
                         for seed, ns in ((21, homes.home1), (23, homes.home2)))
        nodes += [beside, other]
        behind = ProcNode(transport, 22, listen=f"/ip4/{HOME_IP}/tcp/4102", lan=True, private=True,
                          stderr_path=tmp_path / "node22.err", prefix=homes.exec_prefix(homes.home1))
        nodes.append(behind)
        for n in nodes:
            n.ready()
        t0 = time.monotonic()
        wait_until(lambda: beside.peer_id in behind.lan()["joined"], 60, "the node behind NAT joining its neighbour")
        print(f"\n{transport}: behind NAT, joined the node beside it {time.monotonic() - t0:.1f} s after ready")
        time.sleep(5)  # time enough for the other home's advertisement, were it to cross the router
        for n in nodes:
            assert other.peer_id not in n.peers() and other.peer_id not in n.lan()["joined"]
        assert other.lan()["counts"].get("lan_joins", 0) == 0 and other.peers() == []
    finally:
        for n in nodes:
            n.kill()
