"""The one reader of JSON and TOML values as their annotations' types (config keys, events, log records)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from apifakes import finished_row
from swarmnode.records import RoundRecord, YardstickRecord
from swarmnode.typed import Mismatch, describe, read_as


@pytest.mark.parametrize("value, hint, expected", [
    (3, int, 3), (3, float, 3.0), (2.5, float, 2.5), (True, bool, True), ("x", str, "x"),
    (None, int | None, None), (4, int | None, 4),
    (["a", "b"], list[str], ["a", "b"]), (["a"], tuple[str, ...], ("a",)),
    ({"bf": 1}, Mapping[str, float], {"bf": 1.0}), ({"bf": 1}, Mapping[str, int], {"bf": 1}),
])
def test_a_value_that_fits_comes_back_as_its_type(value, hint, expected):
    got = read_as(value, hint, "k")
    assert got == expected and type(got) is type(expected)
    if isinstance(expected, Mapping):
        assert all(type(got[k]) is type(v) for k, v in expected.items())


@pytest.mark.parametrize("value, hint, says", [
    (True, int, "'k' is True, not an integer"),  # a bool is no number
    (True, float, "not a number"),
    (1.5, int, "not an integer"),
    ("3", int, "not an integer"),  # nothing is parsed from text
    (3, str, "not a string"),
    (1, bool, "not true or false"),
    (None, int, "'k' is None, not an integer"),
    ("x", float | None, "not a number or null"),
    (["a", 2], list[str], "'k' is ['a', 2], not a list of strings"),  # the whole value, not the element
    ({"bf": 1.5}, Mapping[str, int], "not a mapping of strings to integers"),
    ({"bf": True}, Mapping[str, float], "not a mapping of strings to numbers"),
    ([1, 2], RoundRecord, "not a RoundRecord record"),
])
def test_a_value_that_does_not_fit_is_a_mismatch_naming_the_key_and_what_it_expects(value, hint, says):
    with pytest.raises(Mismatch) as err:
        read_as(value, hint, "k")
    assert says in str(err.value) and err.value.name == "k"
    assert not says.startswith("'") or str(err.value).startswith(says)


def test_records_read_their_rows_with_it():
    row = finished_row(2, 0.5, levels={"bf": 3}).to_json()
    assert RoundRecord.from_json({**row, "reward_mean": 1}).reward_mean == 1.0
    assert RoundRecord.from_json(row) == finished_row(2, 0.5, levels={"bf": 3})
    for bad, says in [({"round": "2"}, "'round' is '2'"), ({"levels": {"bf": 1.5}}, "'levels'"),
                      ({"loss": "n/a"}, "'loss' is 'n/a', not a number or null"), ({"peers": False}, "'peers'")]:
        with pytest.raises(ValueError, match=says):
            RoundRecord.from_json({**row, **bad})
    with pytest.raises(ValueError, match="no 'score'"):
        YardstickRecord.from_json({"round": 0, "started_at": 1.0})


def test_an_annotation_it_does_not_read_is_a_programming_error():
    with pytest.raises(TypeError):
        read_as(1, int | str, "k")
    with pytest.raises(TypeError):
        read_as(1, set[int], "k")
    assert describe(list[int]) == "a list of integers"
