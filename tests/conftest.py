"""Fixtures every test may use, and the rule that keeps the quick run quick.

``pytest -m "not slow"`` is the quick run. A test that starts a process (a node, a relay, a
DHT and its p2pd, a py-libp2p host, which runs in a process of its own, a helper program) is
marked ``slow``. An unmarked test that tries is stopped there, with an error that says so: an
audit hook refuses new processes while an unmarked test runs. The tiny random model of
``tinymodel.py`` (a few hundred kB, built in memory) is a unit-test fake and may run anywhere;
the real models load only in node processes.
"""

import math
import multiprocessing.process
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# the simulator (benchmarks/swarmsim) and the benchmark scripts the tests import by name
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from alone import turn
from tinymodel import build_tiny_model

# The nodes the tests start talk over 127.0.0.1 and the namespaces a test makes; mDNS would
# reach this machine's own network, and any other test's nodes there. tests/test_lan.py turns
# discovery on inside its namespaces.
os.environ.setdefault("SWARMNODE_LAN", "false")
# Nodes that tests start in sessions of their own stand for other machines: at background
# priority each would lower its session (node/priority.py) and, where the kernel groups the CPU
# by session, get almost nothing beside the test workers. tests/test_priority.py checks that.
os.environ.setdefault("SWARMNODE_PRIORITY", "normal")

_PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.posix_spawnp",
                             "os.spawn", "os.system", "os.exec"})
_quick_test: str | None = None  # the node id of the unmarked test running now


def _refuse_a_process(what: str) -> None:
    if _quick_test is not None and not _a_library_lookup():
        raise RuntimeError(f"{_quick_test} starts a process ({what}) but is not marked slow: "
                           "mark it @pytest.mark.slow (see tests/conftest.py)")


def _a_library_lookup() -> bool:
    """ctypes.util.find_library runs ldconfig (memtrim looks glibc up once a process): not a
    process the test starts."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_globals.get("__name__") == "ctypes.util":
            return True
        frame = frame.f_back
    return False


def _audit(event: str, args: tuple) -> None:
    if event in _PROCESS_EVENTS:
        _refuse_a_process(event)


sys.addaudithook(_audit)
_start = multiprocessing.process.BaseProcess.start


def _checked_start(self: multiprocessing.process.BaseProcess) -> None:
    _refuse_a_process("multiprocessing")  # the spawn and forkserver methods raise no audit event of their own
    _start(self)


multiprocessing.process.BaseProcess.start = _checked_start


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a parallel run (pytest-xdist; each worker collects and must reach the same order), the
    tests that start processes go first: they are the long ones, and one begun last would keep a
    single worker busy after the others ran out of tests."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n logical`` (the README's test command) starts one and a half workers a logical CPU:
    the slow tests mostly wait on the processes and sockets they start, so one worker a CPU left
    a third of the CPUs idle (a run on 2 CPUs used 1.3 of them on average)."""
    return math.ceil(1.5 * (os.cpu_count() or 1))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    global _quick_test
    _quick_test = None if item.get_closest_marker("slow") else item.nodeid
    try:
        return (yield)
    finally:
        _quick_test = None


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama with a chat template, saved as a local model directory."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(autouse=True)
def _turn(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A test marked ``alone`` runs with no other beside it (tests/alone.py); the workers of a
    parallel run share the parent of their temporary directories."""
    with turn(request.node.get_closest_marker("alone") is not None, tmp_path_factory.getbasetemp().parent):
        yield
