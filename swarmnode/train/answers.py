"""Where an answer is in a response, and the one form of a peer's response a node trains on.

**Extraction** (the verifier's reading, :func:`extract_answer`): the text inside the last
complete ``<answer>...</answer>`` pair of the response. Fallback, for a response cut off by the
token limit: the text after the last ``<answer>`` up to the first newline. No tag at all means
no answer (reward 0).

**A peer's response, verified** (:func:`canonical_response`, :class:`TokenBudget`): a node
trains on a peer's response only in the form its own sampler could have produced and its own
verifier then scored, and it scores exactly that form. Its own sampler stops at the first
``</answer>`` (or at an end-of-sequence token, or after ``max_new_tokens``), so of a peer's full
response R (the prefilled tag included, as bundles carry it):

1. R is cut after its first ``</answer>``; the answer A is the text between the first
   ``<answer>`` and that close, stripped. Without a close (a completion cut off by the token
   limit), A is the first line after the first ``<answer>``, stripped, as extraction reads it.
2. The trained form is ``<answer>A</answer>`` (``<answer>A`` when R had no close). With the
   answer tag prefilled, ``<answer>`` is the prompt's and the completion trained on is
   ``A</answer>``; without, the completion is the whole form. Text before the answer tag,
   other answer pairs and text after the first close are never trained on.
3. It is left out, by reason (:data:`LEFT_OUT_REASONS`): ``no_answer`` (no ``<answer>``, or an
   empty one left open), ``nested_tag`` (another ``<answer>`` inside A), ``special_token``
   (A holds the text of one of the tokenizer's special tokens, which this node's sampler ends
   at or never decodes), ``over_budget`` (the trained completion is more than twice this
   node's ``max_new_tokens`` in tokens, 4 more for short budgets: decoded text encodes again
   into more tokens than were sampled), ``score_changed`` (this node's verifier scores the trained form
   otherwise than R as sent: R's last pair is not its first), ``unverifiable`` (this node cannot
   score the question).
4. The reward is this node's verifier's score of the trained form.

``far_from_policy`` is the reason the update itself leaves a completion out
(:meth:`swarmnode.train.policy.Policy.train_step`): its mean token log-prob under this node's
policy is more than ``peer_logprob_gap`` nats below that of the node's own completions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
_ANSWER_RE = re.compile(re.escape(ANSWER_OPEN) + r"(.*?)" + re.escape(ANSWER_CLOSE), re.DOTALL)

# Every reason a peer's response is left out of training; stable strings (metrics, peer table).
LEFT_OUT_REASONS = ("no_answer", "nested_tag", "special_token", "over_budget", "score_changed", "unverifiable",
                    "far_from_policy")
# Reasons an honest peer's own model gives too: they do not hold back the peer's standing
# (the responses are left out all the same); the others set its probation back. A small model
# may never write the tag or write it twice after the prefilled one, a peer may run a family
# this node does not know, or a larger token limit and long answers. No honest sampler decodes
# a special token's text, and none writes a second pair, which score_changed needs.
HONEST_REASONS = frozenset({"no_answer", "unverifiable", "nested_tag", "over_budget"})


def extract_answer(response: str) -> str | None:
    """The answer in a response; see the module docstring for the rule."""
    matches = _ANSWER_RE.findall(response)
    if matches:
        return matches[-1].strip()
    i = response.rfind(ANSWER_OPEN)
    if i < 0:
        return None
    tail = response[i + len(ANSWER_OPEN):].strip()
    return tail.splitlines()[0].strip() if tail else None


def canonical_response(response: str) -> tuple[str, str] | str:
    """``(trained form, answer)`` of a peer's full response, or the reason it is left out
    (steps 1-3 of the module docstring, before the tokenizer's and the verifier's checks)."""
    start = response.find(ANSWER_OPEN)
    if start < 0:
        return "no_answer"
    end = response.find(ANSWER_CLOSE, start)
    inner = response[start + len(ANSWER_OPEN):len(response) if end < 0 else end]
    if ANSWER_OPEN in inner:
        return "nested_tag"
    if end >= 0:
        answer = inner.strip()
        return f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}", answer
    lines = inner.strip().splitlines()
    if not lines or not lines[0].strip():
        return "no_answer"
    answer = lines[0].strip()
    return f"{ANSWER_OPEN}{answer}", answer


class TokenBudget:
    """The tokenizer's checks of a trained form: no special token's text in the answer, and at
    most ``max_new_tokens`` completion tokens (after the prompt's ``<answer>`` when prefilling).

    The tokenizer is only read (``encode`` without special tokens); a node that checks peers'
    responses on another thread than it samples gives this its own copy of the tokenizer.
    """

    def __init__(self, tokenizer, max_new_tokens: int, prefill_answer_tag: bool):
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.prefill_answer_tag = prefill_answer_tag
        self._specials: Sequence[str] = [s for s in tokenizer.all_special_tokens if s]

    def check(self, form: str, answer: str) -> str | None:
        """Why ``form`` (with ``answer``) does not fit, or None when it does."""
        if any(s in answer for s in self._specials):
            return "special_token"
        completion = form[len(ANSWER_OPEN):] if self.prefill_answer_tag else form
        # Every token holds at least one byte of the text, but for a leading word-start marker
        # (SentencePiece's): a completion of fewer bytes fits without being encoded, which is
        # the common short answer (encoding took 40x the verifier's time on chain_sum).
        # Decoded text encodes again into at least as many tokens as were sampled, often more
        # (another segmentation of the same bytes): an honest peer's completion of the same
        # budget must fit, so the bound is twice the budget (and 4 more for short budgets).
        limit = self.max_new_tokens + max(4, self.max_new_tokens)
        if len(completion.encode()) + 1 <= limit:
            return None
        if len(self.tokenizer.encode(completion, add_special_tokens=False)) > limit:
            return "over_budget"
        return None
