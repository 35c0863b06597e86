"""The one multiaddr parser, and what its callers read from it."""

from __future__ import annotations

import pytest

from swarmnode.swarm.address import MultiaddrError, ip4_of, parse_multiaddr, peer_id_of

PEER = "12D3KooWHjcpeecN6FBgGGp3wsFGJHrgcuNa5hBpcbHAViLPpjEB"


@pytest.mark.parametrize("addr, host, port, peer", [
    ("/ip4/1.2.3.4/tcp/31337/p2p/12D3KooWabc", "1.2.3.4", 31337, "12D3KooWabc"),
    ("/ip6/::1/tcp/8000", "::1", 8000, None),
    ("/dns4/boot.example.org/tcp/443/p2p/Qm", "boot.example.org", 443, "Qm"),
    ("/ip4/1.2.3.4/udp/4001/quic-v1", "1.2.3.4", None, None),
    ("/dns/boot.example.org/tcp/443/wss/p2p/12D3KooWx", "boot.example.org", 443, "12D3KooWx"),
    ("  /ip4/0.0.0.0/tcp/0 ", "0.0.0.0", 0, None),
    (f"/dnsaddr/example.org/p2p/{PEER}", None, None, PEER),
    (f"/ip4/1.2.3.4/tcp/1/p2p/relay/p2p-circuit/p2p/{PEER}", "1.2.3.4", 1, PEER),
    (f"/ip4/1.2.3.4/tcp/1/ipfs/{PEER}", "1.2.3.4", 1, PEER),
])
def test_the_parts_a_node_reads(addr, host, port, peer):
    parsed = parse_multiaddr(addr)
    assert (parsed.host, parsed.tcp_port, parsed.peer_id) == (host, port, peer)
    assert peer_id_of(addr) == peer


@pytest.mark.parametrize("addr, words", [
    ("1.2.3.4:80", "not a multiaddr"),
    ("", "not a multiaddr"),
    ("/ip4/1.2.3.4/tcp/http", "not in 1-65535"),
    ("/ip4/1.2.3.4/tcp/70000", "not in 1-65535"),
    ("/ip4/1.2.3.4/udp/-1", "not in 1-65535"),
    ("/ip4/1.2.3.4/tcp", "/tcp needs a value"),
    ("/ip4/300.0.2.1/tcp/1", "not an IPv4 address"),
    ("/ip4//tcp/1", "/ip4 needs a value"),
    (f"/ip4/1.2.3.4/tcp/1/p2p/{PEER}/", "needs a value"),
])
def test_what_is_not_a_multiaddr_says_why(addr, words):
    with pytest.raises(MultiaddrError, match=words):
        parse_multiaddr(addr)
    assert peer_id_of(addr) is None and ip4_of(addr) is None


def test_ip4_of_reads_only_an_address_that_starts_with_ip4():
    assert ip4_of("/ip4/10.0.0.1/tcp/1") == "10.0.0.1"
    assert ip4_of(f"/dns4/example.org/tcp/1/p2p/{PEER}") is None
    assert ip4_of("/ip6/::1/tcp/1") is None
