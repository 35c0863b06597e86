"""``round_budget``: a slow node shrinks its rounds so that each fits a time budget.

The idea comes from INTELLECT-2: on heterogeneous hardware every node should finish its
round in about the same time, so slow nodes generate less. Before each round the node asks
:meth:`RoundBudget.plan` for the completions per question (L) and the token limit (T);
after each round :meth:`RoundBudget.observe` feeds back what the round measured.

The model of a round is deliberately simple and corrects itself round by round:

    seconds(L, T) ~= Q * L * min(T, mean completion length) / throughput

where throughput is the generated tokens per second of *whole-round* time (generation,
scoring and training together) and both it and the mean completion length are moving
averages over the previous rounds. The token limit is cut first (long completions are
mostly text after the answer), down to ``MIN_TOKENS``; then the completions, down to 2
(GRPO needs two completions to compare). Sizes never exceed the configured ones, and grow
back at most twofold a round, since lengths measured under a cut limit understate the
uncut ones.
"""

from __future__ import annotations

import logging
import math

from swarmnode.config import NodeConfig

log = logging.getLogger(__name__)

MIN_TOKENS = 16
MIN_COMPLETIONS = 2
# Weight of the newest round in the moving averages: adapts within a few rounds.
SMOOTHING = 0.5


def fit_round(budget_s: float, questions: int, completions: int, max_new_tokens: int,
              tokens_per_second: float, mean_length: float) -> tuple[int, int]:
    """The largest (completions, max_new_tokens), token limit cut first, predicted to fit.

    ``tokens_per_second`` is generated tokens per second of round time and ``mean_length``
    the mean generated length of a completion, both measured on earlier rounds. When even
    the minimum sizes do not fit, the minimum sizes are returned.
    """
    if tokens_per_second <= 0 or not math.isfinite(tokens_per_second) or mean_length <= 0:
        return completions, max_new_tokens
    budget_tokens = budget_s * tokens_per_second

    def cost(n: int, limit: int) -> float:
        return questions * n * min(limit, mean_length)

    min_tokens = min(MIN_TOKENS, max_new_tokens)
    if cost(completions, max_new_tokens) <= budget_tokens:
        return completions, max_new_tokens
    if cost(completions, min_tokens) <= budget_tokens:
        # The largest limit that fits: cost is linear in the limit below the mean length.
        limit = int(budget_tokens / (questions * completions))
        return completions, max(min_tokens, min(limit, max_new_tokens))
    min_completions = min(MIN_COMPLETIONS, completions)
    n = int(budget_tokens / (questions * min(min_tokens, mean_length)))
    return max(min_completions, min(n, completions)), min_tokens


class RoundBudget:
    """Per-node state of the round budget: measured averages and the last plan."""

    def __init__(self, cfg: NodeConfig):
        self.budget_s = cfg.round_budget
        self.questions = cfg.questions
        self.completions = cfg.completions
        self.max_new_tokens = cfg.max_new_tokens
        self.tokens_per_second: float | None = None
        self.mean_length: float | None = None
        self._last_plan = (cfg.completions, cfg.max_new_tokens)

    def plan(self) -> tuple[int, int]:
        """(completions per question, max new tokens) for the next round."""
        if self.budget_s is None or self.tokens_per_second is None or self.mean_length is None:
            return self.completions, self.max_new_tokens
        fitted = fit_round(self.budget_s, self.questions, self.completions, self.max_new_tokens,
                           self.tokens_per_second, self.mean_length)
        planned = (min(fitted[0], 2 * self._last_plan[0]), min(fitted[1], 2 * self._last_plan[1]))
        if planned != self._last_plan:
            if planned == (self.completions, self.max_new_tokens):
                log.info("round budget %.0f s: back to the configured %d completions x %d tokens",
                         self.budget_s, *planned)
            else:
                log.info("round budget %.0f s: shrinking rounds to %d completions x %d max new tokens "
                         "(configured %d x %d; measured %.1f tokens/s, mean completion %.0f tokens)",
                         self.budget_s, *planned, self.completions, self.max_new_tokens,
                         self.tokens_per_second, self.mean_length)
        self._last_plan = planned
        return planned

    def observe(self, seconds: float, tokens_generated: int, completions_generated: int) -> None:
        """Feed back one finished round: its length, its generated tokens and completions."""
        if seconds <= 0 or completions_generated <= 0 or tokens_generated <= 0:
            return
        rate, length = tokens_generated / seconds, tokens_generated / completions_generated
        if self.tokens_per_second is None or self.mean_length is None:
            self.tokens_per_second, self.mean_length = rate, length
        else:
            self.tokens_per_second += SMOOTHING * (rate - self.tokens_per_second)
            self.mean_length += SMOOTHING * (length - self.mean_length)
