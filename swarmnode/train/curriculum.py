"""Adaptive difficulty: per task family a level, moved by the node's own recent results.

A family's **ladder** is reasoning-gym's own curriculum (``reasoning_gym.factory.create_curriculum``,
every attribute at the same global level, capped at each attribute's top) from level 0 up,
plus eased rungs below 0 (:data:`EASED_RUNGS`) where the embedded 135M model scores about
nothing at level 0. A level's config is the task file's config of the family with the
rung's keys written over it, so keys no rung sets (``operators``, ``styles``) stay the
user's. A family reasoning-gym has no curriculum for is not on a ladder: it keeps the task
file's config and has no level.

:class:`Levels` holds the node's level per family and the results it moves them by. After
each round it is fed the rewards of every local group; once a family has
:data:`WINDOW` groups at its current level, their mean decides: at or above
:data:`BAND_HIGH` the family goes one level up, at or below :data:`BAND_LOW` one down, in
between it stays. Every move clears the window, so a family needs ``WINDOW`` fresh groups at
its new level before it moves again; the gap between the two bounds and the cleared window
are the hysteresis that keeps a family from flapping. Only this node's own local groups
move its levels: a peer's claimed level or rewards never do.

A family that sits at an end of its ladder and whose last ``WINDOW`` groups carried no
signal (every completion of a group scored the same: all 0, or all the same partial credit,
at its lowest rung; all 1 at its top) has nothing to teach the node now: it is **dormant**,
and the round draws its questions at :data:`DORMANT_WEIGHT`
of its task-file weight (:meth:`Levels.focus`). It is still drawn, so the family wakes as
soon as one of its groups scores something: the model may learn its format from the others.
Without this, the embedded model spends 4 of its 9 families' questions on groups that carry
no signal at any rung (docs/curriculum.md).

Everything here is a pure function of the rewards fed in, so a node restored from a
checkpoint (which stores :meth:`Levels.to_json`) moves exactly as it would have.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from swarmnode.compat.reasoning_gym import factory

# Mean reward of a family's last WINDOW groups at which it moves. The band is where a group
# of 8 completions most likely carries signal (with a per-completion success rate p, a group
# is all-equal with chance p^8 + (1-p)^8: under 0.2 from p = 0.2 to 0.8), pulled down at the
# top because partial-credit families rarely reach a mean of 0.8 even when mostly right.
BAND_LOW = 0.05
BAND_HIGH = 0.5
WINDOW = 3
# A dormant family's share of the question draw, relative to its task-file weight: rare
# enough that live families get the round, frequent enough (about one question in seven
# rounds for each of four dormant families among nine, at 8 questions a round) to notice
# when it wakes.
DORMANT_WEIGHT = 0.1

# Rungs below level 0, easiest first: rung i is level i - len(rungs). The packaged task
# file's eased configs are the top eased rung; below them, smaller still. Starting rewards of
# the embedded model (4 questions x 8 completions, prefilled <answer>; docs/curriculum.md):
# level 0 gives a mean of 0.000 on base_conversion, decimal_arithmetic, binary_matrix,
# arc_1d, 0.033 on calendar_arithmetic (weekday_of_date), 0.019 on fraction_simplification;
# the lowest rungs 0.011, 0.000, 0.000, 0.000, 0.094 (is_leap_year), 0.019. bf and
# propositional_logic have nothing easier than level 0 (0.000 and 0.014).
EASED_RUNGS: dict[str, list[dict[str, Any]]] = {
    "base_conversion": [
        {"min_base": 2, "max_base": 4, "min_value": 1, "max_value": 8},
        {"min_base": 2, "max_base": 10, "min_value": 1, "max_value": 32},
    ],
    "basic_arithmetic": [
        {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+"]},
    ],
    "arc_1d": [
        {"min_size": 8, "max_size": 10, "num_train": 2},
    ],
    "fraction_simplification": [
        {"min_value": 1, "max_value": 10, "min_factor": 1, "max_factor": 3},
        {"min_value": 1, "max_value": 20, "min_factor": 1, "max_factor": 5},
    ],
    "decimal_arithmetic": [
        {"min_num_decimal_places": 1, "max_num_decimal_places": 1, "min_terms": 2, "max_terms": 2},
    ],
    "calendar_arithmetic": [
        {"tasks": ["is_leap_year"]},
    ],
    "binary_matrix": [
        {"min_n": 2, "max_n": 2},
        {"min_n": 2, "max_n": 3},
    ],
}


class LevelError(ValueError):
    """A level record or a level setting is malformed; ``str()`` says which part."""


@functools.cache
def _curriculum_top(family: str) -> int | None:
    """The highest curriculum level of ``family`` (its longest attribute's), None if it has none."""
    curriculum = _curriculum(family)
    if curriculum is None:
        return None
    return max(len(a.levels) for a in curriculum.attributes.values()) - 1


def _curriculum(family: str):
    try:
        return factory().create_curriculum(family)
    except (KeyError, ValueError):
        return None


def level_range(family: str) -> tuple[int, int] | None:
    """(lowest, highest) level of ``family``'s ladder; None when it has no ladder."""
    top = _curriculum_top(family)
    if top is None:
        return None
    return -len(EASED_RUNGS.get(family, [])), top


def _ladder(family: str) -> tuple[int, int]:
    """:func:`level_range` of a family :class:`Levels` holds a level of: it has a ladder."""
    span = level_range(family)
    assert span is not None, f"family '{family}' has a level but no ladder"
    return span


def start_level(family: str) -> int | None:
    """Where a family starts: its lowest rung (the node climbs to its frontier from there)."""
    span = level_range(family)
    return None if span is None else span[0]


def level_config(family: str, base: Mapping[str, Any], level: int) -> dict[str, Any]:
    """The reasoning-gym config of ``family`` at ``level``: ``base`` with the rung's keys over it."""
    span = level_range(family)
    if span is None or not span[0] <= level <= span[1]:
        raise LevelError(f"family '{family}' has no level {level} (levels: {span})")
    config = dict(base)
    if level < 0:
        config.update(EASED_RUNGS[family][level - span[0]])
        return config
    curriculum = _curriculum(family)
    assert curriculum is not None, "a family with a ladder has a curriculum"
    for name, attr in curriculum.attributes.items():
        curriculum.set_attr_level(name, min(level, len(attr.levels) - 1))
    generated = curriculum.generate_configuration()
    for attr in curriculum.attributes.values():
        fields = ([attr.lower_field_name, attr.upper_field_name] if hasattr(attr, "lower_field_name")
                  else [attr.field_name])
        for f in fields:
            config[f] = getattr(generated, f)
    return config


def parse_level_settings(entries: Iterable[str], families: Iterable[str]) -> dict[str, int]:
    """``["family=N", "*=N"]`` (the ``levels`` config key) as ``{family: N}`` for ``families``.

    ``*`` sets every family on a ladder; a named family wins over ``*``. A level outside a
    family's ladder is clamped to it. Raises :class:`LevelError` for a malformed entry or a
    family not in ``families``.
    """
    families = list(families)
    every: int | None = None
    named: dict[str, int] = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        name = name.strip()
        try:
            level = int(value.strip())
        except ValueError:
            level = None
        if not sep or level is None:
            raise LevelError(f"'{entry}' is not 'family=N' (N an integer level, '*' for every family)")
        if name == "*":
            every = level
        elif name not in families:
            raise LevelError(f"'{entry}': '{name}' is not a family of the task mix ({', '.join(families)})")
        else:
            named[name] = level
    out = {}
    for family in families:
        span = level_range(family)
        want = named.get(family, every)
        if span is not None and want is not None:
            out[family] = min(max(want, span[0]), span[1])
    return out


class Levels:
    """The node's level per family and the recent results that move them (see module doc).

    ``adaptive`` False pins every level where it starts. ``start`` overrides start levels
    per family (from the ``levels`` config key), of families with a ladder.
    """

    def __init__(self, families: Iterable[str], *, adaptive: bool = True, start: Mapping[str, int] | None = None):
        self.adaptive = adaptive
        self.levels: dict[str, int] = {}
        for family in families:
            level = (start or {}).get(family, start_level(family) if adaptive else None)
            if level is not None:
                self.levels[family] = level
        self.recent: dict[str, list[float]] = {f: [] for f in self.levels}  # group mean rewards
        self.quiet: dict[str, int] = {f: 0 for f in self.levels}  # groups in a row without signal, at this level

    @classmethod
    def configured(cls, families: Iterable[str], entries: Iterable[str], *, adaptive: bool) -> Levels:
        """Levels as the ``levels`` and ``adaptive_difficulty`` config keys set them; raises
        :class:`LevelError` for a bad entry (see :func:`parse_level_settings`)."""
        families = list(families)
        return cls(families, adaptive=adaptive, start=parse_level_settings(entries, families))

    def level(self, family: str) -> int | None:
        """The current level of ``family``; None for a family that is not on a ladder here."""
        return self.levels.get(family)

    def copy(self) -> Levels:
        """An independent copy (a round computes its moves on one; finishing the round keeps it)."""
        other = Levels([], adaptive=self.adaptive)
        other.levels = dict(self.levels)
        other.recent = {f: list(w) for f, w in self.recent.items()}
        other.quiet = dict(self.quiet)
        return other

    def take(self, other: Levels) -> None:
        """Become ``other`` (a copy a finished round moved), staying this object: what reads a
        node's levels (its level-aware draw) holds this one for the node's life."""
        self.levels, self.recent, self.quiet = other.levels, other.recent, other.quiet

    def observe(self, results: Iterable[tuple[str, Sequence[float]]]) -> dict[str, int]:
        """Feed ``(family, completion rewards)`` of this round's local groups; returns
        ``{family: new level}`` for the families that moved (nothing when not adaptive)."""
        if not self.adaptive:
            return {}
        for family, rewards in results:
            if family in self.levels and rewards and all(map(math.isfinite, rewards)):
                self.recent[family].append(statistics.fmean(rewards))
                self.quiet[family] = 0 if max(rewards) > min(rewards) else self.quiet[family] + 1
        moved = {}
        for family, window in self.recent.items():
            if len(window) < WINDOW:
                continue
            mean = statistics.fmean(window[-WINDOW:])
            low, high = _ladder(family)
            step = 1 if mean >= BAND_HIGH else -1 if mean <= BAND_LOW else 0
            new = min(max(self.levels[family] + step, low), high)
            if new != self.levels[family]:
                self.levels[family] = new
                moved[family] = new
                window.clear()
                self.quiet[family] = 0
            else:
                del window[:-WINDOW]  # only the newest WINDOW results ever count
        return moved

    def dormant(self) -> list[str]:
        """Families at an end of their ladder whose last ``WINDOW`` groups carried no signal."""
        return [f for f, quiet in self.quiet.items() if quiet >= WINDOW and self.levels[f] in _ladder(f)]

    def focus(self) -> dict[str, float]:
        """Each family's multiplier on its task-file weight in the question draw."""
        dormant = set(self.dormant())
        return {f: DORMANT_WEIGHT if f in dormant else 1.0 for f in self.levels}

    def to_json(self) -> dict[str, Any]:
        """The record a checkpoint stores: ``{family: {"level": int, "recent": [float], "quiet": int}}``."""
        return {f: {"level": lv, "recent": list(self.recent[f]), "quiet": self.quiet[f]}
                for f, lv in sorted(self.levels.items())}

    def restore(self, record: Any) -> None:
        """Take levels and windows from a checkpoint's record (see :func:`check_record`).

        Families of the record not in the mix are ignored; a level outside the ladder is
        clamped to it; families the record lacks keep their start; a record from before
        ``quiet`` was kept counts no quiet groups. Pinned levels (not adaptive) are not
        overwritten: the config says where they are.
        """
        check_record(record)
        if not self.adaptive:
            return
        for family, entry in record.items():
            if family not in self.levels:
                continue
            low, high = _ladder(family)
            self.levels[family] = min(max(entry["level"], low), high)
            self.recent[family] = [float(x) for x in entry["recent"]][-WINDOW:]
            self.quiet[family] = entry.get("quiet", 0)


def check_record(record: Any) -> None:
    """Raise :class:`LevelError` unless ``record`` has the shape :meth:`Levels.to_json` writes."""
    if not isinstance(record, dict):
        raise LevelError("the level record is not an object")
    for family, entry in record.items():
        if (not isinstance(entry, dict) or set(entry) - {"quiet"} != {"level", "recent"}
                or isinstance(entry["level"], bool) or not isinstance(entry["level"], int)
                or isinstance(entry.get("quiet"), bool) or not isinstance(entry.get("quiet", 0), int)
                or entry.get("quiet", 0) < 0
                or not isinstance(entry["recent"], list)
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                           for x in entry["recent"])):
            raise LevelError(f"the level record of '{family}' is malformed")
