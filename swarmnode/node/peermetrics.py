"""What the node left out of peers' responses (see :mod:`swarmnode.train.answers`): its
``/metrics`` families, summed over the peer table's rows, and its short form in a peer table.

Per peer they are in ``/v1/peers`` and the peer tables; here a label per peer would make a
series per key anyone can mint, so the families are by reason only.
"""

from __future__ import annotations

from collections import Counter

from swarmnode.node.families import Families


def left_out_families(out: Families, rows: list[dict]) -> None:
    """``swarmnode_peer_responses_left_out_total{reason}`` and
    ``swarmnode_peer_completions_weighed_total`` from the peer table's ``rows``."""
    left_out: Counter[str] = Counter()
    for row in rows:
        left_out.update(row.get("left_out_by_reason") or {})
    out.counter("swarmnode_peer_responses_left_out_total",
                "Peers' responses left out of training, by reason: not in the one form this node trains on "
                "(no_answer, nested_tag, special_token, over_budget, score_changed, unverifiable), or too far "
                "below this node's own log-probs in the update (far_from_policy).",
                [({"reason": r}, n) for r, n in sorted(left_out.items())]
                or [({"reason": ""}, 0)])
    out.counter("swarmnode_peer_completions_weighed_total",
                "Peers' completions the update weighed against the bound on their distance from this node's "
                "policy (far_from_policy counts those left out).",
                [({}, sum(r.get("logprob_measured") or 0 for r in rows))])

