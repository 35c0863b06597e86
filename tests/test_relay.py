"""``swarmnode relay`` and reachability: the pieces that need no network namespace.

The relay's part in a real swarm behind NAT is tests/test_nat.py; its memory footprint is
benchmarks/relay_memory.py.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from apifakes import metric_values
from swarmnode.node.api import MetricsApi
from swarmnode.node.prometheus import relay_families
from swarmnode.node.relay import Relay, bootstrap_lines
from swarmnode.paths import NodeHome
from swarmnode.swarm.reachability import is_private, is_public_ip
from swarmnode.swarm.transport.counters import RoomGauges, TransportCounters
from transport_node import descendants

ROOT = Path(__file__).resolve().parent.parent
PUBLIC_BOOT = "/ip4/203.0.114.9/tcp/31337/p2p/12D3KooWLBtzFmdRUNibQ7q1qhSEEPdVL5u8b7MxuKtgxW7vTwgy"
LAN_BOOT = "/ip4/192.168.1.10/tcp/31337/p2p/12D3KooWLBtzFmdRUNibQ7q1qhSEEPdVL5u8b7MxuKtgxW7vTwgy"


def auto(**kw) -> bool:
    args = {"announce": None, "bootstrap": [PUBLIC_BOOT], "listen": None, "local_addresses": ["192.168.1.2"]}
    args.update(kw)
    return is_private("auto", **args)


def test_auto_reachability_is_private_only_for_a_nat_desktop_joining_an_internet_swarm():
    assert auto() is True                                           # home LAN address, public bootstrap
    assert auto(local_addresses=["100.64.3.2"]) is True             # carrier-grade NAT
    assert auto(local_addresses=["192.168.1.2", "8.8.4.4"]) is False  # has a public address of its own
    assert auto(announce="/ip4/8.8.4.4/tcp/4001") is False          # port forwarded and announced
    assert auto(bootstrap=[LAN_BOOT]) is False                      # a LAN swarm: everyone is reachable
    assert auto(bootstrap=[]) is False                              # the first node: others join through it
    assert auto(local_addresses=["127.0.0.1"]) is False             # nothing but loopback: one machine
    assert auto(listen="/ip4/8.8.4.4/tcp/4001") is False            # listens on a public address
    assert is_private("private", announce=None, bootstrap=[], listen=None) is True
    assert is_private("public", announce=None, bootstrap=[PUBLIC_BOOT], listen=None,
                      local_addresses=["10.0.0.2"]) is False
    with pytest.raises(ValueError, match="reachability"):
        is_private("sometimes", announce=None, bootstrap=[], listen=None)
    assert not is_public_ip("not an address") and not is_public_ip("10.1.2.3") and is_public_ip("8.8.4.4")


def test_bootstrap_lines_paste_into_a_config_file_and_a_command_line():
    text = bootstrap_lines(["/ip4/1.2.3.4/tcp/1/p2p/A", "/ip4/5.6.7.8/tcp/1/p2p/A"])
    assert text.splitlines() == ['bootstrap = ["/ip4/1.2.3.4/tcp/1/p2p/A", "/ip4/5.6.7.8/tcp/1/p2p/A"]',
                                 "  --bootstrap /ip4/1.2.3.4/tcp/1/p2p/A", "  --bootstrap /ip4/5.6.7.8/tcp/1/p2p/A"]


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["hivemind", "libp2p"])
def test_relay_prints_its_address_loads_no_torch_and_stops_on_sigint(tmp_path, transport):
    proc = subprocess.Popen([sys.executable, "-m", "swarmnode", "relay", "--transport", transport, "--home",
                             str(tmp_path), "--listen", "/ip4/127.0.0.1/tcp/0"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
        assert re.fullmatch(r'bootstrap = \["/ip4/127\.0\.0\.1/tcp/\d+/p2p/12D3KooW\w+"\]\n', lines[1]), lines
        assert lines[2].strip() == "--bootstrap " + lines[1].split('"')[1]
        # The identity key is the relay's own, kept in its home for a stable address.
        assert (tmp_path / "identity.key").exists()
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert "/torch/" not in maps, "the relay process loaded torch"
        helpers = descendants(proc.pid)  # hivemind: p2pd
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        assert "relay: stopping" in proc.stderr.read()
        assert not [pid for pid in helpers if Path(f"/proc/{pid}").exists()], "a helper outlived the relay"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


class _Transport:
    def __init__(self) -> None:
        self.blocked: list[tuple[str, float]] = []

    def block(self, peer_id: str, seconds: float) -> None:
        self.blocked.append((peer_id, seconds))


def test_a_flooding_peer_is_rate_limited_then_blocked_in_the_transport(tmp_path):
    from swarmnode.config import NodeConfig
    from swarmnode.paths import NodeHome
    from swarmnode.records import Group, Question
    from swarmnode.swarm.bundle import encode_bundle
    from swarmnode.swarm.guard import GuardLimits, PeerGuard
    from swarmnode.swarm.identity import Identity

    relay = Relay(NodeConfig(), NodeHome.resolve(tmp_path), [])
    relay.transport = _Transport()
    relay._guard = PeerGuard(GuardLimits(rate=1.0, burst=3.0, ban_after_flood=5),
                             on_ban=lambda peer, seconds, _why: relay.transport.block(peer, seconds))
    flooder, honest = Identity.from_seed(b"f" * 32), Identity.from_seed(b"h" * 32)
    group = [Group(Question("chain_sum", "1+1", "2", {}), ["2", "3"], [1.0, 0.0])]

    def bundle(who: Identity, r: int) -> bytes:
        return encode_bundle(who, swarm="s", round_no=r, model="m", groups=group)

    for r in range(30):
        relay._admit_hold(bundle(flooder, r))
    assert relay._admit_hold(bundle(honest, 0))  # a peer in good standing is held
    assert relay.counts.dropped > 0 and relay.counts.held < 30
    assert [peer for peer, _ in relay.transport.blocked] == [flooder.peer_id]


def test_relay_metrics_show_what_its_stores_refused_and_hold(tmp_path):
    """A relay's /metrics text: the transport's refusals by reason, evictions, what its
    stores hold by standing (announcements apart) and its holds by outcome."""
    counters = TransportCounters(refused={"newcomers_full": 6913, "far_expiry": 2}, evicted=220,
                                 stored_bytes={"stored": 5283785}, room=RoomGauges(4996095, 282970, 240, 2),
                                 announce_room=RoomGauges(4720, 0, 2, 0))
    api = MetricsApi(lambda: relay_families(3, {"published": 0}, counters, {"held": 4, "dropped": 1}),
                     home=NodeHome(tmp_path))
    values = metric_values(generate_latest(api.registry).decode())
    for sample, value in (('swarmnode_peers', 3), ('swarmnode_transport_refused_total{reason="newcomers_full"}', 6913),
                          ('swarmnode_transport_refused_total{reason="far_expiry"}', 2),
                          ('swarmnode_transport_evicted_total', 220),
                          ('swarmnode_transport_stored_bytes{store="newcomer"}', 4996095),
                          ('swarmnode_transport_stored_bytes{store="announce_newcomer"}', 4720),
                          ('swarmnode_transport_signers{standing="newcomer"}', 240),
                          ('swarmnode_transport_signers{standing="announce_newcomer"}', 2),
                          ('swarmnode_relay_holds_total{outcome="dropped"}', 1)):
        assert values[sample] == value, (sample, values)
