"""The thread policy follows the round: a listener of the node's events (``NodeState.listen``).

At each of the round's phases (:data:`swarmnode.node.round.ROUND_PHASES`) the policy sheds
threads at once if other programs took cores (a phase run with one thread too many is several
times slower); when a round finishes it judges the round's decode throughput and re-reads the
load (:class:`~swarmnode.node.threads.ThreadPolicy`). The round emits these events in the
node's model thread, so the count the policy applies is that thread's.
"""

from __future__ import annotations

from swarmnode.events import NodeEvent, PhaseChanged, RoundFinished
from swarmnode.node.round import ROUND_PHASES
from swarmnode.node.threads import ThreadPolicy


class RoundThreads:
    """Registered by the daemon: ``state.listen(RoundThreads(policy))``."""

    def __init__(self, policy: ThreadPolicy):
        self.policy = policy

    def __call__(self, event: NodeEvent) -> None:
        match event:
            case PhaseChanged(phase=phase) if phase in ROUND_PHASES:
                self.policy.check_phase()
            case RoundFinished(record=record):
                seconds = record.seconds_generate
                self.policy.end_round(record.tokens_generated / seconds if seconds > 0 else None)
