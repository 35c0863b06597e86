"""The short human forms of a node's numbers, shared by the dashboard and ``swarmnode status``."""

from __future__ import annotations

import time
from typing import Iterable


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


def format_ago(timestamp: float | None, now: float | None = None) -> str:
    if not timestamp:
        return "never"
    return format_duration((now or time.time()) - timestamp) + " ago"


def format_reward(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def short_peer_id(peer_id: str) -> str:
    return peer_id if len(peer_id) <= 16 else f"{peer_id[:8]}…{peer_id[-6:]}"


def format_levels(levels: dict, dormant: Iterable[str] = ()) -> str:
    """``family level`` pairs, short, a dormant family's level in brackets: ``base_conversion -2,
    bf (0)``; '-' when there are none."""
    dormant = set(dormant)
    return ", ".join(f"{family} ({level})" if family in dormant else f"{family} {level}"
                     for family, level in sorted(levels.items())) or "-"


def format_left_out(peer: dict) -> str:
    """A peer's responses left out of training, and the share of its completions the update
    weighed that were too far from this node's policy: ``12 (far 3/40)``; '-' when neither."""
    reasons = peer.get("left_out_by_reason") or {}
    left, weighed = sum(reasons.values()), peer.get("logprob_measured") or 0
    if not left and not weighed:
        return "-"
    return f"{left} (far {reasons.get('far_from_policy', 0)}/{weighed})" if weighed else str(left)
