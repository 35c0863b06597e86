"""The fixed yardstick: the policy's greedy score on held-out questions that never change.

Rewards at a moving difficulty do not show progress by themselves (a node that climbs a level
sees its reward fall). The yardstick is a fixed set: for every family of the task mix,
:data:`PER_LEVEL` questions at each of its :data:`LEVELS` lowest levels (a family off the
ladder: at the task file's config), drawn from generators seeded with :data:`SEED`, which no
node's training stream uses. Decoding is greedy and unseeded, so the same adapter always
gets the same score; two nodes with the same task file score on the same questions.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from swarmnode.records import Question
from swarmnode.train.curriculum import level_range
from swarmnode.train.tasks import Scorer, TaskSource, full_response

SEED = "yardstick"
LEVELS = 2
PER_LEVEL = 3
# Greedy answers after a prefilled <answer> close within a few tokens when the model knows
# the format; the cap bounds what a rambling one costs.
MAX_NEW_TOKENS = 48


def yardstick_questions(families: Mapping[str, Mapping[str, Any]]) -> list[Question]:
    """The fixed held-out set of a task mix (see the module docstring); same mix, same list."""
    source = TaskSource(families, SEED)
    out = []
    for family in families:
        span = level_range(family)
        levels = [None] if span is None else list(range(span[0], min(span[0] + LEVELS, span[1] + 1)))
        for level in levels:
            dataset = source.dataset(family, level)
            for i in range(PER_LEVEL):
                entry = dataset[i]
                out.append(Question(family, str(entry["question"]), str(entry["answer"]),
                                    dict(entry.get("metadata", {})), level))
    return out


def score_yardstick(policy, scorer: Scorer, questions: list[Question],
                    should_stop: Callable[[], bool] = lambda: False) -> dict[str, Any] | None:
    """Greedy score of ``policy`` on ``questions``: overall mean, per family, per family and level.

    None when ``should_stop()`` turned true on the way (a cut-short score would be wrong)."""
    t0 = time.perf_counter()
    prefill = policy.cfg.prefill_answer_tag
    scored: list[tuple[Question, float]] = []
    # One batch per family: its prompts have similar lengths, so little padding (bf's run to
    # 900 tokens, basic_arithmetic's to 60).
    for family in dict.fromkeys(q.family for q in questions):
        batch = [q for q in questions if q.family == family]
        gen = policy.generate([policy.prompt(q.question) for q in batch], 1, max_new_tokens=MAX_NEW_TOKENS,
                              temperature=0, should_stop=should_stop)
        if should_stop():
            return None
        scored += [(q, scorer.score(q, full_response(texts[0], prefill)) or 0.0) for q, texts in zip(batch, gen.texts)]
    rewards = [r for _, r in scored]
    by_family: dict[str, list[float]] = defaultdict(list)
    by_level: dict[str, list[float]] = defaultdict(list)
    for q, r in scored:
        by_family[q.family].append(r)
        by_level[f"{q.family}:{q.level}"].append(r)
    return {
        "score": statistics.fmean(rewards) if rewards else None,
        "by_family": {k: statistics.fmean(v) for k, v in sorted(by_family.items())},
        "by_level": {k: statistics.fmean(v) for k, v in sorted(by_level.items())},
        "questions": len(questions),
        "seconds": round(time.perf_counter() - t0, 3),
    }
