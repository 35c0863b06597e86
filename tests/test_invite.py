"""Invite codes: the codec, applying one to the config, and the two commands that use them."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
import threading
import zlib

import pytest

from apifakes import FakeControl, make_state
from swarmnode.cli import main
from swarmnode.config import ConfigError, load_config
from swarmnode.node.api import ApiServer
from swarmnode.paths import NodeHome
from swarmnode.swarm.identity import Identity
from swarmnode.swarm.invite import (
    Invite,
    InviteError,
    apply_invite,
    decode_invite,
    encode_invite,
    invite_addresses,
)
from swarmnode.swarm.sealing import new_swarm_key, parse_swarm_key

PID = Identity.from_seed(hashlib.sha256(b"invite").digest()).peer_id
ADDRS = (f"/ip4/192.168.1.20/tcp/4101/p2p/{PID}", f"/ip4/127.0.0.1/tcp/4101/p2p/{PID}")
INVITE = Invite("home-lab", "libp2p", ADDRS)


def forged(body: object, version: int = 1) -> str:
    """A code with a valid length and checksum around ``body``."""
    packed = zlib.compress(json.dumps(body).encode())
    raw = len(packed).to_bytes(2, "big") + packed + hashlib.sha256(packed).digest()[:4]
    return f"sn{version}." + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_round_trip_on_one_line():
    code = encode_invite(INVITE)
    assert "\n" not in code and " " not in code and code.startswith("sn1.")
    assert decode_invite(f"  {code}\n") == INVITE


def test_every_truncation_is_refused_as_cut_short():
    code = encode_invite(INVITE)
    for n in range(len("sn1.") + 1, len(code)):
        with pytest.raises(InviteError, match="cut short|mistyped"):
            decode_invite(code[:n])
    with pytest.raises(InviteError, match="cut short"):
        decode_invite(code[:len(code) // 2])


def test_every_mistyped_character_is_caught():
    code = encode_invite(INVITE)
    head = len("sn1.")
    for i in range(head, len(code)):
        swapped = "A" if code[i] != "A" else "B"
        with pytest.raises(InviteError):
            decode_invite(code[:i] + swapped + code[i + 1:])


@pytest.mark.parametrize("code, words", [
    (lambda c: "sn2." + c[4:], "version 2"),
    (lambda c: "hello", "not a swarmnode invite"),
    (lambda c: c.replace("sn1.", "sn1!"), "not a swarmnode invite"),
    (lambda c: c[:10] + "*" + c[11:], "mistyped"),
    (lambda c: forged({"s": "x", "t": "pigeon", "a": list(ADDRS)}), "transport 'pigeon'"),
    (lambda c: forged({"s": "x", "t": "libp2p", "a": ["/ip4/1.2.3.4/tcp/1"]}), "bad address"),
    (lambda c: forged({"s": "x", "t": "libp2p", "a": []}), "no address"),
    (lambda c: forged([1, 2]), "not an invite"),
])
def test_bad_codes_name_the_problem(code, words):
    with pytest.raises(InviteError, match=words):
        decode_invite(code(encode_invite(INVITE)))


def test_a_compression_bomb_is_bounded():
    packed = zlib.compress(json.dumps({"s": "x" * 100_000, "t": "libp2p", "a": list(ADDRS)}).encode(), 9)
    raw = len(packed).to_bytes(2, "big") + packed + hashlib.sha256(packed).digest()[:4]
    with pytest.raises(InviteError, match="over"):
        decode_invite("sn1." + base64.urlsafe_b64encode(raw).decode())


def test_invite_addresses_prefer_the_node_then_its_relays():
    assert invite_addresses(list(reversed(ADDRS)), []) == list(ADDRS)  # loopback last
    relay = f"/ip4/203.0.113.7/tcp/4001/p2p/{PID}"
    assert invite_addresses([], [relay]) == [relay]  # behind NAT: its relays


def test_join_sets_swarm_transport_and_bootstrap():
    cfg = apply_invite(load_config({"join": encode_invite(INVITE), "bootstrap": ADDRS[0]}, environ={},
                                   config_path=None))
    assert (cfg.swarm, cfg.transport, cfg.bootstrap) == ("home-lab", "libp2p", list(ADDRS))


def test_an_invite_carries_the_swarm_key_and_one_without_still_parses():
    key = new_swarm_key()
    private = dataclasses.replace(INVITE, swarm_key=key)
    assert decode_invite(encode_invite(private)) == private
    # An invite of the release before keys (no "k") is a public swarm's.
    old = forged({"s": "home-lab", "t": "libp2p", "a": list(ADDRS)})
    assert decode_invite(old) == INVITE and decode_invite(old).swarm_key is None
    bad = forged({"s": "home-lab", "t": "libp2p", "a": list(ADDRS), "k": key[:-3] + "AAA"})
    with pytest.raises(InviteError, match="swarm key"):
        decode_invite(bad)
    cfg = apply_invite(load_config({"join": encode_invite(private)}, environ={}))
    assert cfg.swarm_key == key
    with pytest.raises(ConfigError, match="swarm_key.*another swarm key"):
        apply_invite(load_config({"join": encode_invite(private), "swarm_key": new_swarm_key()}, environ={}))


@pytest.mark.parametrize("key, problem", [("hello", "not a swarm key"), ("snk2.AAAA", "version 2"),
                                          ("snk1.AAAA", "bytes"), ("snk1.!!", "characters")])
def test_a_malformed_swarm_key_names_the_key_and_exits_2(capsys, monkeypatch, tmp_path, key, problem):
    with pytest.raises(ConfigError, match=f"swarm_key.*{problem}"):
        apply_invite(load_config({"swarm_key": key}, environ={}))
    good = new_swarm_key()
    typo = good[:10] + ("A" if good[10] != "A" else "B") + good[11:]
    assert main(["start", "--home", str(tmp_path / "h"), "--swarm-key", typo]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "swarm_key" in err and "checksum" in err and typo not in err
    monkeypatch.setenv("SWARMNODE_SWARM_KEY", key)
    assert main(["start", "--home", str(tmp_path / "h")]) == 2
    assert "SWARMNODE_SWARM_KEY" in capsys.readouterr().err


def test_swarm_key_command_prints_a_new_key(capsys):
    assert main(["swarm-key"]) == 0
    first = capsys.readouterr()
    assert main(["swarm-key"]) == 0
    second = capsys.readouterr().out.strip()
    assert len(parse_swarm_key(first.out.strip())) == 32 and first.out.strip() != second
    assert "swarm_key" in first.err


def test_join_that_contradicts_the_config_is_an_error():
    with pytest.raises(ConfigError, match="swarm.*invite"):
        apply_invite(load_config({"join": encode_invite(INVITE), "swarm": "other"}, environ={}))


def test_start_with_a_bad_invite_exits_2_with_one_line(capsys, tmp_path):
    code = encode_invite(INVITE)
    assert main(["start", "--home", str(tmp_path / "h"), "--join", code[:-6]]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "join" in err and "cut short" in err


@pytest.mark.parametrize("transport, keyed", [("libp2p", False), ("solo", False), ("libp2p", True)])
def test_invite_command_prints_the_running_nodes_code(capsys, tmp_path, transport, keyed):
    # A key made at collection would name the test differently in each pytest-xdist worker.
    key = new_swarm_key() if keyed else None
    home = NodeHome(tmp_path / "home").create()
    state = make_state()
    state.info = dataclasses.replace(state.info, transport=transport)
    control = FakeControl(state=state)
    control.key = key
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = ApiServer(state, control, home=home)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    try:
        status = main(["invite", "--home", str(home.root)])
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    out = capsys.readouterr()
    if transport == "solo":
        assert status == 1 and "solo" in out.err and not out.out
        return
    assert status == 0
    invite = decode_invite(out.out)
    assert (invite.swarm, invite.transport) == (state.info.swarm, "libp2p")
    assert list(invite.addresses) == control.join_addresses()
    assert invite.swarm_key == key
    assert ("whoever gets the line can join" in out.err) == (key is not None)
