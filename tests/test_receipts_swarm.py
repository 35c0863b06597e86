"""Receipts across a real swarm: three nodes on each transport, each in its own process with a
real Exchange and ledger (tests/receipt_node.py). Every node shares, trains on its peers'
groups and shares again, round after round; each node's ledger must then hold exactly what its
peers say they trained on of its groups, and nothing was refused."""

from __future__ import annotations

import pytest

from receipt_node import ReceiptNode
from waiting import wait_until

ROUNDS = 3
J = 4


@pytest.fixture
def nodes(tmp_path):
    started: list[ReceiptNode] = []

    def start(transport: str) -> list[ReceiptNode]:
        first = ReceiptNode(transport, 0, stderr_path=tmp_path / "node0.err")
        started.append(first)
        first.ready()
        for seed in (1, 2):
            node = ReceiptNode(transport, seed, bootstrap=first.addresses[:1], stderr_path=tmp_path / f"node{seed}.err")
            started.append(node)
            node.ready()
        return started

    yield start
    for node in started:
        node.kill()


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["hivemind", "libp2p"])
def test_each_ledger_holds_what_its_peers_trained_on(nodes, transport):
    swarm = nodes(transport)
    wait_until(lambda: all(len(n.peers()) >= 2 for n in swarm), 60, "every node to connect to every other")
    owed: set[tuple[str, str, str, str]] = set()  # (author, trainer, bundle digest, group key)
    for r in range(ROUNDS + 1):
        for node in swarm:
            node.share(r)
        for node in swarm:  # every peer's bundle of the round, before anyone trains on it
            wait_until(lambda: {(a["sender"], a["round"]) for a in node.accepted()}
                       >= {(p.peer_id, r) for p in swarm if p is not node}, 60, f"round {r}'s bundles")
        for node in swarm:
            # The last round only promotes the peers' standing (n = 0): its receipts would need one more share.
            credits = node.train(r, J if r < ROUNDS else 0)
            assert r == ROUNDS or len(credits) == J
            owed |= {(author, node.peer_id, digest, key) for author, digest, key in credits}
    assert {a for a, *_ in owed} == {n.peer_id for n in swarm}  # every node's groups were trained on
    for node in swarm:
        ledger = node.ledger()
        got = {(node.peer_id, line["trainer"], digest, key) for line in ledger["lines"]
               for digest, key, signal in line["credits"]}
        assert got == {o for o in owed if o[0] == node.peer_id}
        assert all(signal for line in ledger["lines"] for _, _, signal in line["credits"])
        assert ledger["summary"]["refused"] == {} and ledger["summary"]["pending"] == 0
        assert ledger["summary"]["total"]["peers"] == 2
        assert node.refused() == []
