"""Questions and rewards: a weighted mix of reasoning-gym families, prompts, answer extraction.

The reward of a completion is reasoning-gym's own ``score_answer`` on the extracted answer,
nothing else (no format reward). A node scores every completion it trains on, its peers'
included, with its own :class:`Scorer`; the rewards a sender reports are never used.

Answers are read as :mod:`swarmnode.train.answers` says; a peer's response is scored (and
trained on) only in the form that module gives it (:meth:`Scorer.rescore`).
"""

from __future__ import annotations

import hashlib
import logging
import random
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from swarmnode.compat.reasoning_gym import factory
from swarmnode.records import Question
from swarmnode.train.answers import ANSWER_OPEN, HONEST_REASONS, TokenBudget, canonical_response, extract_answer
from swarmnode.train.curriculum import level_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # pyright: ignore[reportMissingImports]  # installed below 3.11 only (pyproject)

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a careful problem solver. Work out the answer to the user's task and give only "
    "the final answer, inside <answer> and </answer> tags."
)
# Index space of each family's procedural generator: far larger than any run draws.
_DATASET_SIZE = 10_000_000


class TaskConfigError(ValueError):
    """The task file is malformed; ``str()`` names the file and the family."""


def _jsonable(value: Any) -> Any:
    """reasoning-gym metadata with tuples and other containers turned into JSON types."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


# Task sets shipped in the package, by the name a user gives instead of a file path. The
# embedded 135M model scores about zero at the default nine families' difficulties: on "laptop"
# its reward rises within minutes on two CPU cores, and "short" is the set its nodes were shown
# to gain on by sharing (the round it runs by default: swarmnode.catalogue, SMOLLM2).
PACKAGED_TASK_SETS = {"laptop": "tasks-laptop.toml", "short": "tasks-short.toml"}


def load_task_file(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """Families from a task TOML file, or a packaged set by name (``None``: the packaged default).

    ``path`` may be a name of :data:`PACKAGED_TASK_SETS` (``"laptop"``, ``"short"``). Returns
    ``{family: {"weight": w, "config": {...}}}``. Unknown families and bad weights raise
    :class:`TaskConfigError`.
    """
    if path is None or str(path) in PACKAGED_TASK_SETS:
        name = "tasks.toml" if path is None else PACKAGED_TASK_SETS[str(path)]
        text = resources.files("swarmnode.data").joinpath(name).read_text()
        where = f"the packaged {name}"
    else:
        try:
            text = Path(path).expanduser().read_text()
        except OSError as exc:
            raise TaskConfigError(f"{path}: cannot read: {exc.strerror}") from None
        where = str(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TaskConfigError(f"{where}: not valid TOML: {exc}") from None
    families: dict[str, dict[str, Any]] = {}
    for name, table in data.items():
        if name not in factory().DATASETS:
            raise TaskConfigError(f"{where}: unknown reasoning-gym family '{name}'")
        if not isinstance(table, dict):
            raise TaskConfigError(f"{where}: '{name}' must be a table")
        cfg = dict(table)
        weight = cfg.pop("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            raise TaskConfigError(f"{where}: '{name}.weight' must be a number >= 0")
        families[name] = {"weight": float(weight), "config": cfg}
    if not families or sum(f["weight"] for f in families.values()) <= 0:
        raise TaskConfigError(f"{where}: needs at least one family with a positive weight")
    return families


def _family_seed(seed: int | str, family: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{family}".encode()).digest()[:8], "little")


def _make_dataset(family: str, config: Mapping[str, Any], seed: int):
    try:
        return factory().create_dataset(family, seed=seed, size=_DATASET_SIZE, **config)
    except (TypeError, ValueError, AssertionError) as exc:
        raise TaskConfigError(f"family '{family}': bad config {dict(config)!r}: {exc}") from None


class TaskSource:
    """A node's deterministic question stream: round ``r`` at the same levels and focus always yields the
    same questions.

    Determinism per (seed, round, levels) is what lets a restarted node redo an abandoned
    round (its levels come back from the checkpoint) and lets the experiment give every I/J
    config the same questions. ``levels`` maps a family to its difficulty level
    (:mod:`swarmnode.train.curriculum`); a family without one uses the task file's config.
    """

    def __init__(self, families: Mapping[str, Mapping[str, Any]], seed: int | str):
        self.seed = seed
        self.families = {n: dict(families[n]["config"]) for n in families}
        self.names = list(families)
        self.weights = [families[n]["weight"] for n in self.names]
        self._datasets: dict[tuple[str, int | None], Any] = {}
        for n in self.names:
            self.dataset(n, None)  # a bad task file fails at start, not in a round

    @property
    def spec(self) -> dict[str, dict[str, Any]]:
        """The task mix in :func:`load_task_file`'s form."""
        return {n: {"weight": w, "config": dict(self.families[n])} for n, w in zip(self.names, self.weights)}

    def dataset(self, family: str, level: int | None):
        """The family's generator at ``level`` (None: the task file's config), built once."""
        key = (family, level)
        if key not in self._datasets:
            if level is None:
                config, seed = self.families[family], _family_seed(self.seed, family)
            else:
                config = level_config(family, self.families[family], level)
                seed = _family_seed(self.seed, f"{family}:{level}")
            self._datasets[key] = _make_dataset(family, config, seed)
        return self._datasets[key]

    def sample(self, round_no: int, n: int, levels: Mapping[str, int] | None = None,
               focus: Mapping[str, float] | None = None) -> list[Question]:
        """``n`` questions of round ``round_no``; ``focus`` multiplies families' weights
        (:meth:`swarmnode.train.curriculum.Levels.focus`; a family it lacks keeps 1)."""
        rng = random.Random(f"{self.seed}:{round_no}")
        weights = [w * (focus or {}).get(name, 1.0) for name, w in zip(self.names, self.weights)]
        out = []
        for _ in range(n):
            family = rng.choices(self.names, weights)[0]
            level = (levels or {}).get(family)
            entry = self.dataset(family, level)[rng.randrange(_DATASET_SIZE)]
            out.append(Question(family, str(entry["question"]), str(entry["answer"]),
                                _jsonable(entry.get("metadata", {})), level))
        return out


class Scorer:
    """The node's own verifier: reasoning-gym's ``score_answer`` for any known family.

    Families the node does not draw itself (a peer's) are scored with that family's default
    config. A question whose family is unknown, or whose verifier raises, is unverifiable:
    :meth:`score` returns None and the caller drops the group.
    """

    honest_reasons = HONEST_REASONS

    def __init__(self, families: Mapping[str, Mapping[str, Any]] | None = None, budget: TokenBudget | None = None):
        self._configs = {n: dict(f["config"]) for n, f in (families or {}).items()}
        self._datasets: dict[str, Any] = {}
        # The tokenizer's checks of a peer's trained form (a node always has them; None skips
        # them, for a scorer that only ever sees text, as some tests' do).
        self.budget = budget

    def _dataset(self, family: str):
        if family not in self._datasets:
            if family not in factory().DATASETS:
                return None
            try:
                self._datasets[family] = _make_dataset(family, self._configs.get(family, {}), 0)
            except TaskConfigError:
                self._datasets[family] = _make_dataset(family, {}, 0)
        return self._datasets[family]

    def score(self, question: Question, response: str) -> float | None:
        """Reward in [0, 1] of one full response (prefilled tag included); None if unverifiable."""
        ds = self._dataset(question.family)
        if ds is None:
            return None
        answer = extract_answer(response)
        if answer is None:
            return 0.0
        try:
            reward = float(ds.score_answer(answer, question.entry()))
        except Exception as exc:  # a verifier is third-party code fed untrusted metadata
            log.debug("verifier %s raised %s: %s", question.family, type(exc).__name__, exc)
            return None
        return min(max(reward, 0.0), 1.0) if reward == reward else 0.0

    def rescore(self, question: Question, response: str) -> tuple[str, float] | str:
        """A peer's full response as this node trains on it and its reward, ``(trained form,
        reward)``, or the reason it is left out (:mod:`swarmnode.train.answers`)."""
        shaped = canonical_response(response)
        if isinstance(shaped, str):
            return shaped
        form, answer = shaped
        if self.budget is not None and (why := self.budget.check(form, answer)) is not None:
            return why
        reward = self.score(question, form)
        if reward is None:
            return "unverifiable"
        # The verifier is a function of the answer it reads: only another answer can score otherwise.
        if extract_answer(response) != answer and self.score(question, response) != reward:
            return "score_changed"
        return form, reward


# A model without a chat template (a base model, such as Gemma 3 270M) continues text: one
# worked example shows it where the answer goes and that the tag closes. Gemma 3 base, greedy,
# 24 questions of six families: mean reward 0.00 without it, 0.23 with it and its BOS
# (docs/performance.md, prompt formats).
BASE_MODEL_EXAMPLE = "Question: What is 2 + 3?\nAnswer: <answer>5</answer>\n\n"


def build_prompt(tokenizer, question: str, prefill_answer_tag: bool) -> str:
    """The prompt text; ends inside ``<answer>`` when prefilling.

    With a chat template: the system prompt and the question as a conversation, the assistant's
    turn open. Without one: the tokenizer's BOS where its own encoding starts with one (Gemma's
    does; the sampler encodes without special tokens), the system prompt, one worked example
    and the question, as plain text.
    """
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        starts = tokenizer("x")["input_ids"][:1]
        bos = tokenizer.bos_token if tokenizer.bos_token and starts == [tokenizer.bos_token_id] else ""
        text = f"{bos}{SYSTEM_PROMPT}\n\n{BASE_MODEL_EXAMPLE}Question: {question}\nAnswer: "
    return text + ANSWER_OPEN if prefill_answer_tag else text


def full_response(completion: str, prefill_answer_tag: bool) -> str:
    """The assistant's whole turn: the prefilled tag, if any, plus the generated text."""
    return ANSWER_OPEN + completion if prefill_answer_tag else completion
