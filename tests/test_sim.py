"""The swarm simulator: its engine, its network model and a few small swarms, all in virtual time."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from swarmnode.swarm.transport.joining import JOIN_DIALS, JoinLoop, bootstrap_in_reach
from swarmnode.swarm.transport.libp2p.announce import Announcement
from swarmnode.swarm.transport.libp2p.named import NamedWatch
from swarmnode.swarm.transport.libp2p.spread import PullDials
from swarmsim.dht import BUCKET_SIZE, NUM_REPLICAS, REGION_BITS, STALE_S, Space, key_id, plan_lookup
from swarmsim.engine import Engine
from swarmsim.libp2p_node import Libp2pNode
from swarmsim.network import Hosts, Network, Place
from swarmsim.node import peer_id
from swarmsim.run import build, run
from swarmsim.scenario import Hardware, Scenario, ScenarioError

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import swarm_sim  # noqa: E402


def test_events_run_in_time_order_and_ties_in_the_order_scheduled():
    engine, seen = Engine(), []
    engine.at(2.0, seen.append, "late")
    engine.at(1.0, seen.append, "first")
    engine.at(1.0, seen.append, "second")
    engine.after(5.0, seen.append, "beyond")
    engine.run(3.0)
    assert seen == ["first", "second", "late"] and engine.now == 3.0 and engine.pending() == 1
    engine.at(0.5, seen.append, "past")  # a time gone by runs now, not before now
    engine.run(3.0)
    assert seen[-1] == "past" and engine.now == 3.0


def _two_nodes(up: float = 1000.0, down: float = 1000.0) -> tuple[Engine, Network]:
    engine = Engine()
    places = [Place(0, 0.01, up, down, True), Place(1, 0.02, up, down, True)]
    return engine, Network(engine, places, [[0.0, 0.05], [0.05, 0.0]])


def test_a_message_takes_latency_plus_its_bytes_over_the_slower_link_and_queues_behind_the_last():
    engine, net = _two_nodes(up=1000.0, down=500.0)
    assert net.latency(0, 1) == pytest.approx(0.08)
    assert net.transfer(0, 1, 500) == pytest.approx(1.0 + 0.08)  # 500 bytes at the 500 B/s downlink
    assert net.transfer(0, 1, 500) == pytest.approx(2.0 + 0.08)  # waits for the first
    assert (net.tx[0], net.rx[1], net.tx_msgs[0], net.rx_msgs[1]) == (1000, 1000, 2, 2)


def test_an_exchange_with_a_node_that_is_down_ends_at_the_time_out_and_a_sleeper_gets_no_answer():
    engine, net = _two_nodes()
    answers: list = []
    net.set_online(1, False)
    net.call(0, 1, 10, lambda asker: (10, "hi"), lambda value: answers.append((engine.now, value)), timeout=5.0)
    engine.run(10.0)
    assert answers == [(5.0, None)]
    net.set_online(1, True)
    net.call(0, 1, 10, lambda asker: (10, f"hi {asker}"), answers.append, timeout=5.0)
    net.set_online(0, False)  # the asker falls asleep before the answer comes
    net.set_online(0, True)
    engine.run(20.0)
    assert answers == [(5.0, None)]


def test_a_host_refuses_past_its_inbound_cap_and_a_held_slot_stays_taken_after_its_connection_closes():
    hosts = Hosts(4, max_total=300, max_inbound=2, inbound_held=True)
    assert hosts.connect(1, 0, 0.0) and hosts.connect(2, 0, 0.0)
    assert not hosts.connect(3, 0, 0.0) and hosts.refused[0] == 1
    hosts.close(1, 0)
    assert not hosts.connect(3, 0, 1.0), "py-libp2p 0.8.1 gives an inbound slot back only when the host stops"
    released = Hosts(4, max_inbound=2)
    released.connect(1, 0, 0.0), released.connect(2, 0, 0.0), released.close(1, 0)
    assert released.connect(3, 0, 1.0)


def test_a_connection_manager_trims_its_oldest_connections_past_the_grace_period_down_to_the_low_mark():
    hosts = Hosts(10, low=3, high=5, grace=10.0)
    for peer in range(1, 6):
        hosts.connect(peer, 0, float(peer))
    hosts.connect(6, 0, 12.0)  # six: only the two older than 10 s may go
    assert sorted(hosts.peers[0]) == [3, 4, 5, 6] and hosts.trimmed[0] == 2
    hosts.connect(7, 0, 20.0)
    hosts.connect(8, 0, 20.0)  # six again: the old ones go, oldest first, down to three
    assert sorted(hosts.peers[0]) == [6, 7, 8] and hosts.trimmed[0] == 5


def test_a_connection_manager_past_its_high_mark_holds_only_connections_in_their_grace():
    # Checked at each dial, when a trim may run: a host that skips a trim must have had nothing to close.
    rng = random.Random(11)
    hosts = Hosts(40, low=4, high=8, grace=10.0)
    now = 0.0
    for _ in range(5000):
        now += rng.expovariate(4.0)
        a, b = rng.sample(range(40), 2)
        if rng.random() < 0.1:
            hosts.close(a, b)
            continue
        hosts.connect(a, b, now)
        for host in (a, b):
            held = hosts.peers[host]
            assert len(held) <= 8 or all(now - t < 10.0 for t in held.values()), (host, now)
    assert sum(hosts.trimmed) > 100


def test_a_trim_closes_the_oldest_connections_past_their_grace_ties_by_peer():
    # Many connections at the same instant: the ones a trim closes are those a sort of every
    # connection past its grace by (time, peer) puts first, down to the low watermark.
    rng = random.Random(12)
    hosts = Hosts(30, low=6, high=10, grace=3.0)
    now, checked = 0.0, 0
    for _ in range(4000):
        now += rng.choice([0.0, 0.0, 0.0, 1.0])
        a, b = rng.sample(range(30), 2)
        if rng.random() < 0.05:
            hosts.close(a, b)
            continue
        before = {h: {**hosts.peers[h], (b if h == a else a): now} for h in (a, b)}
        trimmed = [hosts.trimmed[a], hosts.trimmed[b]]
        hosts.connect(a, b, now)
        for host, was in zip((a, b), trimmed):
            if hosts.trimmed[host] == was:
                continue
            peers = before[host]
            oldest = sorted((t, p) for p, t in peers.items() if now - t >= 3.0)[:len(peers) - 6]
            assert set(peers) - set(hosts.peers[host]) == {p for _, p in oldest}
            assert hosts.trimmed[host] - was == len(oldest)
            checked += 1
    assert checked > 50


def test_the_dht_model_finds_the_xor_nearest_servers():
    rng = random.Random(7)
    space = Space(500, rng)
    for host in range(0, 500, 2):
        space.server_up(host, 0.0)
    for trial in range(50):
        key = key_id(f"key-{trial}")
        brute = sorted(space.up, key=lambda h: space.ids[h] ^ key)[:20]
        assert space.nearest(key, 20) == brute


@pytest.mark.parametrize("servers", [300, 3000])
def test_a_lookup_starts_from_the_servers_a_routing_table_holds_and_reaches_a_replica_in_a_wave_or_two(servers):
    # hivemind's table: of a key's region (its first 5 bits) a node outside it holds 20 servers,
    # the same ones lookup after lookup; with 300 servers a region has fewer, so it holds the
    # key's nearest and a lookup visits the beam alone, nearest first.
    space = Space(servers, random.Random(5))
    for host in range(servers):
        space.server_up(host, 0.0)
    src, shift = 0, 160 - REGION_BITS
    first_wave_replica = 0
    trials = 200
    for trial in range(trials):
        key = key_id(f"key-{trial}")
        held = space.held(src, key, BUCKET_SIZE)
        assert held == space.held(src, key, BUCKET_SIZE) and len(held) == BUCKET_SIZE
        beam = space.nearest(key, BUCKET_SIZE, {src})
        [order] = plan_lookup(space, src, [key], set())
        replicas = set(beam[:NUM_REPLICAS])
        if servers == 300:
            assert order == beam
        else:
            if key >> shift != space.ids[src] >> shift:
                assert all(space.ids[h] >> shift == key >> shift for h in held)
            assert order[4:] == [h for h in beam if h not in order[:4]]  # the second wave on: the beam
        first_wave_replica += bool(replicas & set(order[:4]))
    # At 3,000 servers (94 a region) a table holds a replica of most keys: (74/94)^5 miss it.
    assert first_wave_replica >= (0.99 if servers == 300 else 0.6) * trials


def test_a_server_that_comes_back_is_known_again_and_one_gone_long_is_forgotten():
    space = Space(40, random.Random(3))
    for host in range(40):
        space.server_up(host, 0.0)
    space.server_down(5, 10.0)
    space.server_down(6, 10.0)
    known = {5, 6}
    assert space.still_gone(known) == {5, 6}
    returns = space.returns
    space.server_up(5, 20.0)  # back: no longer skipped
    assert space.returns > returns and space.still_gone(known) == {6}
    space.server_down(7, 10.0 + STALE_S + 1)  # 6 has been gone longer than STALE_S: forgotten
    assert space.still_gone(known) == set() and 6 not in space.gone
    assert 6 not in space.nearest(space.ids[6], 5)


def test_a_shards_announcements_since_a_time_come_from_its_log_as_from_a_walk_over_the_shard():
    space = Space(1, random.Random(5))
    rng = random.Random(6)
    kid = key_id("shard")
    for t in range(3000):  # 50 peers, re-announcing: the log is cut many times over
        space.put_announcement(0, kid, f"p{rng.randrange(50)}", t, expires=t + 120.0)
        if t % 97 == 0:
            record = space.holds(0, kid, float(t))
            assert record is not None
            for after in (float("-inf"), t - 200.0, t - 30.5, t + 119.5, t - 2.0 + 120.0):
                walk = {p: v for p, v in space.shard_entries(record, float(t)).items() if v[1] > after}
                assert space.expiring_after(record, after, float(t)) == walk


def test_a_read_that_stopped_at_a_partial_copy_counts_what_it_lacked_held_up_and_held_only_asleep():
    space = Space(3, random.Random(5))
    for host in range(3):
        space.server_up(host, 0.0)
    kid = key_id("shard")
    space.put_announcement(0, kid, "a", 1, expires=120.0)
    space.put_announcement(1, kid, "a", 1, expires=120.0)
    space.put_announcement(0, kid, "b", 1, expires=121.0)  # not at host 1: a newcomer nearer the key, say
    space.put_announcement(2, kid, "c", 1, expires=122.0)
    space.server_down(2, 1.0)
    copy = space.holds(1, kid, 2.0)
    assert copy is not None
    got = space.expiring_after(copy, float("-inf"), 2.0)
    assert space.read_gaps(kid, float("-inf"), got, 2.0) == (3, 1, 1)
    space.put_announcement(0, kid, "a", 2, expires=130.0)  # a's next round, at host 0 alone
    assert space.read_gaps(kid, float("-inf"), got, 3.0) == (3, 2, 1)
    assert space.read_gaps(kid, 121.5, got, 3.0) == (2, 1, 1)  # only what expires after the bound
    assert space.read_gaps(kid, 121.5, {**got, "a": (2, 0.0)}, 3.0) == (2, 0, 1)
    assert space.read_gaps(key_id("no such shard"), float("-inf"), got, 3.0) == (0, 0, 0)


def test_a_configuration_that_cannot_hold_is_refused_in_one_line_naming_the_constraint(capsys):
    with pytest.raises(ScenarioError, match="^nat_share: every node is behind NAT and there is no relay"):
        Scenario(nodes=100, nat_share=1.0, relays=0).check()
    with pytest.raises(ScenarioError, match="^relays: every node dials 2 bootstrap peer"):
        Scenario(transport="libp2p", nodes=2000, relays=4).check()
    with pytest.raises(ScenarioError, match="^hardware: the shares add up to 0.5"):
        Scenario(hardware=(Hardware("x", 0.5, 10.0),)).check()
    with pytest.raises(ScenarioError, match="^nodes: 299 nodes keep a connection to the bootstrap node, which holds at "
                                            "most 250: add relays"):
        Scenario(transport="libp2p", nodes=300, nat_share=0.0, relays=0).check()
    with pytest.raises(ScenarioError, match="^relay_inbound: 0 inbound connections"):
        Scenario(relay_inbound=0).check()
    assert swarm_sim.main(["--nodes", "100", "--nat", "1", "--relays", "0", "--transports", "libp2p"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("swarm_sim: nat_share:")


@pytest.mark.slow
@pytest.mark.parametrize(("args", "constraint"), [
    (["--nodes", "1000", "--relays", "2", "--relay-cap", "100"], "relays: every node dials 2 bootstrap peer(s)"),
    (["--nodes", "1000", "--nat", "1", "--relays", "0"], "nat_share: every node is behind NAT and there is no relay"),
    (["--nodes", "1000", "--relay-cap", "0"], "relay_inbound: 0 inbound connections"),
    (["--nodes", "50", "--nat", "1.5"], "nat_share: 1.5 is not a share"),
])
def test_the_benchmark_ends_an_impossible_swarm_with_one_line_and_status_2_before_running_it(args, constraint):
    """The script itself, as a user runs it: one line on stderr, exit 2, nothing on stdout,
    within seconds (the check comes before any node is built)."""
    done = subprocess.run([sys.executable, str(BENCHMARKS / "swarm_sim.py"), "--transports", "libp2p", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"swarm_sim: {constraint}"), done.stderr


@pytest.mark.parametrize("transport", ["hivemind", "libp2p"])
def test_a_small_swarm_gets_its_bundles_and_no_node_more_than_k_a_round(transport):
    s = swarm_sim.machine_scenario(transport, 12, seed=3)
    r = run(s)
    assert r["nodes_measured"] == 12
    assert r["bundles_min"] >= 6.0, r  # 11 peers, K = 8: nearly every fetch finds its bundle
    assert r["bundles_max"] <= s.fetch_per_round, r
    assert r["latency_p95_s"] < 15.0 and r["fresh_share"] == 1.0


@pytest.mark.slow
def test_a_run_is_the_same_whatever_the_string_hashing_of_its_process(tmp_path):
    """Python salts its string hashes per process (PYTHONHASHSEED), so a set of PeerIDs
    iterates in another order in each: nothing a simulated node decides may follow one. The
    script itself, twice, under two hash seeds: every figure the same but its wall time."""
    got = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"{hash_seed}.json"
        subprocess.run([sys.executable, str(BENCHMARKS / "swarm_sim.py"), "--nodes", "60", "--transports", "hivemind",
                        "libp2p", "--warmup-s", "300", "--measure-s", "300", "--json", str(out)],
                       env={**os.environ, "PYTHONHASHSEED": hash_seed}, capture_output=True, check=True, timeout=300)
        got.append([{k: v for k, v in row.items() if k != "wall_s"} for row in json.loads(out.read_text())])
    assert got[0] == got[1]
    assert [row["transport"] for row in got[0]] == ["hivemind", "libp2p"] and got[0][1]["events"].get("named_asks")


def test_a_run_depends_on_its_seed_only():
    s = replace(Scenario(transport="libp2p", nodes=60, relays=2, warmup_s=120.0, measure_s=120.0), seed=5)
    told: list[float] = []
    first, again, other = run(s), run(s, progress=lambda now, _end: told.append(now)), run(replace(s, seed=6))
    for key in ("rx_bytes", "bundles_mean", "latency_p95_s", "events_run"):
        assert first[key] == again[key], "the same run, with its progress told or not"
    assert told == [60.0, 120.0, 180.0]
    assert first["events_run"] != other["events_run"]


def test_a_node_dials_two_bootstrap_peers_at_a_time_drawn_at_random_and_none_while_one_is_connected():
    many = [f"/ip4/10.0.0.{i}/tcp/1/p2p/Qm{i}" for i in range(10)]
    loop = JoinLoop(many, random.Random(1))
    drawn = [loop.to_dial(False) for _ in range(200)]
    assert {len(d) for d in drawn} == {JOIN_DIALS} and all(len(set(d)) == len(d) for d in drawn)
    assert {m for d in drawn for m in d} == set(many), "every bootstrap peer gets its turn"
    assert loop.to_dial(True) == []
    assert JoinLoop(many[:2], random.Random(1)).to_dial(False) == many[:2]


def test_a_bootstrap_peer_is_in_reach_when_connected_whichever_side_is_the_longer():
    many = [f"/ip4/10.0.0.{i}/tcp/1/p2p/Qm{i}" for i in range(10)]
    assert not bootstrap_in_reach([], many) and not bootstrap_in_reach(["Qx"], many)
    assert bootstrap_in_reach(["Qx", "Qm7"], many), "fewer peers than bootstrap peers"
    assert bootstrap_in_reach([f"Qx{i}" for i in range(20)] + ["Qm3"], many), "more peers than bootstrap peers"
    assert not bootstrap_in_reach([f"Qx{i}" for i in range(20)], many)
    assert bootstrap_in_reach(["Qx"], ["/ip4/10.0.0.1/tcp/1"]), "an address without a PeerID: any peer will do"


def test_between_passes_a_libp2p_node_holds_only_connections_it_dialed_on_purpose_or_was_dialed_by(monkeypatch):
    """A connection a pull dialed is closed after its pass (PullDials): in a swarm whose private
    nodes leave their bundles at the relays, what a node dialed and still holds while its pull
    loop is idle is a bootstrap peer or one the peer exchange dialed."""
    kept: dict[int, set[str]] = {}
    keep = PullDials.kept
    monkeypatch.setattr(PullDials, "kept", lambda self, peer: (kept.setdefault(id(self), set()).add(peer),
                                                               keep(self, peer))[1])
    s = replace(Scenario(transport="libp2p", nodes=60, relays=4, warmup_s=300.0, measure_s=300.0), seed=2)
    world = build(s)
    world.engine.run(s.warmup_s + s.measure_s)
    assert world.meter.events.get("pull_connections_closed", 0) > 0
    idle = [n for n in world.nodes if not n.relay and n.online and not n.loop_busy]
    assert len(idle) > 30
    held = {(n.idx, other) for n in idle for other in world.hosts.dialed[n.idx]}
    stray = {(i, o) for i, o in held if peer_id(o) not in kept.get(id(world.nodes[i].dials), set())}
    assert held and not stray, stray


def test_libp2p_nodes_ask_established_authors_by_name_and_hear_of_their_rounds_so(monkeypatch):
    """The simulated node asks by name with the transport's rules (NamedWatch): every author
    asked for is established with the asker and the peer asked is its author or a holder of
    its last announcement; the answers name only authors asked for, each of a later round
    than the one named, and bring news."""
    asked: list[tuple[str, list[tuple[str, int]], list[Announcement]]] = []
    answer = Libp2pNode.answer_named

    def recording(self: Libp2pNode, wanted: list[tuple[str, int]]) -> tuple[int, Any]:
        size, found = answer(self, wanted)
        asked.append((self.peer_id, wanted, found))
        return size, found

    monkeypatch.setattr(Libp2pNode, "answer_named", recording)
    watched = NamedWatch.asks
    unfit: list = []

    def checked(self: NamedWatch, now: float, connected: Any, established: Any, round_s: float) -> dict:
        out = watched(self, now, connected, established, round_s)
        for source, wanted in out.items():
            for author, _ in wanted:
                held = self._watched[author]
                if not established(author) or source not in held.sources or source not in set(connected):
                    unfit.append((source, author))
        return out

    monkeypatch.setattr(NamedWatch, "asks", checked)
    s = replace(Scenario(transport="libp2p", nodes=60, relays=4, warmup_s=600.0, measure_s=300.0), seed=2)
    r = run(s)
    assert r["events"].get("named_asks", 0) > 0 and r["events"].get("named_news", 0) > 0, r["events"]
    assert asked and not unfit, unfit[:5]
    for _source, wanted, found in asked:
        named = dict(wanted)
        assert all(a.author in named and a.round > named[a.author] for a in found)


def test_nodes_of_an_older_release_make_no_asks_by_name_and_a_run_tells_bundles_by_round_length():
    s = replace(Scenario(transport="libp2p", nodes=40, relays=4, warmup_s=300.0, measure_s=300.0), seed=4)
    older = run(replace(s, extra={"asks_by_name": False}))
    assert "named_asks" not in older["events"], older["events"]
    current = run(s)
    by_round = current["by_round_s"]
    assert set(by_round) == {f"{h.round_s:g}" for h in s.hardware}
    assert sum(c["nodes"] for c in by_round.values()) == current["nodes_measured"]
    assert all(c["established_mean"] is not None and c["bundles_p5"] <= c["bundles_mean"] for c in by_round.values())


def test_a_libp2p_nodes_bundle_stores_tell_the_simulated_time_not_the_wall_clock():
    """A store's room promotes authors by the minute of its clock: on the wall clock, a run's
    holders would depend on how fast the machine ran it."""
    world = build(replace(Scenario(transport="libp2p", nodes=6, relays=1, warmup_s=60.0, measure_s=60.0), seed=1))
    world.engine.run(90.0)
    relay = world.nodes[0]
    assert isinstance(relay, Libp2pNode)
    assert relay.held._clock() == relay.served._clock() == world.engine.now == 90.0


def test_at_the_machine_benchmark_no_author_that_pushes_to_a_node_is_asked_for_by_name():
    """Every author there is connected and pushes each round to every peer (8 nodes, 7 peers
    each): a round heard of by push is followed by the next push, so no ask is made."""
    r = run(swarm_sim.machine_scenario("libp2p", 8, seed=0))
    assert r["bundles_min"] == 7.0 and "named_asks" not in r["events"], r["events"]


def test_a_hivemind_node_stores_its_announcement_straight_at_its_shards_replicas_and_traverses_one_round_in_8():
    from swarmnode.swarm.transport.hivemind.announce import REFRESH_ROUNDS

    s = replace(swarm_sim.machine_scenario("hivemind", 12, seed=3), measure_s=600.0)
    r = run(s)
    direct, traversed = r["events"].get("announce_direct", 0), r["events"].get("announce_traversal", 0)
    assert traversed > 0 and direct >= (REFRESH_ROUNDS - 2) * traversed, r["events"]
    assert r["bundles_min"] >= 6.0 and r["fresh_share"] == 1.0, r
