"""What a node's rollouts gave: /v1/credits, /metrics and ``swarmnode credits`` over a real ledger."""

from __future__ import annotations

import asyncio
import json
import threading

import aiohttp

from apifakes import FakeControl, make_state, metric_values
from swarmnode.cli import main
from swarmnode.node.api import ApiServer
from swarmnode.paths import NodeHome
from swarmnode.swarm.identity import Identity, name_from_peer_id
from swarmnode.swarm.ledger import Ledger, summary_of_files
from swarmnode.swarm.receipt import Credit, Receipt

AUTHOR = Identity.from_seed(b"A" * 32)
PEERS = [Identity.from_seed(bytes([i]) * 32).peer_id for i in range(1, 4)]


def filled_ledger(home: NodeHome) -> Ledger:
    """Three peers credit this node: 3, 2 and 1 groups (one of them without signal)."""
    ledger = Ledger(home.credits, lambda peer: True)
    keys = [f"{i:032x}" for i in range(3)]
    ledger.note_shared(5, "e" * 64, keys)
    for n, peer in zip((3, 2, 1), PEERS):
        credits = tuple(Credit(k, 0.5, not (peer == PEERS[2])) for k in keys[:n])
        assert ledger.offer(Receipt("s", peer, 9, AUTHOR.peer_id, 0.0, ((5, "e" * 64, credits),), "")) is None
    ledger.refuse("bad_signature")
    return ledger


def served(home: NodeHome, control: FakeControl):
    """The node's API on a thread of its own (the commands run their own loop); stop with the returned call."""
    loop = asyncio.new_event_loop()
    server = ApiServer(make_state(), control, home=home)
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    port = asyncio.run_coroutine_threadsafe(server.start(), loop).result(5)

    def stop() -> None:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
    return port, stop


def test_credits_in_the_api_the_metrics_and_the_command(tmp_path, capsys):
    home = NodeHome(tmp_path).create()
    control = FakeControl()
    control.credit_summary = filled_ledger(home).summary()
    port, stop = served(home, control)
    try:
        credits = json.loads(asyncio.run(_text(port, "/v1/credits")))["credits"]
        assert credits["total"] == {"groups": 6, "with_signal": 5, "peers": 3, "receipts": 3}
        assert credits["last_hour"]["groups"] == 6 and credits["hours"][-1]["groups"] == 6
        assert [p["groups"] for p in credits["by_peer"]] == [3, 2, 1] and credits["refused"] == {"bad_signature": 1}
        metrics = asyncio.run(_text(port, "/metrics"))
        values = metric_values(metrics)
        assert values['swarmnode_credited_groups_total{signal="yes"}'] == 5
        assert values['swarmnode_credited_groups_total{signal="any"}'] == 6
        assert values['swarmnode_receipts_refused_total{reason="bad_signature"}'] == 1
        assert main(["credits", "--home", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert "(the running node)" in out and "bad_signature 1" in out
        assert [line.split()[2] for line in out.splitlines() if line.startswith("last hour")] == ["6"]
        assert f"{name_from_peer_id(PEERS[0])}" in out.splitlines()[-3]
        assert main(["credits", "--json", "--home", str(tmp_path)]) == 0
        assert json.loads(capsys.readouterr().out)["credits"]["total"]["groups"] == 6
    finally:
        stop()


def test_credits_command_reads_a_stopped_nodes_ledger(tmp_path, capsys):
    home = NodeHome(tmp_path).create()
    filled_ledger(home)
    with open(home.credits / "receipts.jsonl", "ab") as fh:
        fh.write(b'{"at": 1')  # a torn line: skipped, and the stopped node's files left as they are
    before = (home.credits / "receipts.jsonl").read_bytes()
    assert main(["credits", "--json", "--home", str(tmp_path)]) == 0
    summary = json.loads(capsys.readouterr().out)["credits"]
    assert summary["total"]["groups"] == 6 and summary["refused"] == {}
    assert summary["by_peer"] == summary_of_files(home.credits)["by_peer"]
    assert (home.credits / "receipts.jsonl").read_bytes() == before
    assert main(["credits", "--home", str(tmp_path)]) == 0
    assert "(no node running)" in capsys.readouterr().out


def test_a_solo_node_says_it_keeps_no_ledger(tmp_path, capsys):
    port, stop = served(NodeHome(tmp_path).create(), FakeControl())
    try:
        assert main(["credits", "--home", str(tmp_path)]) == 0
        assert "keeps no ledger" in capsys.readouterr().out
        assert 'swarmnode_credited' not in asyncio.run(_text(port, "/metrics"))
    finally:
        stop()


async def _text(port: int, path: str) -> str:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session, session.get(path) as resp:
        return await resp.text()
