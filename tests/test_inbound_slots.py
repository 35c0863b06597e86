"""Idle connections from many keys cannot keep an honest newcomer out of a libp2p node.

A public libp2p node accepts a bounded number of inbound connections (py-libp2p's inbound
slots), and keys cost nothing: a stranger with 300 keys (``tests/programs/stranger_libp2p.py``,
one stock py-libp2p host a key) dials the node from each and then sends nothing. The node
closes the idlest of them whenever its free slots run short, so an honest node that joins
afterwards exchanges bundles with it within a round. The rule itself is
``swarmnode/swarm/transport/libp2p/slots.py`` (tested without I/O in tests/test_libp2p_pull.py).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import programs  # noqa: E402
from eventproc import EventProcess  # noqa: E402
from swarmnode.swarm.transport.libp2p.slots import PER_ADDRESS, SLOT_RESERVE  # noqa: E402
from transport_node import SWARM, ProcNode  # noqa: E402
from waiting import wait_until  # noqa: E402

KEYS = 300
ROUND_S = 15.0  # the benchmarks' round: the newcomer's bundle and the node's cross within one


@pytest.mark.slow
def test_idle_connections_of_300_keys_leave_an_honest_newcomer_exchanging_within_a_round(tmp_path):
    target = ProcNode("libp2p", 0, stderr_path=tmp_path / "target.err").ready()
    stranger = EventProcess(programs.argv("stranger_libp2p", "--target", target.addresses[0], "--swarm", SWARM,
                                          "--keys", KEYS, "--concurrency", KEYS, "--rounds", 0, "--linger", 300,
                                          "--no-hold"), stderr=tmp_path / "stranger.err")
    newcomer = None
    try:
        stranger.wait("ready", 30)
        # The stranger's keys connect, as many as the node lets in from one address; once they
        # have idled past the grace, the node closes the idlest to keep its reserve free.
        wait_until(lambda: target.refusals().get("refused_inbound_idle", 0) >= SLOT_RESERVE, 120,
                   "the node to close idle connections", interval=1.0, procs=[stranger.proc])
        held = len(target.peers())
        t0 = time.monotonic()
        newcomer = ProcNode("libp2p", 1, target.addresses[:1], stderr_path=tmp_path / "newcomer.err").ready()
        wait_until(lambda: target.peer_id in newcomer.peers(), ROUND_S, "the newcomer to join", interval=0.2)
        joined_s = time.monotonic() - t0
        # The newcomer's first round, then the node's next one: each reaches the other.
        sent = {node.peer_id: node.publish(1, 5_000)["digest"] for node in (newcomer, target)}
        for node, other in ((target, newcomer), (newcomer, target)):
            wait_until(lambda: sent[other.peer_id] in {m["digest"] for m in node.messages()}, ROUND_S,
                       f"{node.stderr_path.stem} to receive the other's bundle", interval=0.2)
        exchanged_s = time.monotonic() - t0
        refusals = target.refusals()
        print(f"stranger keys connected at the newcomer's arrival: {held}; newcomer joined in {joined_s:.1f} s, "
              f"bundles crossed {exchanged_s:.1f} s after it started; refusals {refusals}")
        assert exchanged_s <= ROUND_S
        assert refusals["refused_inbound_address_full"] >= KEYS - PER_ADDRESS, "one address holds half the slots"
        assert held <= PER_ADDRESS - SLOT_RESERVE + 1 and len(target.peers()) <= PER_ADDRESS
    finally:
        stranger.kill()
        for node in (target, newcomer):
            if node is not None:
                node.kill()
