"""Idle connections from many keys cannot keep an honest newcomer out of a node.

Keys cost nothing: a stranger with 300 keys (``tests/programs/stranger_libp2p.py``, one stock
py-libp2p host a key) dials a node from each, all from 127.0.0.1, and then sends nothing. An
honest node that joins afterwards must exchange bundles with it within a round.

* libp2p: a node accepts at most 250 inbound connections (py-libp2p's inbound slots) and 125
  from one address, and closes the idlest whenever its free slots run short
  (``swarmnode/swarm/transport/libp2p/slots.py``, tested without I/O in
  tests/test_libp2p_pull.py). Stock py-libp2p let the crowd hold the slots and the newcomer
  could not join.
* hivemind: the connections are p2pd's, whose connection manager trims only beyond 512 and
  refuses none: it holds all 300 and still lets the newcomer in.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import programs  # noqa: E402
from eventproc import EventProcess  # noqa: E402
from swarmnode.swarm.transport.libp2p.slots import PER_ADDRESS, SLOT_RESERVE  # noqa: E402
from transport_node import SWARM, ProcNode  # noqa: E402
from waiting import wait_until  # noqa: E402

KEYS = 300
ROUND_S = 15.0  # the benchmarks' round: the newcomer's bundle and the node's cross within one


def established_to(port: int) -> int:
    """TCP connections established to ``port`` on this machine (the node's side of each)."""
    return sum(1 for c in psutil.net_connections(kind="tcp")
               if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port)


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["libp2p", "hivemind"])
def test_idle_connections_of_300_keys_leave_an_honest_newcomer_exchanging_within_a_round(transport, tmp_path):
    target = ProcNode(transport, 0, stderr_path=tmp_path / "target.err").ready()
    port = int(target.addresses[0].split("/tcp/")[1].split("/")[0])
    stranger = EventProcess(programs.argv("stranger_libp2p", "--target", target.addresses[0], "--swarm", SWARM,
                                          "--keys", KEYS, "--concurrency", KEYS, "--rounds", 0, "--linger", 300,
                                          "--no-hold"), stderr=tmp_path / "stranger.err")
    newcomer = None
    try:
        stranger.wait("ready", 30)
        if transport == "libp2p":
            # The keys connect, as many as the node lets in from one address; once they have
            # idled past the grace, the node closes the idlest to keep its reserve free.
            wait_until(lambda: target.refusals().get("inbound_idle", 0) >= SLOT_RESERVE, 120,
                       "the node to close idle connections", interval=1.0, procs=[stranger.proc])
        else:
            wait_until(lambda: established_to(port) >= KEYS, 120, "every key to connect", interval=1.0,
                       procs=[stranger.proc])
        held = established_to(port)
        newcomer = ProcNode(transport, 1, target.addresses[:1], stderr_path=tmp_path / "newcomer.err").ready()
        t0 = time.monotonic()  # its transport has started (start_s): from here it joins and exchanges
        wait_until(lambda: target.peer_id in newcomer.peers(), ROUND_S, "the newcomer to join", interval=0.2)
        joined_s = time.monotonic() - t0
        # The newcomer's first round, then the node's next one: each reaches the other.
        sent = {node.peer_id: node.publish(1, 5_000)["digest"] for node in (newcomer, target)}
        for node, other in ((target, newcomer), (newcomer, target)):
            wait_until(lambda: sent[other.peer_id] in {m["digest"] for m in node.messages()}, ROUND_S,
                       f"{node.stderr_path.stem} to receive the other's bundle", interval=0.2)
        exchanged_s = time.monotonic() - t0
        refusals = target.refusals()
        print(f"{transport}: the crowd's connections at the newcomer's arrival: {held}; newcomer started in "
              f"{newcomer.start_s:.1f} s, then joined in {joined_s:.1f} s and bundles crossed in {exchanged_s:.1f} s; "
              f"refusals {refusals}")
        assert exchanged_s <= ROUND_S
        if transport == "libp2p":
            assert refusals["inbound_address_full"] >= KEYS - PER_ADDRESS, "one address holds half the slots"
            assert held <= PER_ADDRESS - SLOT_RESERVE + 1 and len(target.peers()) <= PER_ADDRESS
        else:
            assert held >= KEYS, "p2pd holds every idle connection: under its connection manager's high mark"
    finally:
        stranger.kill()
        for node in (target, newcomer):
            if node is not None:
                node.kill()
