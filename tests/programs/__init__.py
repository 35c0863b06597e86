"""Test programs that run in a process of their own, one file each, so linters read them like
any code: a check that must not share the test's process (hivemind and py-libp2p cannot share
one; a process-wide setting such as a nice value or glibc's mmap threshold), a child to
measure or to kill, a peer inside a network namespace. ``swarmnode`` is installed (editable)
beside them, so they import it as a user would; :func:`output` also puts ``tests/`` on their
path, for the tests' shared modules (``transport_node``, ``tinymodel``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROGRAMS = Path(__file__).resolve().parent


def argv(name: str, *args: object) -> list[str]:
    """The command line of program ``name`` (``<name>.py`` here) with ``args``."""
    return [sys.executable, str(PROGRAMS / f"{name}.py"), *map(str, args)]


def output(name: str, *args: object, timeout: float = 120) -> str:
    """Run program ``name`` to its end and return its stdout, stripped; AssertionError with
    the tail of its stderr when it exits with an error."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(PROGRAMS.parent),
                                                                      os.environ.get("PYTHONPATH"))))}
    proc = subprocess.run(argv(name, *args), capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()
