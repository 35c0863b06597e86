"""A peer's JSON request or answer on a libp2p stream, read within a byte limit (no I/O)."""

from __future__ import annotations

import json
from typing import Any


def loads_bounded(raw: bytes, limit: int) -> Any:
    """``raw`` parsed as JSON, or None when it is longer than ``limit`` bytes or is not JSON
    (bad UTF-8, syntax, nesting too deep). Never raises; a JSON ``null`` is None too, which
    no protocol message is."""
    if len(raw) > limit:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeError and JSONDecodeError are ValueErrors
        return None
