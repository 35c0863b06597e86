"""The local HTTP API against a real NodeState and a fake node control."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import stat
import statistics
import threading
import time

import aiohttp
import pytest

from apifakes import FakeControl, RealDaemon, finished_row, make_state, metric_values, metrics_text, yardstick_row
from nodeproc import free_port
from swarmnode.cli.status import status_lines
from swarmnode.events import (
    BundleAccepted,
    BundleRefused,
    LevelsNow,
    PauseChanged,
    PeerJoined,
    PeerLeft,
    PhaseChanged,
    RoundFinished,
    RoundStarted,
    ThreadsChosen,
    YardstickScored,
    parse_event,
)
from swarmnode.node import client
from swarmnode.node.api import ApiServer
from swarmnode.node.threads import ThreadChoice
from swarmnode.paths import NodeHome
from waiting import wait_until_async


@pytest.fixture
async def node(tmp_path):
    home = NodeHome(tmp_path / "home").create()
    state = make_state()
    control = FakeControl(state=state)
    server = ApiServer(state, control, home=home, keepalive_s=0.2)
    port = await server.start()
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
        yield server, state, control, session
    await server.stop()


async def test_status_reports_the_node(node):
    server, state, control, session = node
    state.emit(RoundStarted(3))
    state.emit(PhaseChanged("generating"))
    state.emit(RoundFinished(finished_row(3, 0.5)))
    async with session.get("/v1/status") as resp:
        assert resp.status == 200
        body = await resp.json()
    assert body["peer_id"] == "12D3KooWSelfAlice" and body["name"] == "alice" and body["swarm"] == "test-swarm"
    assert (body["round"], body["phase"], body["paused"], body["peers"], body["last_reward"]) == \
        (3, "generating", False, 1, 0.5)
    assert {"transport", "model", "device", "uptime_s"} <= body.keys()
    assert (body["levels"], body["signal_rate"], body["yardstick"]) == ({}, None, None)  # none yet


async def test_levels_signal_rate_and_yardstick_in_status_and_metrics(node):
    server, state, control, session = node
    state.emit(RoundFinished(finished_row(0, 0.5, signal_rate=0.75)))
    state.emit(LevelsNow({"bf": 2, "base_conversion": -2}, ("base_conversion",)))
    record = yardstick_row(10, 0.25, {"bf": 0.5}, questions=4)
    state.emit(YardstickScored(yardstick_row(0, 0.0, {"bf": 0.0}, questions=4)))
    state.emit(YardstickScored(record))
    async with session.get("/v1/status") as resp:
        body = await resp.json()
    assert (body["levels"], body["signal_rate"], body["yardstick"]) == \
        ({"bf": 2, "base_conversion": -2}, 0.75, record.to_json())
    assert body["dormant"] == ["base_conversion"]
    async with session.get("/v1/yardstick") as resp:
        assert [r["round"] for r in (await resp.json())["yardstick"]] == [0, 10]
    async with session.get("/metrics") as resp:
        text = await resp.text()
    values = metric_values(text)
    for sample, value in (('swarmnode_signal_rate', 0.75), ('swarmnode_level{family="base_conversion"}', -2),
                          ('swarmnode_level{family="bf"}', 2), ('swarmnode_yardstick_score{family=""}', 0.25),
                          ('swarmnode_family_dormant{family="base_conversion"}', 1),
                          ('swarmnode_family_dormant{family="bf"}', 0),
                          ('swarmnode_yardstick_score{family="bf"}', 0.5), ('swarmnode_yardstick_round', 10)):
        assert values[sample] == value


async def test_status_says_how_many_threads_and_why(node):
    server, state, control, session = node
    state.info.priority = "background (nice 19)"
    async with session.get("/v1/status") as resp:
        assert (await resp.json())["threads"] == {}  # not chosen yet
    choice = ThreadChoice(1, "auto: other programs use 1.02 of 2 cores", others_busy=1.0234, cores=2)
    state.emit(ThreadsChosen(**choice.as_dict()))
    async with session.get("/v1/status") as resp:
        body = await resp.json()
    assert body["priority"] == "background (nice 19)"
    assert body["threads"] == {"count": 1, "reason": "auto: other programs use 1.02 of 2 cores", "pinned": False,
                               "others_busy": 1.02, "cores": 2}
    async with session.get("/metrics") as resp:
        assert metric_values(await resp.text())["swarmnode_threads"] == 1


async def test_rounds_since(node):
    server, state, control, session = node
    for r in range(1, 5):
        state.emit(RoundFinished(finished_row(r, r / 10)))
    async with session.get("/v1/rounds?since=3") as resp:
        assert [row["round"] for row in (await resp.json())["rounds"]] == [3, 4]
    async with session.get("/v1/rounds") as resp:
        assert len((await resp.json())["rounds"]) == 4


@pytest.mark.parametrize("since", ["abc", "1.5", ""])
async def test_rounds_bad_since_is_400_json(node, since):
    server, state, control, session = node
    async with session.get(f"/v1/rounds?since={since}") as resp:
        assert resp.status == 400
        assert "since" in (await resp.json())["error"]


async def test_peers(node):
    server, state, control, session = node
    async with session.get("/v1/peers") as resp:
        peers = (await resp.json())["peers"]
    assert [p["name"] for p in peers] == ["bob"] and peers[0]["rejected_by_reason"] == {"bad_signature": 1}


async def test_unknown_path_and_wrong_method_answer_json(node):
    server, state, control, session = node
    async with session.get("/v2/nothing") as resp:
        assert resp.status == 404 and resp.content_type == "application/json"
        assert "/v2/nothing" in (await resp.json())["error"]
    async with session.get("/v1/stop") as resp:
        assert resp.status == 405 and "error" in await resp.json()


async def test_other_host_names_are_refused(node):
    server, state, control, session = node
    async with session.get("/v1/status", headers={"Host": f"attacker.example:{server.port}"}) as resp:
        assert resp.status == 403 and "error" in await resp.json()
    async with session.get("/v1/status", headers={"Host": f"localhost:{server.port}"}) as resp:
        assert resp.status == 200


async def test_big_body_is_refused(node):
    server, state, control, session = node
    headers = {"Authorization": f"Bearer {server.token}"}
    async with session.post("/v1/pause", data=b"x" * 5000, headers=headers) as resp:
        assert resp.status == 413 and "error" in await resp.json()
    assert control.calls == []


async def test_handler_bug_is_500_json_without_traceback(node):
    server, state, control, session = node

    def broken() -> list[dict]:
        raise RuntimeError("secret internals")

    control.peer_rows = broken
    async with session.get("/v1/peers") as resp:
        text = await resp.text()
    assert resp.status == 500 and json.loads(text)["error"]
    assert "Traceback" not in text and "secret internals" not in text


@pytest.mark.parametrize("path, call, paused", [("/v1/stop", "stop", False), ("/v1/pause", "pause", True),
                                                ("/v1/resume", "resume", False)])
async def test_actions_need_the_token(node, path, call, paused):
    server, state, control, session = node
    state.paused = not paused if call != "stop" else False
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": server.token}):
        async with session.post(path, headers=headers) as resp:
            assert resp.status == 401 and "token" in (await resp.json())["error"]
    assert control.calls == []
    async with session.post(path, headers={"Authorization": f"Bearer {server.token}"}) as resp:
        assert resp.status == 200
    assert control.calls == [call]
    assert state.paused is paused


async def test_the_swarm_key_needs_the_token(node):
    server, _state, control, session = node
    control.key = "snk1.the-secret"
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        async with session.get("/v1/swarm-key", headers=headers) as resp:
            text = await resp.text()
            assert resp.status == 401 and "the-secret" not in text
    async with session.get("/v1/status") as resp:
        assert "the-secret" not in await resp.text()
    async with session.get("/v1/swarm-key", headers={"Authorization": f"Bearer {server.token}"}) as resp:
        assert resp.status == 200 and (await resp.json()) == {"swarm_key": "snk1.the-secret"}


async def test_events_arrive_in_order_over_sse(node):
    server, state, control, session = node
    sent = [RoundStarted(1), PhaseChanged("generating"), BundleAccepted("bob", 1, 3),
            BundleRefused("eve", "bad_signature"), BundleRefused(None, "rate_limited"), PeerJoined("carol"),
            PhaseChanged("training"), RoundFinished(finished_row(1, 0.5)), PeerLeft("carol"),
            ThreadsChosen(1, "pinned", pinned=True, cores=2), PauseChanged(True),
            LevelsNow({"bf": 1}, ("bf",)), YardstickScored(yardstick_row(1, 0.5, {"bf": 0.5}))]
    expected = [("round_started", {"round": 1}), ("phase", {"phase": "generating"}),
                ("bundle_accepted", {"peer": "bob", "round": 1, "groups": 3}),
                ("bundle_rejected", {"peer": "eve", "reason": "bad_signature"}),
                ("bundle_rejected", {"peer": None, "reason": "rate_limited"}),
                ("peer_joined", {"peer": "carol"}), ("phase", {"phase": "training"}),
                ("round_finished", {"round": 1, "metrics": finished_row(1, 0.5).to_json()}),
                ("peer_left", {"peer": "carol"}),
                ("threads", {"count": 1, "reason": "pinned", "pinned": True, "others_busy": None, "cores": 2}),
                ("paused", {"paused": True}), ("levels", {"levels": {"bf": 1}, "dormant": ["bf"]}),
                ("yardstick", {"record": yardstick_row(1, 0.5, {"bf": 0.5}).to_json()})]
    async with session.get("/v1/events") as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        assert await resp.content.readline() == b": connected\n"

        def from_worker_thread() -> None:
            for event in sent:
                state.emit(event)

        threading.Thread(target=from_worker_thread).start()
        parser, got, names, keepalives = client.SseParser(), [], [], 0
        while len(got) < len(expected):
            line = (await asyncio.wait_for(resp.content.readline(), 5)).decode()
            keepalives += line.startswith(": keepalive")
            if line.startswith("event: "):
                names.append(line[len("event: "):].strip())
            event = parser.feed(line)
            if event:
                got.append(event)
    assert [(e["type"], {k: v for k, v in e.items() if k not in ("type", "time")}) for e in got] == expected
    assert names == [t for t, _ in expected]
    assert [parse_event(e) for e in got] == sent  # what the dashboard reads back is what the node sent


async def test_sse_sends_keepalives_and_stop_closes_the_stream(node):
    server, state, control, session = node
    async with session.get("/v1/events") as resp:
        lines = [await asyncio.wait_for(resp.content.readline(), 5) for _ in range(4)]
        assert b": keepalive\n" in lines
        await server.stop()
        rest = await asyncio.wait_for(resp.content.read(), 5)
        assert b"event:" not in rest and resp.content.at_eof()


async def test_metrics_follow_the_prometheus_text_format(node):
    server, state, control, session = node
    state.emit(RoundFinished(finished_row(1, 0.25)))
    state.emit(RoundFinished(finished_row(2, 0.75)))
    state.emit(BundleAccepted("bob", 2, 1))
    state.emit(BundleRefused("eve", 'quote"back\\slash\nnewline'))
    async with session.get("/metrics") as resp:
        assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = await resp.text()
    assert text.endswith("\n")
    lines = text.splitlines()
    sample = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*",?)*\})? '
                        r'(NaN|[+-]Inf|-?[0-9.e+-]+)$')
    families = []
    for line in lines:
        if line.startswith("# TYPE "):
            families.append(line.split()[2])
            assert line.split()[3] in ("counter", "gauge", "summary")
        elif not line.startswith("# HELP "):
            assert sample.match(line), line
            assert line.split("{")[0].split(" ")[0].startswith(families[-1])  # samples follow their TYPE
    assert len(families) == len(set(families))
    helps = [line.split()[2] for line in lines if line.startswith("# HELP ")]
    assert helps == families
    assert "_created" not in text  # prometheus_client adds none for a counter made without a creation time
    expected = {
        "swarmnode_rounds_total": 2, "swarmnode_reward_last": 0.75, "swarmnode_reward_mean": 0.5,
        "swarmnode_tokens_generated_total": 200, "swarmnode_peers": 1,
        'swarmnode_transport_events_total{event="published"}': 3,
        'swarmnode_transport_events_total{event="delivered"}': 5,
        "swarmnode_round_seconds_sum": 4.0, "swarmnode_round_seconds_count": 2,
        'swarmnode_bundles_total{outcome="accepted",reason=""}': 1,
        'swarmnode_bundles_total{outcome="rejected",reason="quote\\"back\\\\slash\\nnewline"}': 1,
        # the transport's own counters (FakeControl.counters)
        'swarmnode_transport_refused_total{reason="far_expiry"}': 3,
        'swarmnode_transport_refused_total{reason="not_a_bundle"}': 1, "swarmnode_transport_evicted_total": 2,
        'swarmnode_transport_stored_bytes{store="stored"}': 4096,
        'swarmnode_transport_announce_stores_total{how="direct"}': 6,
        'swarmnode_transport_announce_stores_total{how="traversal"}': 2,
        'swarmnode_transport_announce_stores_total{how="direct_failed"}': 1,
    }
    values = metric_values(text)
    assert {sample: values.get(sample) for sample in expected} == expected


def test_metrics_before_any_round_have_no_numbers_made_up():
    text = metrics_text(make_state())
    assert "swarmnode_reward_last NaN" in text and "swarmnode_reward_mean NaN" in text


async def test_api_file_is_private_and_removed_on_stop(tmp_path):
    home = NodeHome(tmp_path / "home").create()
    server = ApiServer(make_state(), FakeControl(), home=home)
    port = await server.start()
    data = json.loads(home.api_file.read_text())
    assert data["port"] == port and data["url"] == f"http://127.0.0.1:{port}" and data["token"] == server.token
    assert len(data["token"]) >= 32
    assert stat.S_IMODE(home.api_file.stat().st_mode) == 0o600
    assert [p.name for p in home.root.iterdir() if p.name.startswith(".api-")] == []
    await server.stop()
    assert not home.api_file.exists()


async def test_bound_to_loopback_only(node):
    server, state, control, session = node
    addresses = [address[0] for address in server._runner.addresses]
    assert addresses == ["127.0.0.1"]
    other = _non_loopback_address()
    if other is None:
        return  # no other interface on this machine: the socket check above is the whole test
    with pytest.raises(OSError):
        socket.create_connection((other, server.port), timeout=1).close()


def _non_loopback_address() -> str | None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


async def test_port_in_use_is_a_clear_error(tmp_path):
    home = NodeHome(tmp_path / "home").create()
    first = ApiServer(make_state(), FakeControl(), home=home)
    port = await first.start()
    try:
        with pytest.raises(OSError, match="--api-port"):
            await ApiServer(make_state(), FakeControl(), home=home, port=port).start()
    finally:
        await first.stop()


async def test_status_stays_fast_while_the_round_thread_updates_state(node, capsys):
    server, state, control, session = node
    stop = threading.Event()

    def busy_round_thread() -> None:
        r = 0
        while not stop.is_set():
            r += 1
            state.emit(RoundStarted(r))
            state.emit(PhaseChanged("generating"))
            state.emit(RoundFinished(finished_row(r, 0.5)))
            time.sleep(0.001)

    worker = threading.Thread(target=busy_round_thread)
    worker.start()
    latencies = []
    try:
        for _ in range(500):
            t0 = time.perf_counter()
            async with session.get("/v1/status") as resp:
                await resp.read()
            latencies.append((time.perf_counter() - t0) * 1000)
    finally:
        stop.set()
        worker.join()
    latencies.sort()
    median, p99 = statistics.median(latencies), latencies[int(len(latencies) * 0.99) - 1]
    with capsys.disabled():
        print(f"\n/v1/status under load: median {median:.2f} ms, p99 {p99:.2f} ms over {len(latencies)} requests")
    assert median < 100


# -- the client subcommands ---------------------------------------------------------------------


async def test_client_reads_status_and_peers(node):
    server, state, control, session = node
    state.emit(RoundStarted(9))
    async with client.NodeApi(server.home) as api:
        assert (await api.status())["round"] == 9
        assert (await api.peers())[0]["name"] == "bob"
        await api.pause()
    assert control.calls == ["pause"]


async def test_a_client_closed_by_its_owner_means_no_node_to_whoever_kept_it(node):
    server, state, control, session = node
    async with client.NodeApi(server.home) as api:
        pass
    for call in (api.status, api.peers, api.pause):
        with pytest.raises(client.NoNodeRunning):
            await call()
    assert control.calls == []


def test_status_command_with_no_node(tmp_path, capsys):
    from swarmnode.cli import main

    assert main(["status", "--home", str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip() == f"no node running at {tmp_path.resolve()}"


def test_stale_api_file_means_no_node(tmp_path, capsys, monkeypatch):
    from swarmnode.cli import main

    home = NodeHome(tmp_path)
    dead = free_port()
    home.api_file.write_text(json.dumps({"port": dead, "token": "t", "pid": 2 ** 22 + 7,
                                         "url": f"http://127.0.0.1:{dead}"}))
    monkeypatch.setenv("SWARMNODE_HOME", str(tmp_path))
    assert main(["peers"]) == 1
    assert "no node running at" in capsys.readouterr().err
    # a live pid whose port refuses connections is just as dead
    home.api_file.write_text(json.dumps({"port": dead, "token": "t", "pid": 1, "url": f"http://127.0.0.1:{dead}"}))
    assert main(["peers", "--json"]) == 1
    assert "no node running at" in capsys.readouterr().err



def test_status_and_peers_commands_against_a_node(tmp_path, capsys):
    """The commands run their own event loop, so the node's API runs on another thread here."""
    from swarmnode.cli import main

    home = NodeHome(tmp_path).create()
    state = make_state()
    state.emit(RoundFinished(finished_row(4, 0.375, signal_rate=0.625)))
    state.emit(ThreadsChosen(**ThreadChoice(1, "auto: other programs use 1.00 of 2 cores", cores=2).as_dict()))
    state.info.priority = "background (nice 19)"
    state.emit(LevelsNow({"bf": 1, "arc_1d": -1}, ("arc_1d",)))
    state.emit(YardstickScored(yardstick_row(0, 0.0625, {}, questions=54)))
    loop = asyncio.new_event_loop()
    server = ApiServer(state, FakeControl(), home=home)
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(5)
        assert main(["status", "--home", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert "alice (12D3KooWSelfAlice)" in out and "0.375" in out
        assert "threads  1 (auto: other programs use 1.00 of 2 cores)" in out
        assert "priority background (nice 19)" in out
        assert "signal   0.625" in out and "levels   arc_1d (-1), bf 1" in out
        assert "0.062 greedy on 54 held-out questions, after 0 rounds" in out
        assert main(["status", "--json", "--home", str(tmp_path)]) == 0
        assert json.loads(capsys.readouterr().out)["name"] == "alice"
        assert main(["peers", "--home", str(tmp_path)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split()[:5] == ["NAME", "PEER", "ID", "VIA", "MODEL"] and lines[1].split()[0] == "bob"
        assert lines[1].split()[2:4] == ["lan", "SmolLM2-135M-Instruct"]  # found on the local network
        assert "3s ago" in lines[1] or "4s ago" in lines[1]
        assert main(["peers", "--json", "--home", str(tmp_path)]) == 0
        assert json.loads(capsys.readouterr().out)[0]["accepted"] == 5
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@pytest.mark.parametrize("lines, expected", [
    (["event: phase", 'data: {"type": "phase", "phase": "idle"}', ""], [{"type": "phase", "phase": "idle"}]),
    ([": keepalive", "", 'data: {"type":', 'data: "x"}', ""], [{"type": "x"}]),
    (["data: not json", "", "data: [1]", "", "data:{\"type\":\"y\"}", ""], [{"type": "y"}]),
])
def test_sse_parser(lines, expected):
    parser = client.SseParser()
    assert [e for e in (parser.feed(line + "\n") for line in lines) if e] == expected


# -- against a real daemon --------------------------------------------------------------------


async def _round_events(session: aiohttp.ClientSession, rounds: int) -> list[dict]:
    """The events from the next round_started until ``rounds`` rounds have finished."""
    parser, events = client.SseParser(), []
    async with session.get("/v1/events") as resp:
        while sum(e["type"] == "round_finished" for e in events) < rounds:
            event = parser.feed((await asyncio.wait_for(resp.content.readline(), 60)).decode())
            if event and (events or event["type"] == "round_started"):
                events.append(event)
    return events


def _keep_untrained_yardstick(model_dir, score: float) -> None:
    """Put an untrained yardstick score for ``model_dir`` and the packaged tasks in the cache."""
    import torch

    from swarmnode.config import NodeConfig
    from swarmnode.train.model import load_base_model, pick_dtype
    from swarmnode.train.policy import Policy
    from swarmnode.train.tasks import load_task_file
    from swarmnode.train.yardstick import (
        store_untrained,
        untrained_key,
        yardstick_questions,
    )

    cfg, device = NodeConfig(), torch.device("cpu")
    # in the daemon's own precision: the score is kept per weights, and auto may pick bf16 on this CPU
    policy = Policy(load_base_model(str(model_dir), device, pick_dtype(device, cfg.dtype)), cfg)
    questions = yardstick_questions(load_task_file(None))
    store_untrained(untrained_key(policy, questions), {"score": score, "by_family": {}, "by_level": {},
                                                       "questions": len(questions), "seconds": 1.0})


@pytest.mark.slow
async def test_every_endpoint_of_a_real_daemon(tmp_path, tiny_model_dir, monkeypatch):
    home = NodeHome(tmp_path / "home")
    monkeypatch.setenv("SWARMNODE_CACHE", str(tmp_path / "cache"))
    _keep_untrained_yardstick(tiny_model_dir, 0.125)  # the daemon reads it there instead of measuring it
    with RealDaemon(home, tiny_model_dir, tmp_path / "daemon.log") as daemon:
        await asyncio.to_thread(daemon.wait_for_api)
        async with client.NodeApi(home) as api, aiohttp.ClientSession(api.endpoint.url) as session:
            events = await _round_events(session, rounds=2)
            first = events[0]["round"]
            steps = [(e["type"], e.get("phase", e.get("round"))) for e in events
                     if e.get("phase") != "idle" and e["type"] != "levels"]
            after_finish = [b["type"] for a, b in zip(events, events[1:]) if a["type"] == "round_finished"]
            assert after_finish and set(after_finish) == {"levels"}  # each finished round says where levels are
            one_round = [("round_started", first), ("phase", "generating"), ("phase", "scoring"),
                         ("phase", "sharing"), ("phase", "training"), ("round_finished", first)]
            assert steps[:6] == one_round
            assert steps[6:] == [(kind, first + 1 if kind != "phase" else value) for kind, value in one_round]
            assert [e["time"] for e in events] == sorted(e["time"] for e in events)

            status = await api.status()
            assert status["peer_id"].startswith("12D3KooW") and status["name"] and status["transport"] == "solo"
            assert status["round"] >= first + 1 and status["device"] == "cpu" and status["peers"] == 0
            assert isinstance(status["last_reward"], float)
            assert status["threads"]["count"] == 1 and status["threads"]["pinned"]  # RealDaemon pins 1
            assert status["priority"] == "normal"  # the flag reaches the status
            rows = (await api.rounds(since=first))[:2]
            assert [r["round"] for r in rows] == [first, first + 1] and [r["threads"] for r in rows] == [1, 1]
            assert status["levels"] and all(isinstance(v, int) for v in status["levels"].values())
            assert 0.0 <= status["signal_rate"] <= 1.0
            assert (status["yardstick"]["round"], status["yardstick"]["score"]) == (0, 0.125)  # from the cache
            gain = status["gain"]["total"]  # solo: no peer gave anything, and it says so
            assert gain["rounds"] >= 2 and gain["external"] == 0 and gain["peer_reward"] is None
            assert "no external groups yet" in "\n".join(status_lines(status))
            assert status["yardstick_trend"]["untrained"] == 0.125
            assert [r["round"] for r in await api.yardstick()][:1] == [0]
            assert await api.peers() == [] and await api.credits() is None  # solo: no ledger
            async with session.get("/metrics") as resp:
                metrics = await resp.text()
            assert re.search(r"^swarmnode_rounds_total [2-9]", metrics, re.MULTILINE)
            assert re.search(r"^swarmnode_tokens_generated_total [1-9]", metrics, re.MULTILINE)
            assert re.search(r"^swarmnode_signal_rate [0-9.]+$", metrics, re.MULTILINE)
            assert re.search(r'^swarmnode_level\{family="[a-z_0-9]+"\} -?[0-9]+\.0$', metrics, re.MULTILINE)
            assert re.search(r'^swarmnode_yardstick_score\{family=""\} [0-9.]+$', metrics, re.MULTILINE)
            assert re.search(r'^swarmnode_external_signal_share\{family="",window="total"\} (0.0|NaN)$', metrics,
                             re.MULTILINE)
            async with session.get("/v1/rounds?since=x") as resp:
                assert resp.status == 400
            async with session.get("/nope") as resp:
                assert resp.status == 404 and "error" in await resp.json()
            async with session.post("/v1/stop") as resp:
                assert resp.status == 401
            assert daemon.proc.poll() is None

            await api.pause()

            async def idle() -> dict | None:
                status = await api.status()
                return status if status["phase"] == "idle" else None

            status = await wait_until_async(idle, 60, "the round in flight to complete", procs=[daemon.proc])
            assert status["paused"]
            await asyncio.sleep(2.0)  # time for a round to start, which a paused node must not
            assert (await api.status())["round"] == status["round"], "a paused node started a round"
            await api.resume()

            async def next_round() -> bool:
                return (await api.status())["round"] != status["round"]

            await wait_until_async(next_round, 30, "a round after resume", procs=[daemon.proc])

            await api.stop()
            assert await asyncio.to_thread(daemon.proc.wait, 60) == 0
        assert not home.api_file.exists()
