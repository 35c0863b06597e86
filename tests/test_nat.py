"""Desktops behind NAT take part, for real (root only; see tests/natlab.py for the network).

In the ``public`` namespace run ``swarmnode relay`` (the bootstrap peer) and one public node;
each home namespace, behind its own masquerading router with no port forwarding, runs one
node with ``--reachability private``. All three nodes publish a valid signed bundle and each
must receive the other two, over each transport. The homes must advertise no address, and
nothing in ``public`` can open a connection into a home.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from natlab import HOME_IP, PUBLIC_IP, NatLab, built_or_skip
from transport_node import SWARM, ProcNode, descendants
from waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow
HOME_PORT = 4101  # each home's node listens here: reachable inside the home only


@pytest.fixture
def lab():
    with built_or_skip(NatLab()) as built:
        yield built


def start_relay(prefix: list[str], transport: str, home: Path, listen: str, log: Path) -> tuple[subprocess.Popen, str]:
    """``swarmnode relay`` in its own session; returns it and the address it printed for bootstrap lists."""
    cmd = [*prefix, sys.executable, "-m", "swarmnode", "relay", "--transport", transport, "--swarm", SWARM,
           "--home", str(home), "--listen", listen]
    out = log.with_suffix(".out")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=open(out, "w"), stderr=open(log, "w"), text=True,
                            start_new_session=True)
    try:
        found = wait_until(lambda: re.search(r"^\s+--bootstrap (\S+)$", out.read_text(), re.MULTILINE), 90,
                           "the relay to print its bootstrap address", procs=[proc],
                           context=lambda: log.read_text()[-2000:])
    except AssertionError:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        raise
    return proc, found.group(1)


def torch_loaded(pid: int) -> bool:
    """Whether process ``pid`` has torch's native library mapped (an import leaves it there)."""
    return "/torch/" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.parametrize("transport", ["hivemind", "libp2p"])
def test_nodes_behind_nat_exchange_bundles_through_a_relay(lab, transport, tmp_path):
    relay, nodes = None, []
    try:
        relay, address = start_relay(lab.exec_prefix(lab.public), transport, tmp_path / "relay",
                                     f"/ip4/{PUBLIC_IP}/tcp/0", tmp_path / "relay.err")
        assert f"/ip4/{PUBLIC_IP}/tcp/" in address, address
        public = ProcNode(transport, 1, bootstrap=[address], listen=f"/ip4/{PUBLIC_IP}/tcp/0",
                          stderr_path=tmp_path / "public.err", prefix=lab.exec_prefix(lab.public))
        nodes.append(public)
        for seed, ns in ((2, lab.home1), (3, lab.home2)):
            nodes.append(ProcNode(transport, seed, bootstrap=[address], listen=f"/ip4/0.0.0.0/tcp/{HOME_PORT}",
                                  stderr_path=tmp_path / f"home{seed}.err", private=True,
                                  prefix=lab.exec_prefix(ns)))
        for node in nodes:
            node.ready(90)
        relay_id = address.rsplit("/p2p/", 1)[1]
        for node in nodes:
            wait_until(lambda: relay_id in node.peers(), 60, "every node to join through the relay")
        # A home advertises nothing; a public node its public address.
        assert nodes[1].addresses == [] and nodes[2].addresses == []
        assert any(PUBLIC_IP in a for a in public.addresses)
        if transport == "libp2p":
            # An announcement is pushed to the peers connected at the publish, and passed on
            # by them for SHARE_TTL only: a home that knows only the relay then, and is
            # sampled by the others too late, goes unheard this round. The peer exchange
            # connects the homes to the public node; wait for it.
            wait_until(lambda: {nodes[1].peer_id, nodes[2].peer_id} <= set(public.peers()), 60,
                       "the homes to find the public node through the peer exchange")
        sent = {node.peer_id: node.publish(1, 8_000)["digest"] for node in nodes}
        for node in nodes:
            expected = {d for peer, d in sent.items() if peer != node.peer_id}
            wait_until(lambda: {m["digest"] for m in node.messages()} >= expected, 60,
                     f"node {node.peer_id[-6:]} to receive the other two bundles")
        assert not torch_loaded(relay.pid), "the relay process loaded torch"
        if transport == "hivemind":  # DHT clients: no routing table lists them, so nobody dials them
            assert not {nodes[1].peer_id, nodes[2].peer_id} & set(public.peers())
        # No port forwarding: the home node listens, yet the public side cannot reach it.
        assert lab.can_connect(lab.home1, HOME_IP, HOME_PORT)
        assert not lab.can_connect(lab.public, "10.77.1.2", HOME_PORT)
        assert not lab.can_connect(lab.public, HOME_IP, HOME_PORT)
        for node in nodes:
            node.stop()
        # The relay stops cleanly on SIGTERM and leaves no helper process (hivemind: DHT, p2pd).
        helpers = descendants(relay.pid)
        relay.send_signal(signal.SIGTERM)
        assert relay.wait(60) == 0
        wait_until(lambda: not any(_alive(p) for p in helpers), 20,
                 "the relay's helper processes to exit")
    finally:
        for node in nodes:
            node.kill()
        if relay is not None and relay.poll() is None:
            os.killpg(relay.pid, signal.SIGKILL)
            relay.wait(10)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
