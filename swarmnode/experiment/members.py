"""The nodes of an experiment: a :class:`Member` (one node of one config) and the
:class:`InProcessLink` through which the nodes of a config reach each other instead of a
transport; what a member's exchange carries over a checkpoint (:func:`exchange_state`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from swarmnode.experiment.settings import Arm, Cohort
from swarmnode.node.round import Node
from swarmnode.records import Group
from swarmnode.swarm.exchange import Exchange
from swarmnode.swarm.identity import Identity
from swarmnode.swarm.link import ExchangeBacked
from swarmnode.swarm.transport.counters import TransportCounters


def exchange_state(exchange: Exchange) -> dict:
    """What a node's exchange must carry over a checkpoint for its next round to be the one an
    uninterrupted run has: its pool, its peers' standing, its own recent rewards and the shares of
    peers' completions its updates kept (JSON)."""
    return {"pool": exchange.pool.to_json(), "standing": exchange.standing.to_json(), "own": exchange.own.to_json(),
            "near": exchange.near.to_json()}


def restore_exchange(exchange: Exchange, state: Mapping) -> None:
    """Put :func:`exchange_state`'s record back (one without ``near``, of a release before it,
    starts those shares afresh); ValueError when it is damaged."""
    if not isinstance(state, Mapping) or not {"pool", "standing", "own"} <= state.keys():
        raise ValueError("exchange state lacks pool, standing or own")
    exchange.pool.restore(state["pool"])
    exchange.standing.restore(state["standing"])
    exchange.own.restore(state["own"])
    exchange.near.restore(state.get("near", []))


class InProcessLink(ExchangeBacked):
    """The :class:`~swarmnode.swarm.link.SwarmLink` of one node to the other nodes of its config.

    ``share`` hands the signed bundle to every other node's exchange at once (a config with
    J = 0 shares nothing); ``draw_external`` is the node's own :meth:`Exchange.draw`, and
    ``drawn`` keeps its latest result for the harness to record.
    """

    def __init__(self, exchange: Exchange, config_exchanges: list[Exchange], sharing: bool):
        self.exchange = exchange
        self.others = config_exchanges  # filled by the caller once every node of the config exists
        self.sharing = sharing
        self.drawn: list[Group] = []

    def share(self, round_no: int, groups: list[Group]) -> None:
        if self.sharing:
            data = self.exchange.outgoing(round_no, groups)
            for other in self.others:
                if other is not self.exchange:
                    other.receive(data)

    def draw_external(self, round_no: int, n: int, rng: random.Random) -> list[Group]:
        self.drawn = self.exchange.draw(round_no, n, rng)
        return self.drawn

    def peer_count(self) -> int:
        return len(self.others) - 1 if self.sharing else 0

    def counters(self) -> TransportCounters | None:
        """None: bundles go straight to the other exchanges, with no transport below to refuse any."""
        return None


@dataclass
class Member:
    """One node of one config."""

    arm: Arm
    index: int
    cohort: Cohort
    node: Node
    link: InProcessLink
    start_levels: dict[str, int]

    @property
    def exchange(self) -> Exchange:
        return self.link.exchange

    @property
    def identity(self) -> Identity:
        return self.exchange.identity

    @property
    def model(self) -> str:
        return self.cohort.label
