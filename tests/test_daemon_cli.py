from swarmnode.cli import build_parser
from swarmnode.cli.flags import given_flags
from swarmnode.cli.start import _child_argv


def test_start_tui_child_gets_the_same_flags():
    argv = ["start", "--tui", "--solo", "--home", "/tmp/x", "--bootstrap", "/ip4/1.2.3.4/tcp/1/p2p/Qm",
            "--bootstrap", "/ip4/1.2.3.5/tcp/1/p2p/Qm", "--questions", "3", "--no-prefill-answer-tag",
            "--config", "/tmp/c.toml"]
    parser = build_parser()
    args = parser.parse_args(argv)
    child = _child_argv(args)
    assert child[1:4] == ["-m", "swarmnode", "start"] and "--tui" not in child
    again = parser.parse_args(child[3:])
    assert given_flags(again) == given_flags(args)
    assert again.config == "/tmp/c.toml" and not again.tui


def test_a_slow_stop_leaves_every_threads_stack_in_the_log(tmp_path):
    import faulthandler
    import threading
    import time

    from swarmnode.node.logs import log_file, report_a_slow_stop
    from swarmnode.paths import NodeHome

    home = NodeHome(tmp_path / "home")
    stuck = threading.Event()
    worker = threading.Thread(target=stuck.wait, name="stuck-worker")
    worker.start()
    try:
        report_a_slow_stop(home, after_s=0.2)
        time.sleep(1.0)
    finally:
        faulthandler.cancel_dump_traceback_later()
        stuck.set()
        worker.join()
    text = log_file(home).read_text()
    assert "most recent call first" in text
    assert "test_a_slow_stop_leaves_every_threads_stack_in_the_log" in text  # this thread's stack
    assert "in wait" in text  # and the stuck worker's


def test_the_daemon_marks_peers_found_on_the_lan_and_gives_its_join_addresses(tmp_path):
    """What `swarmnode peers` (via) and `swarmnode invite` (join_addresses) read of a running node."""
    from types import SimpleNamespace

    from swarmnode.config import NodeConfig
    from swarmnode.node.daemon import Daemon
    from swarmnode.paths import NodeHome

    relay = "/ip4/203.0.113.7/tcp/4001/p2p/12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq"
    daemon = Daemon(NodeConfig(), NodeHome(tmp_path / "home"))
    try:
        assert daemon.peer_rows() == [] and daemon.join_addresses() == []  # before the swarm is joined
        daemon.node = SimpleNamespace(swarm=SimpleNamespace(peer_rows=lambda: [{"peer_id": "A"}, {"peer_id": "B"}]))
        daemon.link = SimpleNamespace(transport=SimpleNamespace(lan_peers=lambda: {"A"}, addresses=lambda: [],
                                                                bootstrap=[relay]))
        assert [r["via"] for r in daemon.peer_rows()] == ["lan", None]
        assert daemon.join_addresses() == [relay]  # behind NAT: no address of its own, its relay's
    finally:
        daemon.model.close()
