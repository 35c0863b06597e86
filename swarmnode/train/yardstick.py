"""The fixed yardstick: the policy's greedy score on held-out questions that never change.

Rewards at a moving difficulty do not show progress by themselves (a node that climbs a level
sees its reward fall). The yardstick is a fixed set: for every family of the task mix,
:data:`PER_LEVEL` questions at each of its :data:`LEVELS` lowest levels (a family off the
ladder: at the task file's config), drawn from generators seeded with :data:`SEED`, which no
node's training stream uses. Decoding is greedy and unseeded, so the same adapter always
gets the same score; two nodes with the same task file score on the same questions.

A :class:`YardstickRun` scores one adapter in pieces of a few questions, so a node can take
it in the gaps between rounds (:mod:`swarmnode.node.yardsticks` decides when); it holds a
copy of the adapter's weights and swaps them in for each piece, so training may go on in
between. The untrained policy is the base model (a LoRA adapter whose weights are all zero
adds nothing), so its score is the same for every node of a model and task mix: it is
measured once and kept in the user cache (:func:`cached_untrained`, :func:`store_untrained`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import math
import os
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from swarmnode.paths import cache_dir
from swarmnode.records import Question
from swarmnode.train.answers import ANSWER_CLOSE
from swarmnode.train.curriculum import level_range
from swarmnode.train.tasks import Scorer, TaskSource, full_response

log = logging.getLogger(__name__)

SEED = "yardstick"
LEVELS = 2
PER_LEVEL = 3
# Greedy answers after a prefilled <answer> close within a few tokens when the model knows
# the format; the cap bounds what a rambling one costs. With the tag prefilled, a row needs
# no more than its key and the closing tag, so the cap is the longest key's tokens plus
# ANSWER_SLACK (the packaged tasks: 30 instead of 48, which the untrained model's rambling
# rows of bf and binary_matrix ran to).
MAX_NEW_TOKENS = 48
ANSWER_SLACK = 8
# Questions decoded together at most, and their prompts' tokens padded to the longest. A
# decoding step of the embedded model on one core took 86 ms for 1 row, 153 ms for 6, 219 ms
# for 18: rows sharing a step are cheap. But every prompt is prefilled and kept padded to
# the piece's longest: 8 prompts padded to bf's 794 tokens took the yardstick's peak RSS to
# 1449 MB (round_profile.py --yardstick), so a piece holds at most PIECE_TOKENS of them.
PIECE_QUESTIONS = 8
PIECE_TOKENS = 1600
# Part of the untrained score's cache key: raise it whenever the questions, the prompts'
# making, the decoding or the scoring change in a way the key does not already see.
VERSION = 1


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


def token_cap(policy, questions: Sequence[Question]) -> int:
    """New tokens a row may take: :data:`MAX_NEW_TOKENS`, or with the answer tag prefilled the
    longest key with its closing tag plus :data:`ANSWER_SLACK` tokens, if that is less."""
    if not policy.cfg.prefill_answer_tag or not questions:
        return MAX_NEW_TOKENS
    longest = max(len(policy.tokenizer(q.answer + ANSWER_CLOSE, add_special_tokens=False)["input_ids"])
                  for q in questions)
    return min(MAX_NEW_TOKENS, longest + ANSWER_SLACK)


@contextlib.contextmanager
def swapped_weights(params: Sequence[torch.Tensor], weights: Sequence[torch.Tensor] | None) -> Iterator[None]:
    """Inside the block ``params`` hold ``weights`` (None: leave them); afterwards their own values again."""
    if weights is None:
        yield
        return
    with torch.no_grad():
        own = [p.detach().clone() for p in params]
        for p, w in zip(params, weights):
            p.copy_(w)
        try:
            yield
        finally:
            for p, w in zip(params, own):
                p.copy_(w)


class YardstickRun:
    """One adapter's yardstick, scored a piece at a time (see :meth:`step`).

    ``weights`` are the adapter's values to score, in the order of ``policy.params`` (None:
    whatever the adapter holds when each piece runs). Questions are scored shortest prompt
    first, so a piece's prompts have similar lengths (little padding: bf's run to 800 tokens,
    basic_arithmetic's to 60), at most :data:`PIECE_QUESTIONS` at a time.
    """

    def __init__(self, round_no: int, questions: list[Question], weights: list[torch.Tensor] | None = None):
        self.round = round_no
        self.questions = questions
        self.weights = weights
        self.started_at = time.time()
        self.seconds = 0.0  # time spent in pieces so far
        self._rewards: dict[int, float] = {}
        self._prompt_tokens: list[int] = []
        self._order: list[int] = []  # question indices, shortest prompt first
        self._cap = MAX_NEW_TOKENS  # token_cap(), set with the prompts' lengths on first use
        self._seconds_per_unit: float | None = None  # seconds per (prompt token + token cap), measured

    @property
    def scored(self) -> int:
        """Questions scored so far."""
        return len(self._rewards)

    @property
    def done(self) -> bool:
        return self.scored == len(self.questions)

    def _prepare(self, policy) -> None:
        """The prompts' lengths in tokens, the scoring order and the token cap, on first use."""
        if self.questions and not self._prompt_tokens:
            self._prompt_tokens = [len(policy.tokenizer(policy.prompt(q.question), add_special_tokens=False)
                                       ["input_ids"]) for q in self.questions]
            self._order = sorted(range(len(self.questions)), key=self._prompt_tokens.__getitem__)
            self._cap = token_cap(policy, self.questions)

    def _cost(self, i: int) -> float:
        """Estimated seconds of question ``i`` in a piece: (its prompt's tokens + the token cap) at the
        rate the last piece ran. Decoding costs less a row the more rows share a step, so a piece
        estimated from a smaller one's rate is overestimated, never under."""
        assert self._seconds_per_unit is not None
        return self._seconds_per_unit * (self._prompt_tokens[i] + self._cap)

    def next_cost(self, policy) -> float | None:
        """Estimated seconds of the next question alone; None before any piece was measured."""
        self._prepare(policy)
        if self.done or self._seconds_per_unit is None:
            return None
        return self._cost(self._order[self.scored])

    def _piece(self, budget_s: float) -> list[int]:
        """The next piece: one question, then more while their estimated time fits ``budget_s``
        (only the one before any piece was measured) and their padded prompts fit ``PIECE_TOKENS``."""
        rest = self._order[self.scored:self.scored + PIECE_QUESTIONS]
        if self._seconds_per_unit is None:
            return rest[:1]
        piece, cost = rest[:1], self._cost(rest[0])
        for i in rest[1:]:
            cost += self._cost(i)
            # shortest first: question i is the piece's longest prompt
            if cost > budget_s or (len(piece) + 1) * self._prompt_tokens[i] > PIECE_TOKENS:
                break
            piece.append(i)
        return piece

    def step(self, policy, scorer: Scorer, budget_s: float = math.inf,
             should_stop: Callable[[], bool] = lambda: False) -> bool:
        """Score at least one more question, then more while their estimated time fits ``budget_s``.

        Returns True once every question is scored. A stop request ends the piece early
        and keeps nothing of it (False).
        """
        t0, ran = time.perf_counter(), False
        self._prepare(policy)
        with swapped_weights(policy.params, self.weights):
            while not self.done:
                left = budget_s - (time.perf_counter() - t0)
                if ran and self._cost(self._order[self.scored]) > left:  # a piece ran: its rate is known
                    break
                piece = self._piece(left)
                t_piece = time.perf_counter()
                batch = [self.questions[i] for i in piece]
                gen = policy.generate([policy.prompt(q.question) for q in batch], 1, max_new_tokens=self._cap,
                                      temperature=0, should_stop=should_stop)
                if should_stop():
                    break
                for i, q, texts in zip(piece, batch, gen.texts):
                    self._rewards[i] = scorer.score(q, full_response(texts[0], policy.cfg.prefill_answer_tag)) or 0.0
                units = sum(self._prompt_tokens[i] + self._cap for i in piece)
                self._seconds_per_unit = (time.perf_counter() - t_piece) / units
                ran = True
        self.seconds += time.perf_counter() - t0
        return self.done

    def result(self) -> dict[str, Any]:
        """The score of a finished run: overall mean, per family, per family and level."""
        by_family: dict[str, list[float]] = defaultdict(list)
        by_level: dict[str, list[float]] = defaultdict(list)
        for i, r in sorted(self._rewards.items()):
            q = self.questions[i]
            by_family[q.family].append(r)
            by_level[f"{q.family}:{q.level}"].append(r)
        return {
            "score": statistics.fmean(self._rewards.values()) if self._rewards else None,
            "by_family": {k: statistics.fmean(v) for k, v in sorted(by_family.items())},
            "by_level": {k: statistics.fmean(v) for k, v in sorted(by_level.items())},
            "questions": len(self.questions),
            "seconds": round(self.seconds, 3),
        }


def score_yardstick(policy, scorer: Scorer, questions: list[Question]) -> dict[str, Any]:
    """Greedy score of ``policy`` as it is on ``questions``, in one go (:meth:`YardstickRun.result`)."""
    run = YardstickRun(0, questions)
    while not run.done:
        run.step(policy, scorer)
    return run.result()


def untrained_weights(policy) -> list[torch.Tensor]:
    """Adapter weights that make ``policy`` the base model: all zero (B A x = 0)."""
    return [torch.zeros_like(p) for p in policy.params]


def untrained_key(policy, questions: list[Question]) -> str:
    """What the untrained score depends on, hashed: the base model's weights (a sample of every
    tensor), the prompts as token ids, the answers, the decoding, the verifiers' release."""
    h = hashlib.sha256()
    h.update(json.dumps({"version": VERSION, "max_new_tokens": token_cap(policy, questions), "model": policy.model_name,
                         "reasoning_gym": importlib.metadata.version("reasoning-gym"),
                         "device": policy.device.type}).encode())
    base = policy.model.get_base_model()
    with torch.no_grad():
        for name, p in base.named_parameters():
            if "lora_" in name:
                continue
            flat = p.detach().reshape(-1)
            sample = flat[:: max(1, flat.numel() // 256)][:256].float().cpu()
            h.update(f"{name}:{tuple(p.shape)}:{p.dtype}".encode())
            h.update(sample.numpy().tobytes())
    for q in questions:
        ids = policy.tokenizer(policy.prompt(q.question), add_special_tokens=False)["input_ids"]
        h.update(json.dumps([q.family, q.level, q.answer, q.metadata, ids], sort_keys=True, default=str).encode())
    return h.hexdigest()


def _cache_file(key: str) -> Path:
    return cache_dir() / "yardsticks" / f"untrained-{key[:32]}.json"


def cached_untrained(key: str) -> dict[str, Any] | None:
    """The untrained score stored under ``key`` (:func:`untrained_key`), or None."""
    path = _cache_file(key)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.debug("ignoring unreadable %s: %s", path, exc)
        return None
    return data.get("result") if isinstance(data, dict) and data.get("key") == key else None


def store_untrained(key: str, result: Mapping[str, Any]) -> None:
    """Keep the untrained score for every later node of the same key (written atomically)."""
    path = _cache_file(key)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump({"key": key, "result": dict(result)}, fh)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        log.warning("could not keep the untrained yardstick in %s (%s); it is measured again next start", path, exc)
