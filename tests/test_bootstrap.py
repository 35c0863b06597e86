"""Which peers a node dials: flags, the bootstrap file, the shipped list."""

from __future__ import annotations

import pytest

from swarmnode.config import ConfigError, NodeConfig, load_config
from swarmnode.swarm.bootstrap import multiaddr_problem, packaged_bootstrap, parse_bootstrap_text, resolve_bootstrap

PEER = "12D3KooWHjcpeecN6FBgGGp3wsFGJHrgcuNa5hBpcbHAViLPpjEB"
A = f"/ip4/192.0.2.1/tcp/31337/p2p/{PEER}"
B = f"/dns4/boot.example.org/tcp/4001/p2p/{PEER}"


@pytest.mark.parametrize("addr", [A, B, f"/ip6/::1/tcp/1/p2p/{PEER}", f"/dnsaddr/example.org/p2p/{PEER}",
                                  f"/ip4/10.0.0.1/udp/9/quic-v1/p2p/{PEER}"])
def test_good_multiaddrs(addr):
    assert multiaddr_problem(addr) is None


@pytest.mark.parametrize("addr, words", [
    ("192.0.2.1:31337", "not a multiaddr"),
    (f"/ip4/192.0.2.1/tcp/31337/p2p/{PEER}x0", "/p2p/<PeerID>"),       # '0' is not base58
    ("/ip4/192.0.2.1/tcp/31337", "/p2p/<PeerID>"),
    (f"/ip4/300.0.2.1/tcp/31337/p2p/{PEER}", "not an IPv4 address"),
    (f"/ip4/192.0.2.1/tcp/70000/p2p/{PEER}", "not in 1-65535"),
    (f"/unix/tmp/p2p/{PEER}", "expected one of"),
    (f"/ip4/192.0.2.1/p2p/{PEER}", "/tcp/<port>"),
])
def test_bad_multiaddrs(addr, words):
    assert words in (multiaddr_problem(addr) or "")


def test_file_text_comments_blanks_and_errors():
    text = f"# header\n\n{A}   # the first\n  {B}\n#{A}\n"
    assert parse_bootstrap_text(text, "peers.txt") == [A, B]
    with pytest.raises(ConfigError, match=r"peers.txt:2: .*not a multiaddr"):
        parse_bootstrap_text(f"{A}\nnonsense\n", "peers.txt")


def test_shipped_list_parses_and_is_documented():
    from importlib import resources

    text = (resources.files("swarmnode.data") / "bootstrap.txt").read_text(encoding="utf-8")
    assert "--bootstrap-file" in text and "--bootstrap " in text  # it says how to change it
    assert packaged_bootstrap() == parse_bootstrap_text(text, "shipped")


def test_resolution_order(tmp_path):
    peers = tmp_path / "peers.txt"
    peers.write_text(f"{B}\n{A}\n")
    assert resolve_bootstrap(NodeConfig()) == packaged_bootstrap()
    assert resolve_bootstrap(NodeConfig(bootstrap=[A])) == [A]
    assert resolve_bootstrap(NodeConfig(bootstrap_file=str(peers))) == [B, A]
    assert resolve_bootstrap(NodeConfig(bootstrap=[A], bootstrap_file=str(peers))) == [A, B]  # both, deduplicated


def test_flags_and_config_reach_the_resolver(tmp_path):
    cfg_file = tmp_path / "config.toml"
    cfg_file.write_text(f'[swarm]\nbootstrap = ["{B}"]\n')
    loaded = load_config({"bootstrap": f"{A}"}, config_path=cfg_file, environ={})
    assert resolve_bootstrap(loaded.config) == [A]
    assert resolve_bootstrap(load_config(config_path=cfg_file, environ={}).config) == [B]


def test_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match="config key 'bootstrap'.*/p2p/<PeerID>"):
        resolve_bootstrap(NodeConfig(bootstrap=["/ip4/1.2.3.4/tcp/5"]))
    with pytest.raises(ConfigError, match="config key 'bootstrap_file'.*cannot read"):
        resolve_bootstrap(NodeConfig(bootstrap_file=str(tmp_path / "missing.txt")))
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not UTF-8"):
        resolve_bootstrap(NodeConfig(bootstrap_file=str(binary)))
