"""A fake node control and a filled NodeState for the API and dashboard tests."""

from __future__ import annotations

import time

from swarmnode.state import NodeInfo, NodeState


class FakeControl:
    """Records what the API asked; serves a settable peer table."""

    def __init__(self, peers: list[dict] | None = None) -> None:
        self.calls: list[str] = []
        self.peers = [peer_row("12D3KooWPeerBob", "bob", accepted=5, rejected=1, reward=0.25)] if peers is None \
            else peers

    def request_stop(self) -> None:
        self.calls.append("stop")

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")

    def peer_rows(self) -> list[dict]:
        return self.peers

    def peer_count(self) -> int:
        return len(self.peers)


def peer_row(peer_id: str, name: str, *, accepted: int, rejected: int, reward: float, seen_ago: float = 3.0) -> dict:
    return {"peer_id": peer_id, "name": name, "first_seen": time.time() - 600, "last_seen": time.time() - seen_ago,
            "accepted": accepted, "rejected": rejected,
            "rejected_by_reason": {"bad_signature": rejected} if rejected else {}, "last_round": 7,
            "reported_mean_reward": reward}


def make_state() -> NodeState:
    return NodeState(info=NodeInfo(peer_id="12D3KooWSelfAlice", name="alice", swarm="test-swarm",
                                   transport="solo", model="tiny", device="cpu", home="/tmp/x"))


def finished_row(r: int, reward: float, by_task: dict[str, float] | None = None) -> dict:
    """A metrics row shaped like swarmnode.node's."""
    return {"round": r, "reward_mean": reward, "tokens_generated": 100, "seconds": 2.0,
            "reward_by_task": by_task if by_task is not None else {"basic_arithmetic": reward,
                                                                   "base_conversion": reward / 2}}
