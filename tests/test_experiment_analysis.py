"""The experiment's analysis of its group tables, on rows written by hand."""

from __future__ import annotations

import json

import pytest

from swarmnode.experiment.analysis import by_family, forgetting, spread
from swarmnode.experiment.report import per_seed_text, why_lines


def _row(config: str, node: int, rnd: int, seed: int = 0) -> dict:
    return {"config": config, "seed": str(seed), "node": str(node), "round": str(rnd), "model": "small"}


def _group(config, node, rnd, family, right, question="q1", signal=None, logp="", seed=0, responses=4):
    sig = signal if signal is not None else int(0 < right < responses)
    return {**_row(config, node, rnd, seed), "family": family, "right": str(right), "responses": str(responses),
            "signal": str(sig), "question": question, "logp": logp, "reward_mean": str(right / responses)}


def _drawn(config, node, rnd, family, right, question="q1", sender=1, logp="-3.0", seed=0):
    return {**_group(config, node, rnd, family, right, question, logp=logp, seed=seed), "sender": str(sender)}


def test_by_family_counts_own_and_peers_groups_a_node_round_and_compares_their_log_probs():
    rows = [_row("4/4", n, r) for n in (0, 1) for r in (0, 1)]  # 4 node-rounds
    groups = [_group("4/4", 0, 0, "gcd", 2, logp="-1.0"), _group("4/4", 0, 1, "gcd", 0),
              _group("4/4", 1, 0, "gcd", 4), _group("4/4", 1, 1, "chain_sum", 1, logp="-2.0"),
              _group("4/4", 1, 2, "gcd", 3, logp="-9.0")]  # round 2 did not finish: left out
    external = [_drawn("4/4", 0, 1, "gcd", 1, logp="-3.0"), _drawn("4/4", 1, 1, "gcd", 0, logp="-5.0")]
    got = by_family(groups, external, rows)[("4/4", "small")]
    assert got["gcd"] == {"own": 0.75, "signal": pytest.approx(1 / 3), "right": pytest.approx(2 / 3),
                          "drawn": 0.5, "drawn_right": 0.5, "logp_own": -1.0, "logp_peer": -4.0}
    assert got["chain_sum"]["own"] == 0.25 and got["chain_sum"]["drawn"] == 0.0
    assert got["chain_sum"]["drawn_right"] is None and got["chain_sum"]["logp_peer"] is None
    # Without a groups table (a run joined with one from before it) own groups are unknown, not 0.
    alone = by_family([], external, rows)[("4/4", "small")]["gcd"]
    assert alone["own"] is None and alone["signal"] is None and alone["drawn"] == 0.5


def test_spread_counts_asks_after_a_peers_right_answer_taught_or_not():
    """Node 0 answers q1 right in round 0. Node 1 trains on that group in round 1 and is asked
    q1 in round 2 (taught); node 2 is asked q1 in round 2 without having drawn it (untaught).
    Node 0's own later ask is no spread; nor is an ask in the round of the first right answer."""
    rows = [_row("4/4", n, r) for n in range(3) for r in range(3)]
    groups = [_group("4/4", 0, 0, "gcd", 2), _group("4/4", 1, 0, "gcd", 0),  # same round: not after
              _group("4/4", 1, 2, "gcd", 3), _group("4/4", 2, 2, "gcd", 1),
              _group("4/4", 0, 2, "gcd", 4), _group("4/4", 2, 1, "gcd", 0, question="q2")]
    external = [_drawn("4/4", 1, 1, "gcd", 2, sender=0)]
    got = spread(groups, external, rows)[("4/4", "small")]
    assert got == {"asks": 2, "right": 0.5, "taught": 1, "right_taught": 0.75, "untaught": 1, "right_untaught": 0.25}
    # Another seed's right answer is not a peer's; tables without question keys give nothing.
    other = [_group("4/4", 0, 0, "gcd", 2, seed=1), _group("4/4", 1, 2, "gcd", 3)]
    assert spread(other, [], rows + [_row("4/4", 0, 0, seed=1)]) == {}
    assert spread([{k: v for k, v in g.items() if k != "question"} for g in groups], external, rows) == {}


def test_forgetting_gives_each_familys_best_and_its_last_round_every_seed_has():
    def ys(seed, rnd, gcd, chain):
        return {"config": "8/0", "seed": str(seed), "node": "0", "model": "small", "round": str(rnd),
                "by_family": json.dumps({"gcd": gcd, "chain_sum": chain})}
    rows = [ys(0, 10, 0.2, 0.1), ys(1, 10, 0.4, 0.1), ys(0, 20, 0.1, 0.3), ys(1, 20, 0.1, 0.3),
            ys(0, 30, 0.9, 0.9),  # seed 1 has no round 30 yet
            {"config": "base", "seed": "", "node": "0", "model": "small", "round": "0",
             "by_family": json.dumps({"gcd": 1.0, "chain_sum": 1.0})}]
    got = forgetting(rows)[("8/0", "small")]
    assert got["gcd"] == {"best": pytest.approx(0.3), "best_round": 10, "last": pytest.approx(0.1), "last_round": 20}
    assert got["chain_sum"] == {"best": pytest.approx(0.3), "best_round": 20, "last": pytest.approx(0.3),
                                "last_round": 20}


def test_the_summarys_why_sections_appear_only_with_the_tables_they_need():
    rows = [_row("4/4", 0, 0)]
    lines = why_lines([_group("4/4", 0, 0, "gcd", 2, logp="-1.5")], [], rows, [])
    text = "\n".join(lines)
    assert "| 4/4 | small | gcd | 1.00 | 1.00 | 1.00 | 0.00 | n/a | -1.50 | n/a |" in text
    assert "Right answers spreading" not in text  # no ask after a peer's right answer
    assert why_lines([], [], rows, []) == []


def test_per_seed_text_gives_the_mean_its_t_interval_and_each_seed():
    # mean 2, sd 1, n 3: half-width 4.303 * 1 / sqrt(3) = 2.484
    assert per_seed_text([1.0, 2.0, 3.0]) == "2.000 (-0.484 to 4.484), per seed 1.000 / 2.000 / 3.000"
    assert per_seed_text([1.25], 2) == "1.25 (one seed: no interval), per seed 1.25"
