"""Background priority: lowered on every thread by default, untouched with 'normal', and a
platform that refuses leaves the node running with one warning line."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import pytest

from programs import argv, output
from swarm_scale import cpu_s
from swarmnode.node import priority


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux keeps a nice value per thread")
def test_background_renices_every_thread_and_later_ones_inherit_it():
    result = json.loads(output("priority_threads").splitlines()[-1])
    assert result["what"].startswith("background (nice 19")
    assert len(result["tasks"]) >= 2 and set(result["tasks"]) == {19}
    assert result["later"] == 19


def test_normal_changes_nothing(monkeypatch):
    monkeypatch.setattr(os, "setpriority", lambda *a: pytest.fail("normal must not touch the priority"))
    assert priority.apply_priority("normal") == "normal"


@pytest.mark.parametrize("platform", ["linux", "darwin", "freebsd"])
def test_a_refusal_is_one_warning_and_the_node_goes_on(monkeypatch, caplog, platform):
    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(os, "setpriority", refuse)
    monkeypatch.setattr(os, "getpriority", lambda *a: 0)
    with caplog.at_level(logging.DEBUG, logger="swarmnode.node.priority"):
        what = priority.apply_priority("background")
    assert what.startswith("normal (background refused")
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "normal priority" in warnings[0].getMessage()
    assert all(r.exc_info is None for r in caplog.records)


def test_no_such_call_on_the_platform_is_a_refusal_too(monkeypatch, caplog):
    monkeypatch.setattr(sys, "platform", "freebsd")
    monkeypatch.delattr(os, "getpriority")
    assert priority.apply_priority("background").startswith("normal (background refused")
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1


def test_macos_uses_the_background_band(monkeypatch):
    calls = []
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(os, "setpriority", lambda *a: calls.append(a))
    assert priority.apply_priority("background") == "background (macOS background band)"
    assert calls == [(priority.PRIO_DARWIN_PROCESS, 0, priority.PRIO_DARWIN_BG)]


def test_describe_names_what_would_be_set(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    assert "nice 19" in priority.describe_priority("background")
    assert priority.describe_priority("normal").startswith("normal")


@pytest.mark.slow
@pytest.mark.skipif(not priority._autogroups_on(), reason="the kernel does not group sessions (autogroup is off "
                    "or absent), so nice alone orders every thread of the machine")
def test_a_node_leading_its_session_lowers_the_session_so_other_sessions_come_first():
    """Two busy loops on one CPU, each in a session of its own: the background one gets a small
    part of what the other gets (nice 19 on its threads alone would leave them even)."""
    cpu = min(os.sched_getaffinity(0))
    procs = [subprocess.Popen(argv("priority_session", cpu, p), stdout=subprocess.PIPE, text=True,
                              start_new_session=True) for p in ("background", "normal")]
    try:
        said = [json.loads(p.stdout.readline() if p.stdout else "") for p in procs]
        before = [cpu_s(p.pid) for p in procs]
        time.sleep(3)
        background, normal = (cpu_s(p.pid) - b for p, b in zip(procs, before))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    print(f"\nCPU seconds in 3 s on CPU {cpu}: background {background:.2f}, normal {normal:.2f}; {said}")
    assert said[0]["what"] == "background (nice 19, its session 19)" and said[0]["autogroup"].endswith("nice 19")
    assert said[1]["what"] == "normal" and said[1]["autogroup"].endswith("nice 0")
    assert background * 5 < normal, (background, normal)


def test_a_session_leader_lowers_its_autogroup_and_anything_else_leaves_it(tmp_path, monkeypatch, caplog):
    autogroup, enabled = tmp_path / "autogroup", tmp_path / "enabled"
    autogroup.write_text("/autogroup-7 nice 0\n")
    enabled.write_text("1\n")
    monkeypatch.setattr(os, "getsid", lambda pid: 4242)
    monkeypatch.setattr(os, "getpid", lambda: 1)
    with caplog.at_level(logging.INFO, logger="swarmnode.node.priority"):
        assert priority._lower_session(19, autogroup, enabled) == " within its session"
    assert autogroup.read_text() == "/autogroup-7 nice 0\n"
    assert "--tui" in caplog.text and "service install" in caplog.text
    monkeypatch.setattr(os, "getpid", lambda: 4242)
    assert priority._lower_session(19, autogroup, enabled) == ", its session 19"
    assert autogroup.read_text() == "19"
    enabled.write_text("0\n")
    assert priority._lower_session(19, autogroup, enabled) == ""
