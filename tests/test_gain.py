"""What the swarm gives a node: the round's figures (node.round.gain_fields), their reduction
(swarmnode.gain through NodeView), the exchange's per-peer counts of what it kept and dropped,
and how /v1/status, /v1/peers, /metrics and ``swarmnode status``/``peers`` show them."""

from __future__ import annotations

import dataclasses
import random

import aiohttp
import pytest
import torch

from apifakes import FakeControl, finished_row, make_state, metric_values, metrics_text, peer_row, yardstick_row
from swarmnode.cli.status import peer_table_lines, status_lines
from swarmnode.config import NodeConfig
from swarmnode.events import NodeView, RoundFinished, YardstickScored
from swarmnode.gain import MAX_PEERS_KEPT, WINDOW_ROUNDS, SwarmGain, no_data_reason, yardstick_trend
from swarmnode.node.api import ApiServer
from swarmnode.node.gainmetrics import MAX_EXPORTED_PEERS, with_drawn
from swarmnode.node.round import Node, gain_fields
from swarmnode.node.state import NodeState
from swarmnode.paths import NodeHome
from swarmnode.records import Group, Question, RoundRecord
from swarmnode.swarm.bundle import encode_bundle
from swarmnode.swarm.exchange import Exchange
from swarmnode.swarm.identity import Identity
from swarmnode.swarm.link import ExchangeBacked, SoloLink
from swarmnode.swarm.pool import PeerTable
from swarmnode.train.answers import extract_answer
from swarmnode.train.curriculum import Levels
from swarmnode.train.model import load_base_model
from swarmnode.train.policy import Policy
from swarmnode.train.tasks import Scorer, TaskSource, load_task_file
from swarmnode.tui.gaintext import gain_rows, usefulness_cells

SWARM = "gain-test"
NODE, BOB, EVE = (Identity.from_seed(bytes([c]) * 32) for c in b"NBE")


def gain_row(r: int, local: dict[str, int], external: dict[str, int], *, own: dict[str, float] | None = None,
             peer_groups: dict[str, int] | None = None, peer_reward: dict[str, float] | None = None,
             drawn: dict[str, int] | None = None) -> RoundRecord:
    """A round whose update took ``local`` and ``external`` groups with signal per family."""
    own = own or {f: 0.5 for f in local}
    return dataclasses.replace(
        finished_row(r, sum(own.values()) / max(len(own), 1), own), n_local=sum(local.values()),
        n_external=sum(external.values()), trained_by_family=local, trained_external_by_family=external,
        peer_groups_by_family=peer_groups or {}, peer_reward_by_family=peer_reward or {},
        drawn_by_peer=drawn or {})


# -- the reducer -------------------------------------------------------------------------------


def test_no_round_yet_says_so_and_never_zero():
    gain = NodeView().summary()["gain"]
    for window in ("recent", "total"):
        fig = gain[window]
        assert (fig["external_share"], fig["own_reward"], fig["peer_reward"]) == (None, None, None)
        assert no_data_reason(fig, "external_share") == "no round finished yet"
    rows = dict(gain_rows(gain, yardstick_trend([])))
    assert "no round finished yet" in rows["swarm"] and "0%" not in rows["swarm"]
    assert rows["progress"] == "yardstick over untrained — (no yardstick taken yet)"


def test_a_solo_round_says_no_external_groups_yet():
    view = NodeView()
    view.apply(RoundFinished(gain_row(0, {"bf": 3}, {}, own={"bf": 0.25})))
    fig = view.summary()["gain"]["total"]
    assert (fig["local"], fig["external"], fig["external_share"]) == (3, 0, 0.0)
    assert fig["peer_reward"] is None and no_data_reason(fig, "peer_reward") == "no external groups yet"
    rows = dict(gain_rows(view.summary()["gain"], None))
    assert "— (no external groups yet; 3 of this node's own)" in rows["swarm"]
    assert "own 0.250, peers' — (no external groups yet)" in rows["rewards"]


def test_shares_and_rewards_per_family_recent_and_total():
    view = NodeView()
    # 5 early rounds without peers, then WINDOW_ROUNDS rounds where a quarter of chain_sum's signal is external
    for r in range(5):
        view.apply(RoundFinished(gain_row(r, {"chain_sum": 4, "bf": 2}, {}, own={"chain_sum": 0.25, "bf": 0.5})))
    for r in range(5, 5 + WINDOW_ROUNDS):
        view.apply(RoundFinished(gain_row(
            r, {"chain_sum": 3, "bf": 2}, {"chain_sum": 1}, own={"chain_sum": 0.25, "bf": 0.5},
            peer_groups={"chain_sum": 4, "bf": 1}, peer_reward={"chain_sum": 0.75, "bf": 0.0},
            drawn={BOB.peer_id: 1})))
    gain = view.summary()["gain"]
    recent, total = gain["recent"], gain["total"]
    assert gain["window"] == WINDOW_ROUNDS and recent["rounds"] == WINDOW_ROUNDS and total["rounds"] == 25
    assert (recent["local"], recent["external"]) == (5 * WINDOW_ROUNDS, WINDOW_ROUNDS)
    assert recent["external_share"] == pytest.approx(1 / 6)
    assert total["external_share"] == pytest.approx(WINDOW_ROUNDS / (30 + 5 * WINDOW_ROUNDS + WINDOW_ROUNDS))
    assert recent["families"]["chain_sum"]["external_share"] == pytest.approx(0.25)
    assert recent["families"]["bf"]["external_share"] == 0.0
    # peers' groups here: 4 chain_sum at 0.75 and one bf at 0 a round
    assert recent["peer_reward"] == pytest.approx(3 / 5) and recent["peer_groups"] == 5 * WINDOW_ROUNDS
    assert recent["families"]["chain_sum"]["peer_reward"] == pytest.approx(0.75)
    assert recent["families"]["chain_sum"]["own_reward"] == pytest.approx(0.25)
    assert total["drawn_by_peer"] == {BOB.peer_id: WINDOW_ROUNDS}
    text = dict(gain_rows(gain, None))
    assert f"17% ({WINDOW_ROUNDS} of {6 * WINDOW_ROUNDS} groups) in the last {WINDOW_ROUNDS} rounds" in text["swarm"]
    assert "bf 0/40 (0/50) 0.500 vs 0.000; chain_sum 20/80 (20/100) 0.250 vs 0.750" in text["families"]


def test_drawn_per_peer_is_bounded():
    gain = SwarmGain()
    for r in range(MAX_PEERS_KEPT + 10):
        gain.add(gain_row(r, {}, {"bf": 1}, drawn={f"peer{r}": 1}))
    drawn = gain.to_json()["total"]["drawn_by_peer"]
    assert len(drawn) == MAX_PEERS_KEPT and "peer0" not in drawn and f"peer{MAX_PEERS_KEPT + 9}" in drawn


def test_restored_rounds_count_in_the_gain_not_in_the_totals_since_start():
    state = make_state()
    state.restore_rounds([gain_row(r, {"bf": 2}, {"bf": 2}, drawn={BOB.peer_id: 2}) for r in range(3)])
    snap = state.snapshot()
    assert snap["rounds_finished"] == 0 and snap["gain"]["total"]["rounds"] == 3
    assert snap["gain"]["total"]["external_share"] == 0.5


def rounded(value):
    """``value`` with every float rounded (sums rebuilt from means differ in the last bits)."""
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    return round(value, 9) if isinstance(value, float) else value


def test_the_dashboard_view_rebuilt_from_the_api_agrees_with_the_node():
    """The dashboard reads only the latest rounds; the history's totals come from the status."""
    state = make_state()
    for r in range(30):
        state.emit(RoundFinished(gain_row(r, {"bf": 3}, {"bf": r % 2}, peer_groups={"bf": 2},
                                          peer_reward={"bf": r / 30}, drawn={BOB.peer_id: r % 2} if r % 2 else {})))
    status = state.snapshot()
    rows = [r.to_json() for r in state.rounds_since(25)]
    view = NodeView.from_api(status, rows, [])
    assert rounded(view.summary()["gain"]["total"]) == rounded(status["gain"]["total"])
    nxt = gain_row(30, {"bf": 1}, {"bf": 3}, drawn={EVE.peer_id: 3})
    view.apply(RoundFinished(nxt))
    state.emit(RoundFinished(nxt))
    assert rounded(view.summary()["gain"]["total"]) == rounded(state.snapshot()["gain"]["total"])
    # the recent window of the rebuilt view holds only the rounds it read and followed
    assert view.summary()["gain"]["recent"]["rounds"] == 6
    # a round that finished between the dashboard's read of the status and of the rounds counts once
    late = gain_row(31, {"bf": 2}, {"bf": 2})
    state.emit(RoundFinished(late))
    view = NodeView.from_api(status, rows + [nxt.to_json(), late.to_json()], [])
    view.apply(RoundFinished(late))  # its event, after the reads
    assert rounded(view.summary()["gain"]["total"]) == rounded(state.snapshot()["gain"]["total"])
    # a node without gain in its status (an older one): the view sums the rounds it has
    older = {k: v for k, v in status.items() if k != "gain"}
    assert NodeView.from_api(older, rows, []).summary()["gain"]["total"]["rounds"] == 5
    with pytest.raises(ValueError):
        NodeView.from_api({**status, "gain": {"window": 20, "total": {"rounds": "x"}}}, rows, [])


@pytest.mark.parametrize("records, change, reason", [
    ([], None, "no yardstick taken yet"),
    ([(0, 0.25)], None, "only the untrained score so far"),
    ([(10, 0.25), (20, 0.5)], None, "no untrained score (the first yardstick was after 10 rounds)"),
    ([(0, 0.25), (10, 0.375), (20, 0.5)], 0.25, None),
])
def test_yardstick_against_untrained(records, change, reason):
    trend = yardstick_trend([yardstick_row(r, s, {}).to_json() for r, s in records])
    assert trend["change"] == (None if change is None else pytest.approx(change)) and trend["reason"] == reason
    if change is not None:
        assert trend["trend"] == [[10, pytest.approx(0.125)], [20, pytest.approx(0.25)]]
        assert dict(gain_rows(None, trend))["progress"] == (
            "yardstick over untrained +0.250 after 20 rounds (0.500 against 0.250); after 10 +0.125, 20 +0.250")


# -- the round's figures ---------------------------------------------------------------------------


def q(family: str, i: int = 0) -> Question:
    return Question(family, f"question {i}", "1")


def test_gain_fields_count_the_training_set_by_family_and_sender():
    train = [Group(q("bf"), ["a", "b"], [1.0, 0.0]), Group(q("bf", 1), ["a", "b"], [1.0, 0.0]),
             Group(q("chain_sum"), ["a", "b"], [1.0, 0.0], source=BOB.peer_id),
             Group(q("chain_sum", 1), ["a", "b"], [0.5, 0.0], source=EVE.peer_id),
             Group(q("bf", 2), ["a", "b"], [0.5, 0.0], source=BOB.peer_id)]
    fields = gain_fields(train, {"chain_sum": (4, 1.0), "bf": (0, 0.0)})
    assert fields == {"trained_by_family": {"bf": 2}, "trained_external_by_family": {"chain_sum": 2, "bf": 1},
                      "drawn_by_peer": {BOB.peer_id: 2, EVE.peer_id: 1},
                      "peer_groups_by_family": {"chain_sum": 4}, "peer_reward_by_family": {"chain_sum": 0.25}}
    RoundRecord.from_json({**finished_row(0, 0.5).to_json(), **fields})  # what metrics.jsonl reads back


# -- the receive path: bad groups counted per peer, never drawn --------------------------------------


def chain_sum(i: int) -> Question:
    return Question("chain_sum", f"What is {i} + 2?", str(i + 2), {"num_terms": 2, "num_digits": 1})


def test_groups_that_cannot_teach_are_counted_per_peer_and_never_drawn():
    ex = Exchange(NODE, NodeConfig(swarm=SWARM, solo=False, newcomer_share=1.0), Scorer(), "m",
                  families=("chain_sum", "no_such_family"))
    good = [Group(chain_sum(i), [f"<answer>{i + 2}</answer>", "<answer>x</answer>"], [0.0, 0.0]) for i in range(3)]
    flat = [Group(chain_sum(9), ["<answer>x</answer>", "<answer>y</answer>"], [1.0, 1.0])]
    bad = [Group(Question("bf", "q", "a"), ["<answer>a</answer>", "b"], [1.0, 0.0]),  # not run here
           Group(chain_sum(5), ["<answer>7</answer>"], [1.0]),  # one response: never any signal
           Group(Question("no_such_family", "q", "a"), ["<answer>a</answer>", "b"], [1.0, 0.0])]  # unverifiable
    data = encode_bundle(BOB, swarm=SWARM, round_no=1, model="m", groups=good + flat + bad)
    assert ex.receive(data).accepted
    row = next(r for r in ex.peer_rows() if r["peer_id"] == BOB.peer_id)
    assert (row["groups"], row["groups_with_signal"]) == (4, 3)
    assert row["reward_here"] == pytest.approx((3 * 0.5 + 0.0) / 4)
    assert row["groups_dropped"] == {"other_family": 1, "too_few_responses": 1, "unverifiable": 1}
    assert {g.question.family for g in ex.pool.groups()} == {"chain_sum"} and len(ex.pool.groups()) == 4
    for seed in range(10):
        drawn = ex.draw(1, 8, random.Random(seed))
        assert len(drawn) == 3 and all(g.has_signal() for g in drawn)
    assert ex.take_received() == {"chain_sum": (4, pytest.approx(1.5))}
    assert ex.take_received() == {}  # taken once, by the round that records it
    # an empty group makes the whole bundle malformed: refused, counted under its sender, nothing pooled
    empty = Group(chain_sum(7), [], [])
    assert ex.receive(encode_bundle(BOB, swarm=SWARM, round_no=2, model="m", groups=good + [empty])).reason == \
        "bad_field"
    row = next(r for r in ex.peer_rows() if r["peer_id"] == BOB.peer_id)
    assert row["rejected_by_reason"] == {"bad_field": 1} and row["groups"] == 4 and len(ex.pool.groups()) == 4
    cells = usefulness_cells(with_drawn([row], {"total": {"drawn_by_peer": {BOB.peer_id: 2}},
                                                "recent": {"drawn_by_peer": {}}})[0])
    assert cells == ("4", "75%", "0.375", "2", "1 other_family, 1 too_few_responses, 1 unverifiable")


def test_a_node_that_does_not_reuse_peer_groups_trains_each_once():
    cfg = NodeConfig(swarm=SWARM, solo=False, newcomer_share=1.0, reuse_peer_groups=False)
    ex = Exchange(NODE, cfg, Scorer(), "m", families=("chain_sum",))
    good = [Group(chain_sum(i), [f"<answer>{i + 2}</answer>", "<answer>x</answer>"], [0.0, 0.0]) for i in range(3)]
    assert ex.receive(encode_bundle(BOB, swarm=SWARM, round_no=1, model="m", groups=good)).accepted
    first, second = ex.draw(1, 4, random.Random(0)), ex.draw(2, 8, random.Random(0))  # 2 of 4: one peer's cap
    assert len(first) == 2 and len(second) == 1 and ex.draw(3, 8, random.Random(0)) == []
    assert sorted(g.question.question for g in first + second) == sorted(g.question.question for g in good)
    assert len(ex.pool) == 0


def test_the_peer_tables_usefulness_survives_its_json_and_a_damaged_one_changes_nothing():
    clock = iter(range(100, 200))
    table = PeerTable(clock=lambda: float(next(clock)))
    for i, peer in enumerate(("p1", "p2", "p3")):
        table.record_groups(peer, [Group(q("bf"), ["a", "b"], [float(i % 2), 0.0], source=peer)], {"unverifiable": i})
    table.touch("p4")  # seen, never sent a group: nothing to keep
    state = table.usefulness_json(limit=2)
    assert [r["peer_id"] for r in state] == ["p2", "p3"]  # the most recently seen, oldest first
    again = PeerTable(clock=lambda: 500.0)
    again.touch("p9")  # seen in this run: stays the most recent
    for damaged in ({"peer_id": "x"}, [{"peer_id": "x"}], [{**state[0], "groups": "many"}]):
        with pytest.raises(ValueError):
            again.restore_usefulness(damaged)
        assert [r["peer_id"] for r in again.rows()] == ["p9"]
    again.restore_usefulness(state)
    rows = again.rows()
    assert [r["peer_id"] for r in rows] == ["p9", "p3", "p2"] and rows[1]["last_seen"] == 102.0
    assert (rows[2]["groups"], rows[2]["groups_with_signal"], rows[2]["reward_here"], rows[2]["groups_dropped"]) \
        == (1, 1, 0.5, {"unverifiable": 1})


def test_a_peer_without_groups_shows_no_usefulness_made_up():
    assert usefulness_cells(peer_row("p", "p", accepted=0, rejected=0, reward=0.0)) == ("0", "—", "—", "0", "0")


# -- the API, /metrics and the commands ----------------------------------------------------------------


@pytest.fixture
async def served(tmp_path):
    home = NodeHome(tmp_path / "home").create()
    state = make_state()
    control = FakeControl([peer_row(BOB.peer_id, "bob", accepted=3, rejected=0, reward=0.9, groups=8, with_signal=6,
                                    reward_here=0.375, dropped={"unverifiable": 2}),
                           peer_row(EVE.peer_id, "eve", accepted=1, rejected=4, reward=1.0)], state=state)
    server = ApiServer(state, control, home=home)
    port = await server.start()
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
        yield state, control, session
    await server.stop()


async def test_status_and_peers_carry_the_gain(served):
    state, control, session = served
    async with session.get("/v1/status") as resp:
        before = await resp.json()
    assert before["gain"]["total"]["external_share"] is None and before["yardstick_trend"]["change"] is None
    state.emit(RoundFinished(gain_row(0, {"bf": 3}, {"bf": 1}, peer_groups={"bf": 8}, peer_reward={"bf": 0.375},
                                      drawn={BOB.peer_id: 1})))
    state.emit(YardstickScored(yardstick_row(0, 0.25, {})))
    state.emit(YardstickScored(yardstick_row(1, 0.5, {})))
    async with session.get("/v1/status") as resp:
        body = await resp.json()
    assert body["gain"]["recent"]["external_share"] == 0.25
    assert body["gain"]["total"]["families"]["bf"]["peer_reward"] == 0.375
    assert body["yardstick_trend"]["change"] == 0.25
    async with session.get("/v1/peers") as resp:
        peers = {p["name"]: p for p in (await resp.json())["peers"]}
    assert (peers["bob"]["drawn"], peers["bob"]["drawn_recent"], peers["eve"]["drawn"]) == (1, 1, 0)
    lines = status_lines(body)
    text = "\n".join(lines)
    assert "swarm    signal from peers 25% (1 of 4 groups) in the last 20 rounds, 25% (1 of 4 groups) in all 1 rounds" \
        in text
    assert "rewards  own 0.500, peers' 0.375 (8 groups) in the last 20 rounds" in text
    assert "families from peers/all with signal, last 20 rounds (all), reward own vs peers': bf 1/4 (1/4) 0.500 vs" \
        " 0.375" in text
    assert "progress yardstick over untrained +0.250 after 1 rounds (0.500 against 0.250); after 1 +0.250" in text
    table = peer_table_lines(list(peers.values()))
    assert table[0].split()[-6:] == ["GROUPS", "SIGNAL", "REWARD", "HERE", "DRAWN", "DROPPED"]
    assert table[1].split()[-6:] == ["8", "75%", "0.375", "1", "2", "unverifiable"]
    assert table[2].split()[-5:] == ["0", "—", "—", "0", "0"]


async def test_metrics_show_the_gain_with_a_bounded_peer_set(served):
    state, control, session = served
    async with session.get("/metrics") as resp:
        text = await resp.text()
    assert 'swarmnode_external_signal_share{family="",window="recent"} NaN' in text
    assert 'swarmnode_family_reward{family="",source="peers",window="total"} NaN' in text
    assert "swarmnode_yardstick_change NaN" in text
    state.emit(RoundFinished(gain_row(0, {"bf": 3}, {"bf": 1}, peer_groups={"bf": 8}, peer_reward={"bf": 0.375},
                                      drawn={BOB.peer_id: 1})))
    control.peers += [peer_row(f"12D3KooWMany{i}", f"many-{i}", accepted=1, rejected=0, reward=0.5, groups=2,
                               with_signal=1, reward_here=0.5, dropped={"other_family": 1}) for i in range(40)]
    async with session.get("/metrics") as resp:
        text = await resp.text()
    values = metric_values(text)
    assert values['swarmnode_update_groups_total{family="bf",source="external"}'] == 1
    assert values['swarmnode_external_signal_share{family="bf",window="total"}'] == 0.25
    assert values['swarmnode_family_reward{family="bf",source="peers",window="recent"}'] == 0.375
    bob = f'name="bob",peer="{BOB.peer_id}"'
    assert values[f'swarmnode_peer_groups_total{{kind="drawn",{bob}}}'] == 1
    assert values[f'swarmnode_peer_groups_total{{kind="with_signal",{bob}}}'] == 6
    assert values[f'swarmnode_peer_reward_here{{{bob}}}'] == 0.375
    named = {line.split('peer="')[1].split('"')[0] for line in text.splitlines()
             if line.startswith("swarmnode_peer_reward_here{")}
    assert len(named) == MAX_EXPORTED_PEERS + 1 and "other" in named and BOB.peer_id in named
    other = 'name="other",peer="other"'
    # 42 peers: bob (drawn from) first, 15 more named, the other 26 summed (eve's nothing and 25 of the many)
    assert values[f'swarmnode_peer_groups_total{{kind="kept",{other}}}'] == 2 * 25
    assert values[f'swarmnode_peer_groups_dropped_total{{{other},reason="other_family"}}'] == 25
    assert values[f'swarmnode_peer_reward_here{{{other}}}'] == 0.5


def test_metrics_without_a_peer_table():
    text = metrics_text(make_state())
    assert "# TYPE swarmnode_peer_groups_total counter" in text
    # the usefulness families have no sample without a peer (the left-out ones count zero: test_verified)
    usefulness = ("swarmnode_peer_groups", "swarmnode_peer_reward_here")
    assert not any(line.startswith(usefulness) for line in text.splitlines())


# -- through a real round, its checkpoint and a restart (tiny model) ------------------------------------


class ExchangeLink(ExchangeBacked, SoloLink):
    """The link of a node that draws from ``exchange`` (peers' bundles handed to it directly)."""

    def __init__(self, exchange: Exchange):
        self.exchange = exchange

    def draw_external(self, round_no, n, rng):
        return self.exchange.draw(round_no, n, rng)


class LengthScorer(Scorer):
    """A reward from the answer's length, so a peer's two answers of different lengths carry signal."""

    def score(self, question, response):
        return min(len(extract_answer(response) or ""), 8) / 8


def test_a_round_records_what_peers_gave_and_a_restart_keeps_it(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMNODE_CACHE", str(tmp_path / "cache"))
    family = "calendar_arithmetic"
    task_file = tmp_path / "tasks.toml"
    task_file.write_text(f'[{family}]\nweight = 1.0\ntasks = ["is_leap_year"]\n')
    families = load_task_file(task_file)
    cfg = dataclasses.replace(NodeConfig(), solo=True, questions=2, completions=2, max_new_tokens=4, local=2,
                              external=2, eval_every=0)
    base = load_base_model(str(tiny_model_dir), torch.device("cpu"))
    home = NodeHome(tmp_path / "home").create()

    def make() -> tuple[Node, Exchange]:
        ex = Exchange(NODE, NodeConfig(swarm=SWARM, solo=False, newcomer_share=1.0), LengthScorer(families), "m",
                      families=families)
        return Node(cfg, home, Policy(base, cfg), TaskSource(families, 1), LengthScorer(families), ExchangeLink(ex),
                    NodeState(), 1, levels=Levels(families)), ex

    node, ex = make()
    node.resume()
    answers = ["<answer>a</answer>", "<answer>abcdefgh</answer>"]
    peer_groups = [Group(Question(family, f"q{i}", "1"), answers, [0.0, 0.0])
                   for i in range(3)]
    other = [Group(Question("bf", "q", "1"), ["<answer>a</answer>", "<answer>bb</answer>"], [0.0, 1.0])]
    assert ex.receive(encode_bundle(BOB, swarm=SWARM, round_no=0, model="m", groups=peer_groups + other)).accepted
    record = node.run_round(0)
    # one peer gets at most half the J = 2 external slots (max_peer_share)
    assert record.drawn_by_peer == {BOB.peer_id: 1} and record.trained_external_by_family == {family: 1}
    assert record.peer_groups_by_family == {family: 3}
    node.finish_round(record)
    gain = node.state.snapshot()["gain"]["total"]
    assert (gain["external"], gain["drawn_by_peer"]) == (1, {BOB.peer_id: 1})
    assert gain["families"][family]["peer_reward"] == pytest.approx(0.5625)
    # the node stops and starts again: rounds from metrics.jsonl, the peer table from the checkpoint
    again, ex_again = make()
    assert again.resume() == 1
    assert again.state.snapshot()["gain"]["total"] == gain
    row = next(r for r in ex_again.peer_rows() if r["peer_id"] == BOB.peer_id)
    assert (row["groups"], row["groups_with_signal"], row["groups_dropped"]) == (3, 3, {"other_family": 1})
    assert row["reward_here"] == pytest.approx(0.5625)
