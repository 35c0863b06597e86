"""Tests marked ``alone`` run with no other test beside them in a parallel run (pytest-xdist).

An xdist group only keeps its tests on one worker; the other workers go on beside it. A test
that measures deadlines on a process it floods (``tests/test_strangers.py`` against a training
node) then measures the neighbours' load as much as the flood: where the kernel groups the CPU
by session (autogroup), every busy session the other workers start gets the same share as the
target's. So the workers share a lock file: every test holds it shared, an ``alone`` test
holds it exclusively, and a gate lock taken before it lets an ``alone`` test that waits stop new
tests from starting, so that two workers taking turns with shared holds never keep it out.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def turn(alone: bool, shared: Path) -> Iterator[None]:
    """Hold this test's turn: exclusive for an ``alone`` test, shared for any other. ``shared``:
    a directory every worker of the run sees. Outside a parallel run nothing runs beside a test."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    with open(shared / "turn.gate", "a") as gate, open(shared / "turn.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
