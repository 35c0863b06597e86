"""The experiment's tables: what each CSV holds, and the rows the harness writes to them.

Every table is appended to row by row as the run goes (fsynced, so a killed run loses at most
the round it was in) and cut back to a seed's checkpoint on resume (:func:`truncate_rows`).
The group tables key a question by :func:`question_key`, so a question asked of two nodes
(small task spaces repeat) can be followed from the node that answered it right first.
"""

from __future__ import annotations

import csv
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from swarmnode.records import Group, Question

CSV_FIELDS = ["config", "seed", "node", "round", "reward_mean", "n_external", "seconds", "n_local",
              "n_dropped_zero_adv", "signal_rate", "loss", "bundles_rejected", "levels_up", "model", "n_solved"]
# ``question``: a key of the question's family and text (the same question asked of two nodes has
# one key); ``logp``: the receiver's mean log-prob per token of the group's completions that
# carried advantage, under its policy before the round's update (blank for a group it did not
# train on), beside which its own groups' ``logp`` says how far a peer's completions are from it.
EXTERNAL_FIELDS = ["config", "seed", "node", "model", "round", "sender", "sender_model", "family", "level",
                   "reward_mean", "right", "responses", "question", "logp"]
# A row per group of a node's own rollout: its family, its rewards as the node scored them,
# whether they differ (signal: a group without it is dropped and never drawn by a peer) and
# whether it entered the node's update.
GROUP_FIELDS = ["config", "seed", "node", "model", "round", "family", "level", "reward_mean", "right", "responses",
                "signal", "trained", "question", "logp"]
YARDSTICK_FIELDS = ["config", "seed", "node", "model", "round", "score", "seconds", "by_family"]
# Every table of a run, by file name.
TABLES = {"rounds.csv": CSV_FIELDS, "external.csv": EXTERNAL_FIELDS, "groups.csv": GROUP_FIELDS,
          "yardstick.csv": YARDSTICK_FIELDS}
# Where a row belongs: config, seed, node, model and round.
Where = Mapping[str, object]
# A node's latest update: each group it trained on, with its mean log-prob per token
# (:attr:`swarmnode.train.policy.Policy.last_logprobs`).
Trained = Sequence[tuple[Group, float | None]]


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def append_rows(out: Path, name: str, rows: list[dict]) -> None:
    with open(out / name, "a", newline="") as fh:
        csv.DictWriter(fh, TABLES[name]).writerows(rows)
        fh.flush()
        os.fsync(fh.fileno())


def truncate_rows(out: Path, seed: int, first_round: int) -> None:
    """Drop every table's rows of ``seed`` from ``first_round`` on (they are about to be redone),
    writing each table with its header (and creating any that is missing): a yardstick row's
    round counts the rounds trained, so it goes from ``first_round + 1``."""
    for name, fields in TABLES.items():
        path = out / name
        after = first_round + (name == "yardstick.csv")
        keep = [r for r in read_rows(path)
                if r["config"] == "base" or not (int(r["seed"]) == seed and int(r["round"]) >= after)]
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fields)
            writer.writeheader()
            writer.writerows(keep)
        os.replace(tmp, path)


def question_key(question: Question) -> str:
    """A short key of a question's family and text: the same question asked of two nodes has one key."""
    return hashlib.sha256(f"{question.family}\n{question.question}".encode()).hexdigest()[:12]


def group_row(where: Where, g: Group, trained: Trained) -> dict:
    """The fields every table of groups has: ``where``, the group's family, level and question,
    the rewards the row's node gave it and, when the node trained on it (``trained``), its mean
    log-prob per token under the node's policy before the update."""
    logp = next((lp for t, lp in trained if t is g), None)
    return {**where, "family": g.question.family, "level": "" if g.question.level is None else g.question.level,
            "reward_mean": round(sum(g.rewards) / len(g.rewards), 6), "right": sum(x >= 1.0 for x in g.rewards),
            "responses": len(g.rewards), "question": question_key(g.question),
            "logp": "" if logp is None else round(logp, 4)}


def own_rows(where: Where, groups: Sequence[Group], trained: Trained) -> list[dict]:
    """A node's own groups of a round (what it shared, where J > 0), with whether each had signal
    and whether it entered the update."""
    return [{**group_row(where, g, trained), "signal": int(g.has_signal()),
             "trained": int(any(g is t for t, _ in trained))} for g in groups]


def external_rows(where: Where, drawn: Sequence[Group], trained: Trained,
                  senders: Mapping[str, tuple[int, str]]) -> list[dict]:
    """What a node drew from its peers in a round: one row per group, with its sender (index and
    model, by PeerID in ``senders``) and the rewards the node gave it (a sender's own are never used)."""
    rows = []
    for g in drawn:
        index, model = senders.get(g.source, ("", ""))
        rows.append({**group_row(where, g, trained), "sender": index, "sender_model": model})
    return rows
