"""Adaptive difficulty: the ladder, the moves and their hysteresis, the record a checkpoint keeps."""

from __future__ import annotations

import pytest

from swarmnode.train.curriculum import (
    BAND_HIGH,
    BAND_LOW,
    DORMANT_WEIGHT,
    EASED_RUNGS,
    WINDOW,
    LevelError,
    Levels,
    check_record,
    level_config,
    level_range,
    parse_level_settings,
    start_level,
)
from swarmnode.train.tasks import TaskSource, load_task_file

NINE = list(load_task_file(None))


def test_every_packaged_family_has_a_ladder_and_every_rung_makes_questions():
    for name in (None, "laptop"):
        families = load_task_file(name)
        source = TaskSource(families, 3)
        for family in families:
            low, high = level_range(family)
            assert low == -len(EASED_RUNGS.get(family, [])) and high >= 2
            for level in range(low, high + 1):
                entry = source.dataset(family, level)[0]
                assert entry["question"]


def test_level_config_keeps_the_task_files_other_keys_and_follows_reasoning_gyms_curriculum():
    base = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"]}
    assert level_config("basic_arithmetic", base, -1)["operators"] == ["+"]
    at1 = level_config("basic_arithmetic", base, 1)
    assert at1["operators"] == ["+", "-"] and at1["max_terms"] == 3 and at1["max_digits"] == 2
    # past an attribute's top its last level stays (bf has 3 levels, chain_sum 11)
    assert level_config("chain_sum", {}, 10)["max_terms"] == 12
    with pytest.raises(LevelError):
        level_config("bf", {}, 3)
    assert level_range("not_a_family") is None


def test_questions_are_deterministic_per_seed_round_and_levels():
    families = load_task_file(None)
    levels = Levels(families).levels
    a = TaskSource(families, 11).sample(4, 8, levels)
    assert a == TaskSource(families, 11).sample(4, 8, levels)
    assert all(q.level == levels[q.family] for q in a)
    higher = {f: lv + 1 for f, lv in levels.items()}
    b = TaskSource(families, 11).sample(4, 8, higher)
    assert [q.family for q in a] == [q.family for q in b]  # same draw, other difficulty
    assert [q.question for q in a] != [q.question for q in b]
    # no levels: the task file's configs as written, as before levels existed
    assert all(q.level is None for q in TaskSource(families, 11).sample(4, 8))


def test_a_family_moves_up_after_a_window_of_easy_groups_then_needs_a_fresh_window():
    levels = Levels(NINE)
    start = levels.level("calendar_arithmetic")
    for _ in range(WINDOW - 1):
        assert levels.observe([("calendar_arithmetic", [BAND_HIGH + 0.1])]) == {}
    assert levels.observe([("calendar_arithmetic", [BAND_HIGH + 0.1])]) == {"calendar_arithmetic": start + 1}
    # the window was cleared: one hard group alone does not move it back (hysteresis)
    assert levels.observe([("calendar_arithmetic", [0.0])]) == {}
    assert levels.observe([("calendar_arithmetic", [0.0])] * (WINDOW - 1)) == {"calendar_arithmetic": start}


def test_a_family_inside_the_band_stays_and_the_ends_of_the_ladder_hold():
    levels = Levels(NINE)
    mid = (BAND_LOW + BAND_HIGH) / 2
    for _ in range(20):
        assert levels.observe([("bf", [mid])]) == {}
    bottom = level_range("base_conversion")[0]
    assert levels.observe([("base_conversion", [0.0])] * 10) == {}
    assert levels.level("base_conversion") == bottom
    top = level_range("bf")[1]
    pinned_high = Levels(NINE, start={"bf": top})
    assert pinned_high.observe([("bf", [1.0])] * 10) == {} and pinned_high.level("bf") == top


def test_unknown_families_and_nan_rewards_never_move_levels():
    levels = Levels(NINE)
    before = dict(levels.levels)
    assert levels.observe([("chain_sum", [1.0])] * 10 + [("bf", [float("nan")])] * 10) == {}
    assert levels.levels == before


def test_pinned_levels_do_not_move_and_the_record_round_trips():
    pinned = Levels(NINE, adaptive=False, start={"bf": 1})
    assert pinned.levels == {"bf": 1}
    assert pinned.observe([("bf", [1.0])] * 10) == {}
    levels = Levels(NINE)
    levels.observe([("bf", [0.3]), ("calendar_arithmetic", [0.9])])
    again = Levels(NINE)
    again.restore(levels.to_json())
    assert again.to_json() == levels.to_json()
    copy = levels.copy()
    copy.observe([("calendar_arithmetic", [0.9])] * WINDOW)
    assert copy.levels != levels.levels  # the copy moved, the original did not


def test_a_restored_record_is_clamped_to_the_ladder_and_bad_records_raise():
    levels = Levels(NINE)
    levels.restore({"bf": {"level": 99, "recent": []}, "not_in_mix": {"level": 1, "recent": [0.5]}})
    assert levels.level("bf") == level_range("bf")[1] and levels.level("not_in_mix") is None
    for bad in ([], {"bf": 1}, {"bf": {"level": "1", "recent": []}}, {"bf": {"level": True, "recent": []}},
                {"bf": {"level": 1, "recent": [float("inf")]}}, {"bf": {"level": 1}}):
        with pytest.raises(LevelError):
            check_record(bad)


def test_level_settings_parse_clamp_and_refuse_garbage():
    assert parse_level_settings(["*=0", "bf=-5"], ["bf", "arc_1d"]) == {"bf": 0, "arc_1d": 0}
    assert parse_level_settings([], ["bf"]) == {}
    for bad in (["bf"], ["bf=x"], ["chain_sum=1"]):
        with pytest.raises(LevelError):
            parse_level_settings(bad, ["bf"])
    assert start_level("base_conversion") == -2


def test_a_family_without_signal_at_an_end_of_its_ladder_is_drawn_rarely_until_it_has_some():
    flat, mixed = [0.0] * 8, [0.0] * 7 + [0.1]
    levels = Levels(NINE)
    assert levels.dormant() == [] and set(levels.focus().values()) == {1.0}
    levels.observe([("bf", flat)] * (WINDOW - 1))
    assert levels.dormant() == [], "fewer than a window of quiet groups says nothing"
    levels.observe([("bf", flat)])
    assert levels.dormant() == ["bf"] and levels.focus()["bf"] == DORMANT_WEIGHT
    # the same partial credit for every completion is no signal either; a low mean with some spread is
    levels.observe([("fraction_simplification", [0.01] * 8)] * WINDOW + [("propositional_logic", mixed)] * WINDOW)
    assert sorted(levels.dormant()) == ["bf", "fraction_simplification"]
    families = load_task_file(None)
    source = TaskSource(families, 5)
    drawn = [q.family for r in range(200) for q in source.sample(r, 8, levels.levels, levels.focus())]
    even = [q.family for r in range(200) for q in source.sample(r, 8, levels.levels)]
    assert 0 < drawn.count("bf") < even.count("bf") / 4, "rarely, never not at all"
    levels.observe([("bf", mixed)])  # one group with signal: awake
    assert levels.dormant() == ["fraction_simplification"]
    # quiet groups in mid-ladder move the level (down at 0), they do not make the family dormant
    mid = Levels(NINE, start={"bf": 1})
    mid.observe([("bf", flat)] * WINDOW)
    assert mid.level("bf") == 0 and mid.dormant() == []
    # the top of a ladder, every completion right: dormant the other way
    high = level_range("bf")[1]
    top = Levels(NINE, start={"bf": high})
    top.observe([("bf", [1.0] * 8)] * WINDOW)
    assert top.dormant() == ["bf"] and top.level("bf") == high
    # pinned levels keep the task file's weights, as before levels existed
    pinned = Levels(NINE, adaptive=False, start={"bf": 0})
    pinned.observe([("bf", flat)] * WINDOW)
    assert pinned.dormant() == [] and pinned.focus() == {"bf": 1.0}
    # the record a checkpoint keeps brings the dormancy back; one from before it counts none
    restored = Levels(NINE)
    restored.restore(levels.to_json())
    assert restored.dormant() == ["fraction_simplification"]
    old = {f: {k: v for k, v in entry.items() if k != "quiet"} for f, entry in levels.to_json().items()}
    restored.restore(old)
    assert restored.dormant() == []
    for bad in (-1, True, 1.5, "3"):
        with pytest.raises(LevelError):
            check_record({"bf": {"level": 0, "recent": [], "quiet": bad}})
