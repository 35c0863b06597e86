"""Three `swarmnode start` processes on 127.0.0.1 form a swarm and train on each other's rollouts."""

import os
import signal
import subprocess

import pytest

from nodeproc import free_port, home_peer_id, metric_rows, start_argv, write_signal_tasks
from waiting import wait_until

pytestmark = pytest.mark.slow



def _node(home, model, tasks, transport, *extra):
    argv = start_argv(home, model, "--tasks", str(tasks), "--transport", transport, "--swarm", "e2e",
                      "--local", "2", "--external", "2", *extra)
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _stop(procs) -> list[int]:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=120))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    return codes


def _transport_lines(home) -> list[str]:
    """The node's last transport log lines: what a failed join leaves to go on."""
    lines = (home / "logs" / "swarmnode.log").read_text().splitlines()
    return [line for line in lines if "transport" in line][-5:]


def _swarming(home) -> bool:
    return any(r["n_external"] > 0 and r["peers"] >= 2 for r in metric_rows(home))


@pytest.mark.parametrize("transport", ["hivemind", "libp2p"])
def test_three_nodes_share_rollouts_through_a_bootstrap_node(tmp_path, tiny_model_dir, transport):
    tasks = write_signal_tasks(tmp_path / "tasks.toml")
    homes = [tmp_path / f"n{i}" for i in range(3)]
    port = free_port()
    bootstrap = f"/ip4/127.0.0.1/tcp/{port}/p2p/{home_peer_id(homes[0])}"
    (tmp_path / "none.txt").write_text("# this node is the bootstrap\n")
    procs = [_node(homes[0], tiny_model_dir, tasks, transport, "--listen", f"/ip4/127.0.0.1/tcp/{port}",
                   "--bootstrap-file", str(tmp_path / "none.txt"))]
    procs += [_node(h, tiny_model_dir, tasks, transport, "--listen", "/ip4/127.0.0.1/tcp/0",
                    "--bootstrap", bootstrap) for h in homes[1:]]
    try:
        wait_until(lambda: all(_swarming(h) for h in homes), 300, "every node to train on a peer's groups",
                   procs=procs, context=lambda: str({h.name: ([(r["round"], r["peers"], r["n_external"])
                                                               for r in metric_rows(h)][-3:], _transport_lines(h))
                                                     for h in homes}))
    finally:
        codes = _stop(procs)
    assert codes == [0, 0, 0]
    for h in homes:
        rows = metric_rows(h)
        assert [r["round"] for r in rows] == list(range(len(rows)))
        # what the swarm gave each round, as the node's status, dashboard and /metrics read it
        swarmed = [r for r in rows if r["n_external"]]
        assert all(sum(r["drawn_by_peer"].values()) == r["n_external"] == sum(r["trained_external_by_family"].values())
                   for r in swarmed)
        assert {p for r in swarmed for p in r["drawn_by_peer"]} <= {home_peer_id(o) for o in homes if o != h}
        assert any(r["peer_groups_by_family"] for r in rows)


def test_unreachable_bootstrap_trains_solo_then_joins(tmp_path, tiny_model_dir):
    tasks = write_signal_tasks(tmp_path / "tasks.toml")
    boot_home, home = tmp_path / "boot", tmp_path / "node"
    port = free_port()
    bootstrap = f"/ip4/127.0.0.1/tcp/{port}/p2p/{home_peer_id(boot_home)}"
    (tmp_path / "none.txt").write_text("")
    node = _node(home, tiny_model_dir, tasks, "hivemind", "--bootstrap", bootstrap)
    procs = [node]
    try:
        wait_until(lambda: len(metric_rows(home)) >= 3, 180, "the node to train alone", procs=procs)
        assert all(r["peers"] == 0 for r in metric_rows(home))
        assert node.poll() is None
        procs.append(_node(boot_home, tiny_model_dir, tasks, "hivemind", "--listen",
                           f"/ip4/127.0.0.1/tcp/{port}", "--bootstrap-file", str(tmp_path / "none.txt")))
        wait_until(lambda: any(r["peers"] >= 1 for r in metric_rows(home)), 240, "the node to see a peer", procs=procs,
                   context=lambda: str([(r["round"], r["peers"]) for r in metric_rows(home)][-3:]))
    finally:
        codes = _stop(procs)
    assert codes == [0, 0]
    log = (home / "logs" / "swarmnode.log").read_text()
    assert "Traceback" not in log


def test_ctrl_c_to_the_process_group_stops_a_hivemind_node(tmp_path, tiny_model_dir):
    """Ctrl-C in a terminal signals the whole group (p2pd and the DHT process too); the node
    must still exit 0 and not wait forever on a DHT process that ignored its shutdown."""
    tasks = write_signal_tasks(tmp_path / "tasks.toml")
    (tmp_path / "none.txt").write_text("")
    node = _node(tmp_path / "n", tiny_model_dir, tasks, "hivemind", "--bootstrap-file", str(tmp_path / "none.txt"))
    try:
        wait_until(lambda: len(metric_rows(tmp_path / "n")) >= 2, 180, "two rounds", procs=[node])
        os.killpg(node.pid, signal.SIGINT)  # _node starts each node in its own session
        assert node.wait(timeout=90) == 0
    finally:
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGKILL)
