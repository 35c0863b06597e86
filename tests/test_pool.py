"""The external pool (caps, sampling rules) and the peer table."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from types import SimpleNamespace

import pytest

from swarmnode.records import Group, Question
from swarmnode.sampling import MODES, SamplingMode, level_weight, sampling_mode
from swarmnode.swarm.identity import name_from_peer_id
from swarmnode.swarm.pool import MAX_MODEL_CHARS, ExternalPool, OwnRewards, PeerTable, display_text


def mode(name: str, *, levels: Mapping[str, int] | None = None, own: Mapping[str, float] | None = None,
         best: Mapping[str, float] | None = None) -> SamplingMode:
    """Mode ``name`` as the exchange builds it, for a node of these levels, own recent mean
    rewards (``own``) and best means (``best``, default ``own``)."""
    rewards = SimpleNamespace(means=lambda: own or {}, bests=lambda: best if best is not None else own or {})
    return sampling_mode(name, SimpleNamespace(levels=levels or {}), rewards)


def group(peer: str, tag: str = "", rewards: list[float] | None = None) -> Group:
    return Group(Question("chain_sum", f"q-{peer}-{tag}", "1", {}), ["a", "b"],
                 [0.0, 1.0] if rewards is None else rewards, source=peer)


def groups(peer: str, n: int, **kw) -> list[Group]:
    return [group(peer, str(i), **kw) for i in range(n)]


def test_add_and_stats():
    pool = ExternalPool()
    assert pool.add(3, groups("A", 2)) == 2
    assert pool.add(4, groups("B", 1)) == 1
    assert len(pool) == 3
    assert pool.stats() == {"total": 3, "by_peer": {"A": 2, "B": 1}, "by_round": {3: 2, 4: 1}}


def test_per_peer_cap_drops_that_peers_oldest():
    pool = ExternalPool(max_per_peer=3)
    pool.add(1, [group("A", "old")])
    pool.add(2, groups("A", 3))
    pool.add(2, groups("B", 2))
    assert pool.stats()["by_peer"] == {"A": 3, "B": 2}
    questions = {g.question.question for g in pool.sample(10, random.Random(0), max_peer_share=1.0)}
    assert "q-A-old" not in questions


def test_total_cap_ages_by_arrival_not_by_declared_round():
    pool = ExternalPool(max_total=6, max_per_peer=100)
    pool.add(1, groups("A", 3))
    pool.add(2, groups("B", 3))
    # A huge round number buys nothing: each time the largest holder's oldest group leaves
    # (A, then B, then C itself), so every peer keeps an equal share.
    assert pool.add(10**9, groups("C", 3)) == 2
    assert pool.stats()["by_peer"] == {"A": 2, "B": 2, "C": 2}
    assert pool.add(0, [group("D")]) == 1  # a small one costs nothing: A, oldest of the equals, gives way
    assert pool.stats()["by_peer"] == {"A": 1, "B": 2, "C": 2, "D": 1}
    assert pool.groups()[-1].source == "D"


def test_sample_never_returns_own_groups():
    pool = ExternalPool()
    pool.add(1, groups("me", 10) + groups("A", 2))
    got = pool.sample(8, random.Random(1), exclude="me", max_peer_share=1.0)
    assert len(got) == 2 and all(g.source == "A" for g in got)


def test_zero_advantage_groups_are_dropped():
    pool = ExternalPool()
    pool.add(1, groups("A", 5, rewards=[1.0, 1.0]) + groups("B", 5, rewards=[0.0, 0.0]) + [group("C")])
    got = pool.sample(4, random.Random(0), max_peer_share=1.0)
    assert [g.source for g in got] == ["C"]


def test_per_peer_share_cap():
    pool = ExternalPool()
    pool.add(1, groups("A", 20) + groups("B", 2) + groups("C", 1))
    for seed in range(20):
        got = pool.sample(4, random.Random(seed), max_peer_share=0.5)
        assert len(got) == 4
        assert max(Counter(g.source for g in got).values()) <= 2
    # A tiny share still allows one group per peer.
    assert len(pool.sample(4, random.Random(0), max_peer_share=0.0)) == 3


def test_sample_is_short_when_the_pool_is_short_and_has_no_duplicates():
    pool = ExternalPool()
    pool.add(1, groups("A", 3) + groups("B", 3))
    got = pool.sample(10, random.Random(0), max_peer_share=1.0)
    assert len(got) == 6 and len({id(g) for g in got}) == 6
    assert ExternalPool().sample(4, random.Random(0)) == []


def test_a_consumed_draw_leaves_the_pool_and_is_never_drawn_again():
    pool = ExternalPool()
    pool.add(1, groups("A", 3))
    pool.add(2, groups("B", 2) + [group("B", "flat", [1.0, 1.0])])
    first = pool.sample(3, random.Random(0), max_peer_share=1.0, consume=True)
    assert len(first) == 3 and len(pool) == 3
    left = pool.groups()
    assert not {id(g) for g in first} & {id(g) for g in left}
    stats = pool.stats()
    assert stats["total"] == 3 and sum(stats["by_peer"].values()) == 3 and sum(stats["by_round"].values()) == 3
    rest = pool.sample(10, random.Random(1), max_peer_share=1.0, consume=True)
    assert len(rest) == 2 and not {id(g) for g in first} & {id(g) for g in rest}
    # the flat group was never eligible, so it stays; with no signal left, nothing more is drawn
    assert [g.question.question for g in pool.groups()] == ["q-B-flat"] and pool.stats()["by_round"] == {2: 1}
    assert pool.sample(10, random.Random(2), consume=True) == []
    restored = ExternalPool()
    restored.restore(pool.to_json())
    assert [g.question for g in restored.groups()] == [g.question for g in pool.groups()]


def test_without_consume_a_drawn_group_stays_and_can_be_drawn_again():
    pool = ExternalPool()
    pool.add(1, groups("A", 2))
    assert len(pool.sample(2, random.Random(0), max_peer_share=1.0)) == 2
    assert len(pool) == 2 and len(pool.sample(2, random.Random(0), max_peer_share=1.0)) == 2


def test_min_round():
    pool = ExternalPool()
    pool.add(1, groups("A", 3))
    pool.add(5, groups("B", 3))
    got = pool.sample(6, random.Random(0), min_round=5, max_peer_share=1.0)
    assert {g.source for g in got} == {"B"}


def test_sampling_is_deterministic_given_the_rng():
    pool = ExternalPool()
    for peer in "ABCDE":
        pool.add(1, groups(peer, 5))
    for name in MODES:
        a = pool.sample(6, random.Random(42), mode=mode(name, own={"chain_sum": 0.2}))
        b = pool.sample(6, random.Random(42), mode=mode(name, own={"chain_sum": 0.2}))
        assert [g.question for g in a] == [g.question for g in b]


def test_reward_weighted_prefers_higher_rewards():
    pool = ExternalPool()
    pool.add(1, [group(f"P{i}", "hi", rewards=[0.8, 1.0]) for i in range(10)])
    pool.add(1, [group(f"Q{i}", "lo", rewards=[0.0, 0.1]) for i in range(10)])
    rng = random.Random(7)
    counts = {"uniform": Counter(), "reward-weighted": Counter()}
    for name in counts:
        for _ in range(300):
            counts[name].update(g.question.question.rsplit("-", 1)[1] for g in pool.sample(2, rng, mode=mode(name)))
    # Weights 0.95 vs 0.10: about 90% "hi" picks for the first draw; uniform stays near half.
    assert counts["reward-weighted"]["hi"] / 600 > 0.75
    assert 0.4 < counts["uniform"]["hi"] / 600 < 0.6
    assert counts["reward-weighted"]["lo"] > 0  # the floor keeps low-reward groups possible


def leveled(peer: str, tag: str, level: int | None, rewards: list[float], family: str = "chain_sum") -> Group:
    return Group(Question(family, f"q-{peer}-{tag}", "1", {}, level), ["a", "b", "c", "d"], rewards, source=peer)


def test_level_weight_prefers_near_levels_and_more_signal():
    own = {"chain_sum": 3}
    split = [0.0, 0.0, 1.0, 1.0]  # spread 0.5: the most a group can teach
    assert level_weight(leveled("P", "a", 3, split), own) > level_weight(leveled("P", "b", 5, split), own)
    assert level_weight(leveled("P", "c", 3, split), own) > level_weight(leveled("P", "d", 3, [0, 0, 0, 1.0]), own)
    # Unknown either side: as far as one level away.
    one_off = level_weight(leveled("P", "e", 4, split), own)
    assert level_weight(leveled("P", "f", None, split), own) == one_off
    assert level_weight(leveled("P", "g", 3, split, family="basic_arithmetic"), own) == one_off


def test_level_aware_draws_groups_near_this_nodes_level():
    pool = ExternalPool()
    pool.add(1, [leveled(f"N{i}", "near", 2, [0.0, 0.0, 1.0, 1.0]) for i in range(10)])
    pool.add(1, [leveled(f"F{i}", "far", 9, [0.0, 0.0, 1.0, 1.0]) for i in range(10)])
    rng = random.Random(3)
    counts = {"uniform": Counter(), "level-aware": Counter()}
    for name in counts:
        drawing = mode(name, levels={"chain_sum": 2})
        for _ in range(300):
            counts[name].update(g.question.question.rsplit("-", 1)[1] for g in pool.sample(2, rng, mode=drawing))
    # Weights 0.55 vs 0.069 (seven levels away): about 89% "near" for the first draw.
    assert counts["level-aware"]["near"] / 600 > 0.75
    assert 0.4 < counts["uniform"]["near"] / 600 < 0.6
    assert counts["level-aware"]["far"] > 0


def test_above_own_draws_only_groups_better_than_this_nodes_own_and_prefers_the_most_better():
    pool = ExternalPool()
    pool.add(1, [leveled(f"S{i}", "strong", None, [0.0, 1.0, 1.0, 1.0]) for i in range(10)])  # mean 0.75
    pool.add(1, [leveled(f"W{i}", "weak", None, [0.0, 0.0, 0.0, 1.0]) for i in range(10)])  # mean 0.25
    pool.add(1, [leveled(f"O{i}", "other", None, [0.0, 1.0, 0.0, 0.0], family="gcd") for i in range(5)])

    def tags(own, n=2, draws=300):
        rng = random.Random(5)
        return Counter(g.question.question.rsplit("-", 1)[1] for _ in range(draws)
                       for g in pool.sample(n, rng, mode=mode("above-own", own=own)))

    weak_node = tags({"chain_sum": 0.05, "gcd": 0.6})
    assert weak_node["other"] == 0  # gcd at 0.25 is below this node's own 0.6
    # Weights 0.75 vs 0.25 (difference plus the floor): about 75 % "strong" for the first draw.
    assert weak_node["strong"] / 600 > 0.6 and weak_node["weak"] > 0
    strong_node = tags({"chain_sum": 0.5}, n=4)
    assert set(strong_node) == {"strong", "other"}, "groups below its own are left to its own groups"
    assert tags({"chain_sum": 0.9, "gcd": 0.9}) == Counter()  # nothing better: every slot goes to local groups
    assert tags({})["weak"] > 0  # a family the node has no reward of yet: anything with signal is above 0


def test_above_own_is_strictly_above_and_never_takes_a_group_without_signal():
    pool = ExternalPool()
    pool.add(1, [leveled(f"E{i}", "equal", None, [0.0, 1.0, 0.0, 1.0]) for i in range(5)])  # mean 0.5
    pool.add(1, [leveled(f"A{i}", "all", None, [1.0, 1.0, 1.0, 1.0]) for i in range(5)])  # solved: no advantage
    pool.add(1, [leveled(f"B{i}", "better", None, [0.0, 1.0, 1.0, 1.0]) for i in range(5)])  # mean 0.75
    rng = random.Random(11)
    drawn = Counter(g.question.question.rsplit("-", 1)[1] for _ in range(200)
                    for g in pool.sample(4, rng, mode=mode("above-own", own={"chain_sum": 0.5}),
                                               max_peer_share=1.0))
    assert set(drawn) == {"better"} and drawn["better"] == 800  # every slot it could fill, nothing else


def test_above_own_weighs_a_peer_by_its_groups_mean_weight_not_their_number():
    pool = ExternalPool()
    pool.add(1, [leveled("MANY", str(i), None, [0.0, 1.0, 1.0, 1.0]) for i in range(20)])  # 0.75 each
    pool.add(1, [leveled("ONE", "0", None, [0.0, 1.0, 1.0, 1.0])])
    pool.add(1, [leveled("LOW", str(i), None, [0.0, 0.0, 0.0, 1.0]) for i in range(20)])  # 0.25 each
    rng = random.Random(2)
    first = Counter(pool.sample(1, rng, mode=mode("above-own", own={"chain_sum": 0.2}))[0].source for _ in range(3000))
    # Peer weights 0.60, 0.60 and 0.10 (difference plus the floor): 46 %, 46 %, 8 %.
    assert abs(first["MANY"] - first["ONE"]) < 250
    assert 0.04 < first["LOW"] / 3000 < 0.12


def test_above_own_keeps_the_per_peer_cap():
    pool = ExternalPool()
    pool.add(1, [leveled("STRONG", str(i), None, [0.0, 1.0, 1.0, 1.0]) for i in range(20)])
    pool.add(1, [leveled("PEER", "0", None, [0.0, 1.0, 1.0, 1.0])])
    for seed in range(20):
        got = Counter(g.source for g in pool.sample(6, random.Random(seed), mode=mode("above-own"),
                                                    max_peer_share=0.5))
        assert got == Counter({"STRONG": 3, "PEER": 1})  # the other two slots go to the node's own groups


def test_own_rewards_keep_the_last_window_per_family():
    own = OwnRewards(window=4)
    own.note([leveled("me", "a", None, [1.0, 1.0, 1.0, 1.0])])
    own.note([leveled("me", "b", None, [0.0, 0.0, 0.0, 1.0]), leveled("me", "c", None, [0.5] * 4, family="gcd")])
    assert own.means() == {"chain_sum": 0.25, "gcd": 0.5}


def test_the_best_bar_holds_the_highest_full_window_and_never_falls():
    """``above-best``'s bar: the recent mean until a family's window has filled (one group is too
    few to hold a bar at), then the highest full-window mean, which stays when the node's own
    rewards fall; ``above-own``'s bar falls with them."""
    own = OwnRewards(window=8)
    own.note([leveled("me", "a", None, [1.0] * 4)])
    assert own.bests() == own.means() == {"chain_sum": 1.0}  # half a window: no best yet
    own.note([leveled("me", "b", None, [0.0, 0.0, 1.0, 0.0])])
    assert own.bests() == {"chain_sum": 0.625}  # the window full: its mean is the best
    own.note([leveled("me", "c", None, [1.0] * 4)])
    assert own.bests() == {"chain_sum": 0.625} and own.means() == {"chain_sum": 0.625}
    own.note([leveled("me", "d", None, [1.0, 1.0, 1.0, 0.0])])
    assert own.bests() == {"chain_sum": 0.875}
    for tag in "efg":  # the node's own rewards collapse
        own.note([leveled("me", tag, None, [0.0] * 4)])
    assert own.means() == {"chain_sum": 0.0} and own.bests() == {"chain_sum": 0.875}
    own.note([leveled("me", "h", None, [0.5] * 4, family="gcd")])
    assert own.bests() == {"chain_sum": 0.875, "gcd": 0.5}


def test_above_best_takes_only_groups_above_the_bar_it_is_given():
    pool = ExternalPool()
    pool.add(1, [leveled(f"W{i}", "weak", None, [0.0, 0.0, 0.0, 1.0]) for i in range(5)])  # mean 0.25
    pool.add(1, [leveled(f"S{i}", "strong", None, [0.0, 1.0, 1.0, 1.0]) for i in range(5)])  # mean 0.75
    above_best = mode("above-best", own={"chain_sum": 0.1}, best={"chain_sum": 0.5})
    drawn = [g for seed in range(20) for g in pool.sample(4, random.Random(seed), mode=above_best, max_peer_share=1.0)]
    assert drawn and {g.question.question.rsplit("-", 1)[1] for g in drawn} == {"strong"}


# What the pool drew for each mode before modes were strategy objects (the mode a string the
# pool dispatched on, levels and own rewards passed to each draw), from the pool of
# ``_varied_pool``, 4 groups a draw, seeds 0-4: the strategies must draw the same.
DRAWS_BEFORE = {
    "uniform": "F2 E2 C3 B2|A1 F1 E3 B4|F4 F2 A2 A0|B3 D0 C0 D4|B0 A1 C3 A4",
    "reward-weighted": "F2 E2 C3 B2|A2 F1 E3 B3|F4 F2 A2 A0|B3 D0 C0 D4|B0 A1 C3 A4",
    "level-aware": "F2 E3 C2 B2|A2 F2 E3 B4|F4 F2 A2 A1|B3 D0 C0 D4|B0 A2 C3 A4",
    "above-own": "E2 E1 B3 B0|A2 E2 E4 B3|F4 F2 A2 A0|B3 D0 C0 D4|B0 A0 C3 A4",
    "above-best": "E2 E1 B3 B2|A0 E2 E1 B3|F4 F0 A0 A4|B3 C0 C1 D4|B2 A0 C1 A4",
}


def _varied_pool() -> ExternalPool:
    """Six peers of five groups each: two families, levels 0-4 or none, five reward patterns."""
    patterns = ([0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0], [1.0] * 4, [0.0, 0.5, 1.0, 1.0])
    pool = ExternalPool()
    for i, peer in enumerate("ABCDEF"):
        pool.add(1, [Group(Question("gcd" if (i + k) % 3 == 0 else "chain_sum", f"{peer}{k}", "1", {},
                                    None if k == 4 else (i + k) % 5), ["a", "b", "c", "d"],
                           patterns[(i * 2 + k) % len(patterns)], source=peer) for k in range(5)])
    return pool


def test_every_mode_draws_what_it_drew_before_it_was_a_strategy():
    assert list(DRAWS_BEFORE) == list(MODES)
    for name in MODES:
        drawing = mode(name, levels={"chain_sum": 2, "gcd": 4}, own={"chain_sum": 0.3, "gcd": 0.2},
                       best={"chain_sum": 0.5, "gcd": 0.2})
        pool = _varied_pool()
        got = "|".join(" ".join(g.question.question for g in pool.sample(4, random.Random(seed), mode=drawing))
                       for seed in range(5))
        assert got == DRAWS_BEFORE[name], name


def test_a_level_aware_mode_reads_the_levels_as_they_move():
    levels = SimpleNamespace(levels={"chain_sum": 2})
    drawing = sampling_mode("level-aware", levels, OwnRewards())
    near, far = leveled("P", "a", 2, [0.0, 1.0, 0.0, 1.0]), leveled("P", "b", 6, [0.0, 1.0, 0.0, 1.0])
    assert drawing.weigher()(near) > drawing.weigher()(far)
    levels.levels = {"chain_sum": 6}  # the node's Levels after a round moved them
    assert drawing.weigher()(near) < drawing.weigher()(far)


def test_bad_mode_and_caps():
    with pytest.raises(ValueError, match="uniform"):
        mode("best")
    with pytest.raises(ValueError):
        ExternalPool(max_total=0)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_peer_table_counts_and_rows():
    table = PeerTable(clock=Clock())
    table.touch("A")
    table.record_bundle("A", round_no=4, reported_mean=0.25)
    table.record_bundle("A", round_no=3, reported_mean=None)
    table.record_rejection("A", "bad_signature")
    table.record_rejection("A", "bad_signature")
    table.record_rejection("A", "replay")
    table.record_rejection(None, "malformed")
    rows = {r["peer_id"]: r for r in table.rows()}
    a = rows["A"]
    assert a["name"] == name_from_peer_id("A")
    assert (a["accepted"], a["rejected"], a["last_round"], a["reported_mean_reward"]) == (2, 3, 4, 0.25)
    assert a["rejected_by_reason"] == {"bad_signature": 2, "replay": 1}
    assert a["first_seen"] == 101.0 and a["last_seen"] == 106.0
    assert rows["unknown"]["rejected_by_reason"] == {"malformed": 1} and rows["unknown"]["name"] == "unknown"
    assert [r["peer_id"] for r in table.rows()] == ["unknown", "A"]  # most recently seen first


def test_peer_table_keeps_the_latest_bundles_model_made_safe_to_print():
    table = PeerTable(clock=Clock())
    table.touch("A")
    assert table.rows()[0]["model"] is None
    table.record_bundle("A", round_no=1, reported_mean=None, model="SmolLM2-135M-Instruct")
    assert table.rows()[0]["model"] == "SmolLM2-135M-Instruct"
    table.record_bundle("A", round_no=2, reported_mean=None, model="qwen\x1b[2J\u202eevil\u200b\n  x")
    assert table.rows()[0]["model"] == "qwen?[2J?evil? x"
    table.record_bundle("A", round_no=3, reported_mean=None, model="m" * 256)
    assert table.rows()[0]["model"] == "m" * (MAX_MODEL_CHARS - 1) + "…"


def test_display_text():
    assert display_text("[bold]Qwen[/]") == "[bold]Qwen[/]"  # markup is text: the dashboard shows it as such
    assert display_text("a\tb\u00a0 c\u2028d") == "a b c d"
    assert display_text("\x00\x07\ud800") == "???"
    assert display_text("abcdef", limit=4) == "abc…" and display_text("") == ""


def test_peer_table_is_bounded_least_recently_seen_out():
    table = PeerTable(max_peers=3, clock=Clock())
    for peer in "ABC":
        table.touch(peer)
    table.touch("A")
    table.touch("D")
    assert {r["peer_id"] for r in table.rows()} == {"A", "C", "D"}
    assert len(table) == 3
