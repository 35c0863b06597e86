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
