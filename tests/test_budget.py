"""round_budget: the size picked for a round fits the budget under the measured throughput."""

import logging
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from swarmnode.config import NodeConfig
from swarmnode.node.budget import MIN_TOKENS, RoundBudget, fit_round


def test_fast_enough_keeps_configured_sizes():
    # 8 x 8 x 20 tokens = 1280 tokens at 100 tok/s = 12.8 s < 60 s
    assert fit_round(60, 8, 8, 256, tokens_per_second=100, mean_length=20) == (8, 256)


def test_long_completions_cut_the_token_limit_first():
    # 8 x 8 x 256 = 16384 tokens at 100 tok/s = 164 s; 60 s allows 6000 tokens = 93 per completion
    assert fit_round(60, 8, 8, 256, tokens_per_second=100, mean_length=256) == (8, 93)


def test_short_completions_cut_the_completions():
    # completions already end after 20 tokens: cutting the limit to 16 is not enough at 10 tok/s
    n, limit = fit_round(60, 8, 8, 256, tokens_per_second=10, mean_length=20)
    assert limit == MIN_TOKENS
    assert n == 600 // (8 * 16)


def test_hopeless_budget_gives_the_minimum():
    assert fit_round(1, 8, 8, 256, tokens_per_second=1, mean_length=200) == (2, MIN_TOKENS)


def test_no_measurement_keeps_configured_sizes():
    assert fit_round(10, 8, 8, 256, tokens_per_second=0, mean_length=0) == (8, 256)


@given(budget=st.floats(1, 1000), q=st.integers(1, 16), n=st.integers(2, 16), limit=st.integers(1, 512),
       rate=st.floats(0.5, 5000), mean=st.floats(1, 512))
def test_plan_is_within_bounds_and_fits_when_it_can(budget, q, n, limit, rate, mean):
    got_n, got_limit = fit_round(budget, q, n, limit, rate, mean)
    assert 2 <= got_n <= n and 1 <= got_limit <= limit
    minimum = (2, min(MIN_TOKENS, limit))
    if (got_n, got_limit) != minimum:
        assert q * got_n * min(got_limit, mean) <= budget * rate + 1e-6


def test_budget_shrinks_logs_and_grows_back_gradually(caplog):
    cfg = replace(NodeConfig(), round_budget=60.0, questions=8, completions=8, max_new_tokens=256)
    budget = RoundBudget(cfg)
    assert budget.plan() == (8, 256)  # nothing measured yet
    budget.observe(seconds=164, tokens_generated=8 * 8 * 256, completions_generated=64)
    with caplog.at_level(logging.INFO, logger="swarmnode.node.budget"):
        assert budget.plan() == (8, 93)
    assert "shrinking rounds to 8 completions x 93" in caplog.text
    # the machine got much faster: the limit grows back at most twofold a round
    for _ in range(5):
        budget.observe(seconds=5, tokens_generated=8 * 8 * 20, completions_generated=64)
    assert budget.plan() == (8, 186)
    assert budget.plan() == (8, 256)


def test_no_budget_never_changes_sizes():
    budget = RoundBudget(replace(NodeConfig(), completions=4, max_new_tokens=32))
    budget.observe(seconds=1000, tokens_generated=10, completions_generated=4)
    assert budget.plan() == (4, 32)


def test_node_rounds_follow_the_budget(tiny_model_dir, tmp_path):
    """A node with a budget measured as hopeless runs its next round at the minimum sizes."""
    import torch

    from swarmnode.node.round import Node
    from swarmnode.node.state import NodeState
    from swarmnode.paths import NodeHome
    from swarmnode.swarm.link import SoloLink
    from swarmnode.train.model import load_base_model
    from swarmnode.train.policy import Policy
    from swarmnode.train.tasks import Scorer, TaskSource, load_task_file

    cfg = replace(NodeConfig(), solo=True, questions=2, completions=4, max_new_tokens=24, round_budget=1.0)
    families = load_task_file(None)
    policy = Policy(load_base_model(str(tiny_model_dir), torch.device("cpu")), cfg)
    node = Node(cfg, NodeHome(tmp_path), policy, TaskSource(families, 1), Scorer(families), SoloLink(),
                NodeState(), 1)
    row = node.run_round(0)
    assert (row.completions, row.max_new_tokens) == (4, 24)
    # as if round 0 had generated 24 tokens a completion at 1 token/s: far over a 1 s budget
    node.budget.observe(seconds=2 * 4 * 24, tokens_generated=2 * 4 * 24, completions_generated=2 * 4)
    row = node.run_round(1)
    assert (row.completions, row.max_new_tokens) == (2, MIN_TOKENS)
    assert row.tokens_generated <= 2 * 2 * MIN_TOKENS
