"""The turn an ``alone`` test waits for (tests/alone.py): flock conflicts between separate opens
of a file, so threads stand for the workers here."""

from __future__ import annotations

import fcntl
import threading
import time
from pathlib import Path

import pytest

from alone import turn
from waiting import wait_until


@pytest.fixture
def parallel_run(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    return tmp_path


def _hold(alone: bool, entered: list[str], name: str, release: threading.Event, shared: Path) -> threading.Thread:
    def run() -> None:
        with turn(alone, shared):
            entered.append(name)
            release.wait(10)
            entered.append(f"{name} out")
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _gate_held(shared: Path) -> bool:
    with open(shared / "turn.gate") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def test_an_alone_test_waits_for_the_running_ones_and_keeps_new_ones_out(parallel_run):
    entered: list[str] = []
    first, flood, late = threading.Event(), threading.Event(), threading.Event()
    a = _hold(False, entered, "shared", first, parallel_run)
    wait_until(lambda: entered == ["shared"], 10, "the first test's turn")
    b = _hold(True, entered, "alone", flood, parallel_run)
    wait_until(lambda: _gate_held(parallel_run), 10, "the alone test to wait at the gate")
    c = _hold(False, entered, "later", late, parallel_run)
    time.sleep(0.5)
    assert entered == ["shared"]  # the alone test waits, and the later one waits behind it
    first.set()
    wait_until(lambda: "alone" in entered, 10, "the alone test's turn")
    time.sleep(0.5)
    assert entered == ["shared", "shared out", "alone"]
    flood.set()
    late.set()
    for t in (a, b, c):
        t.join(5)
    assert entered == ["shared", "shared out", "alone", "alone out", "later", "later out"]


@pytest.mark.parametrize("alone, parallel", [(False, True), (True, False)], ids=["shared", "outside-a-parallel-run"])
def test_turns_that_need_not_wait_run_together(alone, parallel, monkeypatch, tmp_path):
    if parallel:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    else:
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    entered: list[str] = []
    release = threading.Event()
    threads = [_hold(alone, entered, name, release, tmp_path) for name in ("one", "two")]
    wait_until(lambda: len(entered) == 2, 10, "both turns at once")
    release.set()
    for t in threads:
        t.join(5)
