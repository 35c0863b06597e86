"""Background priority: lowered on every thread by default, untouched with 'normal', and a
platform that refuses leaves the node running with one warning line."""

from __future__ import annotations

import json
import logging
import os
import sys

import pytest

from programs import output
from swarmnode.node import priority


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux keeps a nice value per thread")
def test_background_renices_every_thread_and_later_ones_inherit_it():
    result = json.loads(output("priority_threads").splitlines()[-1])
    assert result["what"] == "background (nice 19)"
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
