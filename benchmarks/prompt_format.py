"""Greedy reward of a model under prompt formats: which format lets it hit the answer tag.

Questions: ``--per-family`` of each family below, from the packaged task file's configs
(generators seeded apart from any node's stream); 48 new tokens, greedy, scored by the node's
own :class:`~swarmnode.train.tasks.Scorer`. Formats:

- ``default``: what the node uses (:func:`~swarmnode.train.tasks.build_prompt`, ending inside
  ``<answer>``): the chat template, or for a model without one its BOS, one worked example
  and the question as plain text.
- ``no-prefill``: the same, the assistant's turn not started inside the tag.
- ``bare``: plain text without BOS or example (system prompt, ``Question: ...``, ``Answer: <answer>``).
- ``bare+bos``: ``bare`` after the tokenizer's BOS.
- ``example``: ``bare`` with the worked example, without BOS.

Usage, from the repository root::

    PYTHONPATH=. python benchmarks/prompt_format.py --model DIR [--formats default no-prefill] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from swarmnode.config import NodeConfig
from swarmnode.records import Question
from swarmnode.train import tasks
from swarmnode.train.model import load_base_model
from swarmnode.train.policy import Policy

FAMILIES = ("basic_arithmetic", "calendar_arithmetic", "propositional_logic", "fraction_simplification",
            "base_conversion", "decimal_arithmetic")
FORMATS = ("default", "no-prefill", "bare", "bare+bos", "example")
MAX_NEW_TOKENS = 48


def prompt(tokenizer, fmt: str, question: str) -> tuple[str, bool]:
    """(prompt text, whether it ends inside the tag) of ``question`` in format ``fmt``."""
    if fmt in ("default", "no-prefill"):
        prefill = fmt == "default"
        return tasks.build_prompt(tokenizer, question, prefill), prefill
    head = tokenizer.bos_token if fmt == "bare+bos" else ""
    example = tasks.BASE_MODEL_EXAMPLE if fmt == "example" else ""
    return f"{head}{tasks.SYSTEM_PROMPT}\n\n{example}Question: {question}\nAnswer: {tasks.ANSWER_OPEN}", True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    ap.add_argument("--per-family", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    families = tasks.load_task_file(None)
    source = tasks.TaskSource({f: families[f] for f in FAMILIES}, "prompt-format")
    questions = [Question(f, str(e["question"]), str(e["answer"]), dict(e.get("metadata", {})), None)
                 for f in FAMILIES for e in (source.dataset(f, None)[i] for i in range(args.per_family))]
    scorer = tasks.Scorer(families)
    policy = Policy(load_base_model(args.model, torch.device("cpu")), NodeConfig())
    for fmt in args.formats:
        by_family: dict[str, list[float]] = {}
        closed = 0
        for family in FAMILIES:
            batch = [q for q in questions if q.family == family]
            prompts = [prompt(policy.tokenizer, fmt, q.question) for q in batch]
            gen = policy.generate([p for p, _ in prompts], 1, max_new_tokens=MAX_NEW_TOKENS, temperature=0)
            for q, (_, prefill), texts in zip(batch, prompts, gen.texts):
                response = tasks.full_response(texts[0], prefill)
                by_family.setdefault(family, []).append(scorer.score(q, response) or 0.0)
                closed += tasks.ANSWER_CLOSE in texts[0]
        rewards = [r for v in by_family.values() for r in v]
        print(json.dumps({"format": fmt, "reward": round(statistics.fmean(rewards), 3),
                          "tag_closed": round(closed / len(rewards), 3),
                          "by_family": {f: round(statistics.fmean(v), 3) for f, v in by_family.items()}}), flush=True)


if __name__ == "__main__":
    main()
