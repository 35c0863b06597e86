"""A value read from JSON or TOML as the type its annotation says: the one type check of config
keys (``config.coerce``), events (``events.parse_event``) and log records (``JsonRecord.from_json``).

:func:`read_as` takes ``bool``, ``int``, ``float``, ``str``, ``X | None``, ``list[X]``,
``tuple[X, ...]``, ``Mapping[str, X]`` and record classes (a ``from_json`` classmethod, fed a
mapping), and returns the value as that type or raises :class:`Mismatch`. It is strict: a bool
is no number and a number no string; an int is a float (JSON writes 1.0 as 1) and becomes one.
Nothing is parsed from text: the config parses its flags and environment first.

Imports nothing of the project.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any

_KINDS = {bool: ("true or false", "booleans"), int: ("an integer", "integers"), float: ("a number", "numbers"),
          str: ("a string", "strings")}


def describe(hint: Any, plural: bool = False) -> str:
    """What ``hint`` expects, in words: ``an integer``, ``a list of strings`` (``plural``: ``integers``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _KINDS:
        return _KINDS[hint][plural]
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else describe(a, plural) for a in args)
    if origin in (list, tuple):
        return ("lists" if plural else "a list") + f" of {describe(args[0], True)}"
    if origin in (dict, collections.abc.Mapping):
        return ("mappings" if plural else "a mapping") + f" of {describe(args[0], True)} to {describe(args[1], True)}"
    return f"{getattr(hint, '__name__', hint)} records" if plural else f"a {getattr(hint, '__name__', hint)} record"


class Mismatch(ValueError):
    """``value`` (at ``name``) does not fit its annotation; ``expected`` says what would."""

    def __init__(self, name: str, value: Any, hint: Any):
        self.name, self.value, self.expected = name, value, describe(hint)
        super().__init__(f"'{name}' is {value!r}, not {self.expected}")


def read_as(value: Any, hint: Any, name: str) -> Any:
    """``value`` as ``hint`` (see the module docstring); :class:`Mismatch` naming ``name`` when it
    does not fit (the ValueError of a record's ``from_json`` passes through). TypeError for an
    annotation this function does not read: a programming error, not bad input."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"read_as reads X | None, not {hint}")
        try:
            return read_as(value, rest[0], name)
        except Mismatch:
            raise Mismatch(name, value, hint) from None
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint in _KINDS:
        if type(value) is hint:
            return value
    elif origin in (list, tuple):
        if isinstance(value, (list, tuple)):
            try:
                return origin(read_as(v, args[0], name) for v in value)
            except Mismatch:
                raise Mismatch(name, value, hint) from None
    elif origin in (dict, collections.abc.Mapping):
        if isinstance(value, collections.abc.Mapping):
            try:
                return {read_as(k, args[0], name): read_as(v, args[1], name) for k, v in value.items()}
            except Mismatch:
                raise Mismatch(name, value, hint) from None
    elif isinstance(hint, type) and hasattr(hint, "from_json"):
        if isinstance(value, collections.abc.Mapping):
            return hint.from_json(value)
    else:
        raise TypeError(f"read_as does not read {hint}")
    raise Mismatch(name, value, hint)
