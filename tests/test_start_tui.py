"""``swarmnode start --tui``: the node it starts in the background never outlives its dashboard."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import psutil
import pytest

from nodeproc import start_argv, stop_all
from swarmnode.paths import NodeHome
from waiting import wait_until


def _drain(fd: int) -> None:
    """Read the dashboard's screen until the terminal goes, so that its writes never block."""
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM], ids=["terminal-closed", "killed"])
def test_the_node_stops_when_its_dashboard_is_ended_by_a_signal(tmp_path, tiny_model_dir, signum):
    """The dashboard on a terminal of its own; its node (its own session) is found as its child.
    A dashboard ended by SIGHUP or SIGTERM runs no cleanup of its own: the node must stop all the same."""
    home = NodeHome(tmp_path / "home")
    primary, secondary = os.openpty()
    argv = start_argv(home.root, tiny_model_dir, "--solo", "--tui")
    dashboard = subprocess.Popen(argv, stdin=secondary, stdout=secondary, stderr=secondary, start_new_session=True)
    os.close(secondary)
    threading.Thread(target=_drain, args=(primary,), daemon=True).start()
    node = None
    try:
        wait_until(home.api_file.exists, 120, "the node's api.json", procs=[dashboard])
        (node,) = [p for p in psutil.Process(dashboard.pid).children() if "start" in p.cmdline()]
        os.kill(dashboard.pid, signum)
        assert dashboard.wait(30) == -signum  # ended by the signal, as it would have been
        try:
            node.wait(60)
        except psutil.TimeoutExpired:
            pytest.fail(f"the node (pid {node.pid}) still runs 60 s after its dashboard was ended by {signum.name}")
    finally:
        if node is not None and node.is_running():
            node.kill()
        stop_all(dashboard)
        os.close(primary)
