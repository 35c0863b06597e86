"""What the swarm gives, in words: the rows ``swarmnode status`` prints and the dashboard's
swarm panel shows (from ``/v1/status``'s ``gain`` and ``yardstick_trend``, see :mod:`swarmnode.gain`),
and each peer's usefulness cells of ``swarmnode peers`` and the dashboard's peer table.

A figure without data says why ("no external groups yet") instead of showing 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swarmnode.gain import no_data_reason
from swarmnode.tui.humanize import format_reward

NO_DATA = "—"


def _percent(share: float | None) -> str:
    return NO_DATA if share is None else f"{100 * share:.0f}%"


def _reward(value: float | None) -> str:
    return NO_DATA if value is None else format_reward(value)


def signal_text(fig: Mapping[str, Any]) -> str:
    """The peers' share of one window's groups with signal in the updates."""
    reason = no_data_reason(fig, "external_share")
    if reason is not None:
        return f"{NO_DATA} ({reason})"
    if not fig["external"]:
        return f"{NO_DATA} (no external groups yet; {fig['local']} of this node's own)"
    return f"{_percent(fig['external_share'])} ({fig['external']} of {fig['local'] + fig['external']} groups)"


def reward_text(fig: Mapping[str, Any]) -> str:
    """Own mean reward against peers' groups' under this node's verifier, one window."""
    own = format_reward(fig["own_reward"]) if fig["own_reward"] is not None else \
        f"{NO_DATA} ({no_data_reason(fig, 'own_reward')})"
    peers = f"{format_reward(fig['peer_reward'])} ({fig['peer_groups']} groups)" if fig["peer_reward"] is not None \
        else f"{NO_DATA} ({no_data_reason(fig, 'peer_reward')})"
    return f"own {own}, peers' {peers}"


def families_text(recent: Mapping[str, Any], total: Mapping[str, Any]) -> str:
    """Per family: peers' groups of those with signal (recent, then all rounds) and the mean
    rewards, own against peers' (recent)."""
    parts = []
    for family, fig in sorted(total["families"].items()):
        now = recent["families"].get(family)
        share = NO_DATA if now is None or now["external_share"] is None else \
            f"{now['external']}/{now['local'] + now['external']}"
        own = _reward(None if now is None else now["own_reward"])
        peers = _reward(None if now is None else now["peer_reward"])
        parts.append(f"{family} {share} ({fig['external']}/{fig['local'] + fig['external']}) {own} vs {peers}")
    return "; ".join(parts) or f"{NO_DATA} (no round finished yet)"


def yardstick_trend_text(trend: Mapping[str, Any] | None) -> str:
    """The latest yardstick against the untrained score, and the change at the last records."""
    if not trend:
        return f"{NO_DATA} (no yardstick taken yet)"
    if trend["change"] is None:
        return f"{NO_DATA} ({trend['reason']})"
    steps = ", ".join(f"{r} {change:+.3f}" for r, change in trend["trend"] if change is not None)
    return (f"{trend['change']:+.3f} after {trend['round']} rounds ({format_reward(trend['latest'])} against "
            f"{format_reward(trend['untrained'])}); after {steps}")


def gain_rows(gain: Mapping[str, Any] | None, trend: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(label, text)`` rows: the peers' share of the signal, rewards own against peers', per
    family, and the yardstick against the untrained score. ``gain`` None: a node that has none."""
    rows: list[tuple[str, str]] = []
    if gain is not None:
        recent, total = gain["recent"], gain["total"]
        n = gain["window"]
        rows += [("swarm", f"signal from peers {signal_text(recent)} in the last {n} rounds, "
                           f"{signal_text(total)} in all {total['rounds']} rounds"),
                 ("rewards", f"{reward_text(recent)} in the last {n} rounds; {reward_text(total)} in all"),
                 ("families", f"from peers/all with signal, last {n} rounds (all), reward own vs peers': "
                              + families_text(recent, total))]
    rows.append(("progress", f"yardstick over untrained {yardstick_trend_text(trend)}"))
    return rows


# What a peer's groups are worth here (swarmnode.gain): groups kept after re-scoring, the share
# with signal, their mean reward under this node's verifier, drawn into updates, dropped on arrival.
USEFULNESS = ("GROUPS", "SIGNAL", "REWARD HERE", "DRAWN", "DROPPED")


def usefulness_cells(peer: dict) -> tuple[str, ...]:
    """A peer row's :data:`USEFULNESS` cells; "—" where it has sent no group yet."""
    groups = peer.get("groups", 0)
    dropped = peer.get("groups_dropped") or {}
    return (str(groups), f"{100 * peer.get('groups_with_signal', 0) / groups:.0f}%" if groups else NO_DATA,
            NO_DATA if peer.get("reward_here") is None else format_reward(peer["reward_here"]),
            str(peer.get("drawn", 0)),
            ", ".join(f"{n} {reason}" for reason, n in sorted(dropped.items())) or "0")
