"""`swarmnode doctor`: each check finds what it should, and the command's output and exit status."""

from __future__ import annotations

import argparse
import json
import os
import socket
from collections import namedtuple

import pytest

from swarmnode.catalogue import SMOLLM2
from swarmnode.cli import doctor as doctor_cli
from swarmnode.config import NodeConfig
from swarmnode.node import doctor, doctor_network, modelchoice
from swarmnode.node.checks import OK, PROBLEM, WARNING


@pytest.fixture
def listener():
    """A TCP socket listening on 127.0.0.1; yields its port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture
def dead_port():
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_count_parameters_matches_known_models():
    smollm2 = dict(hidden_size=576, num_hidden_layers=30, intermediate_size=1536, vocab_size=49152,
                   num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True)
    qwen05 = dict(hidden_size=896, num_hidden_layers=24, intermediate_size=4864, vocab_size=151936,
                  num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True)
    assert abs(doctor.count_parameters(smollm2) - SMOLLM2.parameters) < 0.001 * SMOLLM2.parameters
    assert 490e6 < doctor.count_parameters(qwen05) < 500e6
    untied = dict(qwen05, tie_word_embeddings=False)
    assert doctor.count_parameters(untied) - doctor.count_parameters(qwen05) == 151936 * 896


def test_embedded_model_needs_about_1_5_gb_in_fp32():
    assert 1.3e9 < doctor.estimate_memory(SMOLLM2.parameters, 4) < 1.7e9


PEER = "12D3KooWN1wh32fSgrQ9CkVzU6LAmGJEScWvrWXTqhZ5kr6Gv37G"


def test_bootstrap_all_dead_is_a_problem_with_a_fix(dead_port):
    cfg = NodeConfig(bootstrap=[f"/ip4/127.0.0.1/tcp/{dead_port}/p2p/{PEER}"])
    [check] = doctor_network.check_bootstrap(cfg, timeout=1.0)
    assert check.status == PROBLEM and "--bootstrap" in check.fix


def test_bootstrap_some_alive_makes_dead_ones_warnings(listener, dead_port):
    cfg = NodeConfig(bootstrap=[f"/ip4/127.0.0.1/tcp/{listener}/p2p/{PEER}",
                                f"/ip4/127.0.0.1/tcp/{dead_port}/p2p/{PEER}",
                                f"/ip4/127.0.0.1/udp/4001/quic-v1/p2p/{PEER}"])
    checks = doctor_network.check_bootstrap(cfg, timeout=1.0)
    assert [c.status for c in checks] == [OK, WARNING, WARNING]
    assert checks[0].check == f"bootstrap /ip4/127.0.0.1/tcp/{listener}/p2p/{PEER}"
    assert "TCP" in checks[2].detail


def test_bootstrap_entry_the_node_would_refuse_is_a_problem():
    [check] = doctor_network.check_bootstrap(NodeConfig(bootstrap=["not-a-multiaddr"]))
    assert check.status == PROBLEM and "bootstrap" in check.detail and check.fix


def test_bootstrap_file_with_comments(tmp_path, listener):
    path = tmp_path / "peers.txt"
    path.write_text(f"# demo peers\n\n/ip4/127.0.0.1/tcp/{listener}/p2p/{PEER}  # local\n", encoding="utf-8")
    cfg = NodeConfig(bootstrap_file=str(path))
    assert [c.status for c in doctor_network.check_bootstrap(cfg, timeout=1.0)] == [OK]


def test_missing_bootstrap_file_is_a_problem(tmp_path):
    [check] = doctor_network.check_bootstrap(NodeConfig(bootstrap_file=str(tmp_path / "nope.txt")))
    assert check.status == PROBLEM and "bootstrap_file" in check.fix


def test_solo_skips_the_network(dead_port):
    cfg = NodeConfig(solo=True, bootstrap=[f"/ip4/127.0.0.1/tcp/{dead_port}"], listen="/ip4/0.0.0.0/tcp/1")
    assert [c.status for c in doctor_network.check_bootstrap(cfg)] == [OK]
    assert doctor_network.check_listen(cfg).status == OK


def test_busy_ports_are_problems(listener):
    api = doctor_network.check_api_port(NodeConfig(api_port=listener))
    assert api.status == PROBLEM and "api_port = 0" in api.fix
    listen = doctor_network.check_listen(NodeConfig(listen=f"/ip4/127.0.0.1/tcp/{listener}"))
    assert listen.status == PROBLEM
    assert doctor_network.check_api_port(NodeConfig(api_port=0)).status == OK


def test_free_ports_are_ok(dead_port):
    assert doctor_network.check_api_port(NodeConfig(api_port=dead_port)).status == OK
    assert doctor_network.check_listen(NodeConfig(listen=f"/ip4/127.0.0.1/tcp/{dead_port}")).status == OK
    assert doctor_network.check_listen(NodeConfig(listen="/ip4/127.0.0.1/tcp")).status == PROBLEM
    no_host = doctor_network.check_listen(NodeConfig(listen=f"/tcp/{dead_port}"))
    assert no_host.status == PROBLEM and "names no host" in no_host.detail


def test_home(tmp_path):
    assert doctor.check_home(NodeConfig(home=str(tmp_path))).status == OK
    new = doctor.check_home(NodeConfig(home=str(tmp_path / "a" / "b")))
    assert new.status == OK and "created" in new.detail
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    bad = doctor.check_home(NodeConfig(home=str(blocker / "home")))
    assert bad.status == PROBLEM and "--home" in bad.fix


def test_model_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMNODE_CACHE", str(tmp_path / "cache"))
    fresh = doctor.check_model_cache(NodeConfig())
    assert fresh.status == WARNING and "first start" in fresh.fix
    (tmp_path / "m").mkdir()
    assert doctor.check_model_cache(NodeConfig(model=str(tmp_path / "m"))).status == PROBLEM
    (tmp_path / "m" / "config.json").write_text("{}", encoding="utf-8")
    assert doctor.check_model_cache(NodeConfig(model=str(tmp_path / "m"))).status == OK
    hub = doctor.check_model_cache(NodeConfig(model="nobody-here/not-a-cached-model"))
    assert hub.status == WARNING and "internet" in hub.fix


def test_missing_package_is_a_problem():
    [check] = doctor.check_packages(["swarmnode-no-such-package"])
    assert check.status == PROBLEM and "pip install swarmnode-no-such-package" in check.fix
    [torch] = doctor.check_packages(["torch"])
    assert torch.status == OK and torch.detail[0].isdigit()


def test_device_asked_for_but_absent(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    [check] = doctor.check_device_and_memory(NodeConfig(device="cuda"))
    assert check.status == PROBLEM and "auto" in check.fix


def test_memory_against_the_model(monkeypatch, tmp_path):
    import psutil
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"amx_bf16": False}, raising=False)
    monkeypatch.setenv("SWARMNODE_CACHE", str(tmp_path))
    Mem = namedtuple("Mem", "available total")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: Mem(available=int(0.5e9), total=int(8e9)))
    device, memory = doctor.check_device_and_memory(NodeConfig(device="cpu"))
    assert device.status == OK and device.detail.startswith("cpu")
    assert "weights in float32 (dtype auto: this CPU has no AMX bf16 matrix unit)" in device.detail
    assert memory.status == PROBLEM and "1.5 GB" in memory.detail
    device, memory = doctor.check_device_and_memory(NodeConfig(device="cpu", dtype="bfloat16"))
    assert "0.8 GB" in memory.detail  # the weights in half the bytes
    assert "weights in bfloat16 (dtype setting)" in device.detail
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"amx_bf16": True}, raising=False)
    device, memory = doctor.check_device_and_memory(NodeConfig(device="cpu"))
    assert "weights in bfloat16 (dtype auto: this CPU multiplies bf16 in hardware (AMX)" in device.detail
    assert "0.8 GB" in memory.detail
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"amx_bf16": False}, raising=False)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: Mem(available=int(64e9), total=int(64e9)))
    _, memory = doctor.check_device_and_memory(NodeConfig(device="cpu"))
    assert memory.status == OK
    model = tmp_path / "big"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(dict(
        hidden_size=4096, num_hidden_layers=32, intermediate_size=14336, vocab_size=128256,
        num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False)), encoding="utf-8")
    _, memory = doctor.check_device_and_memory(NodeConfig(device="cpu", model=str(model)))
    assert memory.status == PROBLEM and "8030M" in memory.detail
    _, unknown = doctor.check_device_and_memory(NodeConfig(device="cpu", model="nobody-here/not-cached"))
    assert unknown.status == WARNING


def _cli(argv):
    parser = argparse.ArgumentParser(prog="swarmnode")
    doctor_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in [n for n in os.environ if n.startswith("SWARMNODE_")]:
        monkeypatch.delenv(name)


def test_cli_json_and_exit_status(tmp_path, listener, clean_env, capsys):
    assert _cli(["doctor", "--json", "--home", str(tmp_path), "--solo"]) == 0
    checks = json.loads(capsys.readouterr().out)
    assert {"python", "device", "memory", "threads", "priority", "model", "model cache", "home", "api port", "listen",
            "bootstrap"} <= {c["check"] for c in checks}
    assert all(set(c) == {"check", "status", "detail", "fix"} for c in checks)
    assert all(c["fix"] for c in checks if c["status"] == PROBLEM)

    assert _cli(["doctor", "--home", str(tmp_path), "--solo", "--api-port", str(listener)]) == 1
    out = capsys.readouterr().out
    problem_lines = [line for line in out.splitlines() if line.startswith("problem")]
    assert len(problem_lines) == 1 and "api port" in problem_lines[0]
    assert "fix: stop the program using it" in out
    assert "1 problem(s)" in out


def test_cuda_memory_is_the_gpu_free_memory_in_bf16(monkeypatch, tmp_path):
    import torch

    monkeypatch.setenv("SWARMNODE_CACHE", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Test GPU 80GB")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (int(0.5e9), int(80e9)))
    device, memory = doctor.check_device_and_memory(NodeConfig(device="auto"))
    assert device.status == OK and "Test GPU" in device.detail
    # auto picks the Qwen model on an 80 GB GPU; bf16 halves its need to about 2.8 GB, more than the 0.5 GB free
    assert memory.status == PROBLEM and "qwen2.5-coder-0.5b (494M parameters) needs about 2.8 GB" in memory.detail
    assert "free GPU memory" in memory.detail
    _, memory = doctor.check_device_and_memory(NodeConfig(device="auto", model="embedded"))
    assert memory.status == PROBLEM and "smollm2-135m" in memory.detail and "0.8 GB" in memory.detail


def test_model_check_says_what_auto_picks_and_why(monkeypatch):
    import psutil

    Mem = namedtuple("Mem", "available total")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: Mem(available=int(20e9), total=24 << 30))
    monkeypatch.setattr(modelchoice, "physical_cores", lambda: 2)
    check = doctor.check_model(NodeConfig(device="cpu"))
    assert check.status == OK and check.detail.startswith("auto picks smollm2-135m: no GPU, 2 cores and 24 GiB")
    named = doctor.check_model(NodeConfig(model="qwen2.5-coder-0.5b"))
    assert named.status == OK and "Alibaba Cloud / Qwen team" in named.detail


def test_threads_pinned_by_config():
    check = doctor.check_threads(NodeConfig(threads=3), window_s=0)
    assert check.status == OK and check.detail.startswith("3, pinned by threads = 3")


@pytest.fixture
def fake_cpu(monkeypatch):
    """CPU readings as the test sets them: ``others`` cores busy with programs other than doctor;
    ``time.sleep`` advances the fake clock (and really sleeps, so real processes get measured)."""
    import time

    from swarmnode.node import threads

    fake = {"t": 0.0, "others": 0.0}
    real_sleep = time.sleep

    def sleep(s: float) -> None:
        fake["t"] += s
        real_sleep(s)

    monkeypatch.setattr(threads.time, "monotonic", lambda: fake["t"])
    monkeypatch.setattr(threads, "_machine_busy_s", lambda: fake["t"] * fake["others"])
    monkeypatch.setattr(threads, "_own_cpu_s", lambda: 0.0)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads, "physical_cores", lambda: 2)
    monkeypatch.setattr(time, "sleep", sleep)
    return fake


@pytest.mark.slow
def test_threads_auto_reports_the_count_and_what_is_busy(fake_cpu):
    """A real program spinning beside doctor is named among the busiest; the count comes from the
    CPU readings (faked, so that the shared test machine's own load does not decide it)."""
    import subprocess
    import sys

    fake_cpu["others"] = 1.0
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        check = doctor.check_threads(NodeConfig(), window_s=1.0)
    finally:
        spinner.kill()
        spinner.wait()
    assert check.status == OK
    assert check.detail.startswith("auto: would start with 1 of 2 cores; other programs use 1.00 cores now")
    assert "busiest: " in check.detail and "python" in check.detail.split("busiest: ")[1]


def test_threads_warns_when_the_machine_is_full(fake_cpu):
    fake_cpu["others"] = 2.0
    check = doctor.check_threads(NodeConfig(), window_s=0.6)
    assert check.status == WARNING and "with 1 of 2 cores" in check.detail and check.fix


def test_priority_check():
    assert doctor.check_priority(NodeConfig()).status == OK
    normal = doctor.check_priority(NodeConfig(priority="normal"))
    assert normal.status == WARNING and "background" in normal.fix


@pytest.mark.parametrize("cfg, words", [(NodeConfig(lan=False), "lan = false"), (NodeConfig(solo=True), "solo")])
def test_lan_check_is_quiet_when_discovery_is_off(cfg, words):
    check = doctor_network.check_lan(cfg, seconds=0)
    assert (check.status, check.detail) == (OK, f"not used: {words}")


@pytest.mark.parametrize("lan, words", [(True, "nodes on the local network"), (False, "peers that dial it")])
def test_without_bootstrap_peers_the_warning_says_who_can_still_find_the_node(tmp_path, lan, words):
    empty = tmp_path / "none.txt"
    empty.write_text("# no one\n")
    (check,) = doctor_network.check_bootstrap(NodeConfig(lan=lan, bootstrap_file=str(empty)))
    assert check.status == WARNING and words in check.detail and "--join" in check.fix
