"""Levels, signal rate and yardstick in a node's round, checkpoint and restart (tiny model)."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import replace

import pytest
import torch

from swarmnode.config import NodeConfig
from swarmnode.node import yardsticks
from swarmnode.node.checkpoint import latest_checkpoint, save_checkpoint
from swarmnode.node.round import ROUND_PHASES, Node, RoundAbandoned, signal_rates
from swarmnode.node.state import NodeState
from swarmnode.node.yardsticks import YardstickClock, YardstickSchedule
from swarmnode.paths import NodeHome
from swarmnode.records import Group, Question, YardstickRecord
from swarmnode.swarm.link import SoloLink
from swarmnode.train import yardstick
from swarmnode.train.curriculum import WINDOW, Levels, level_range
from swarmnode.train.model import load_base_model
from swarmnode.train.policy import Policy
from swarmnode.train.tasks import Scorer, TaskSource, load_task_file

FAMILY = "calendar_arithmetic"


class AlwaysRight(Scorer):
    """Every response scores 1.0: the family is too easy, so its level must climb."""

    def score(self, question, response):
        return 1.0


class TextHash(Scorer):
    """A reward that is a function of the response's text: equal scores mean equal responses, and
    a group's different completions differ in reward, so every round trains."""

    def score(self, question, response):
        return int(hashlib.sha256(response.encode()).hexdigest(), 16) % 5 / 4


def resumed(node: Node, clock: YardstickClock | None = None) -> YardstickSchedule:
    """Resume ``node`` with its yardstick's schedule following it, as the daemon does."""
    schedule = YardstickSchedule(node, clock)
    node.state.listen(schedule)
    node.resume()
    schedule.restore()
    return schedule


@pytest.fixture
def make_node(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMNODE_CACHE", str(tmp_path / "cache"))  # the untrained yardstick's cache
    task_file = tmp_path / "tasks.toml"
    task_file.write_text(f'[{FAMILY}]\nweight = 1.0\ntasks = ["is_leap_year"]\n')
    families = load_task_file(task_file)
    cfg = replace(NodeConfig(), solo=True, questions=WINDOW, completions=2, max_new_tokens=4, eval_every=1)
    base = load_base_model(str(tiny_model_dir), torch.device("cpu"))

    def make(scorer: Scorer | None = None, home: str = "home", **overrides) -> Node:
        state = NodeState()
        node_cfg = replace(cfg, **overrides)
        return Node(node_cfg, NodeHome(tmp_path / home).create(), Policy(base, node_cfg), TaskSource(families, 1),
                    scorer or Scorer(families), SoloLink(), state, 1, levels=Levels(families))

    return make


def test_a_round_records_its_levels_and_a_finished_round_moves_and_checkpoints_them(make_node):
    node = make_node(AlwaysRight())
    heard: list = []
    node.state.listen(heard.append)
    start = level_range(FAMILY)[0]
    assert node.levels.level(FAMILY) == start
    row = node.run_round(0)
    assert [type(e).__name__ for e in heard] == ["RoundStarted", *["PhaseChanged"] * len(ROUND_PHASES)]
    assert tuple(e.phase for e in heard[1:]) == ROUND_PHASES
    assert row.levels == {FAMILY: start}
    assert row.level_moves == {FAMILY: start + 1}
    assert row.signal_rate == 0.0 and row.signal_rate_local == 0.0 and row.signal_rate_external is None
    assert node.levels.level(FAMILY) == start  # not committed until the round is finished
    levels = node.levels  # what the exchange's level-aware draw holds
    node.finish_round(row)
    assert node.levels is levels  # moved in place: that draw reads the new levels
    assert [type(e).__name__ for e in heard[-2:]] == ["RoundFinished", "LevelsNow"] and heard[-2].record == row
    assert node.levels.level(FAMILY) == start + 1 and node.state.levels == {FAMILY: start + 1}
    assert latest_checkpoint(node.home.checkpoints).state["levels"][FAMILY]["level"] == start + 1
    # a restarted node (kill -9 after the checkpoint) comes back at the level it reached
    again = make_node()
    assert again.resume() == 1 and again.levels.level(FAMILY) == start + 1
    assert again.run_round(1).levels == {FAMILY: start + 1}


def test_an_abandoned_round_leaves_the_levels_and_a_redone_round_draws_the_same_questions(make_node):
    node = make_node(AlwaysRight())
    before = node.tasks.sample(0, WINDOW, node.levels.levels)
    with pytest.raises(RoundAbandoned):
        node.run_round(0, should_stop=lambda: True)
    assert node.levels.level(FAMILY) == level_range(FAMILY)[0]
    assert node.tasks.sample(0, WINDOW, node.levels.levels) == before


def test_a_damaged_level_record_falls_back_to_the_previous_checkpoint(make_node):
    node = make_node(AlwaysRight())
    node.finish_round(node.run_round(0))
    save_checkpoint(node.home.checkpoints, 1, node.policy, {"seed": 1, "levels": {FAMILY: {"level": "high"}}})
    assert latest_checkpoint(node.home.checkpoints).round == 0
    again = make_node()
    assert again.resume() == 1 and again.levels.level(FAMILY) == level_range(FAMILY)[0] + 1


def test_a_checkpoint_from_before_levels_resumes_at_the_start_levels(make_node):
    node = make_node()
    save_checkpoint(node.home.checkpoints, 0, node.policy, {"seed": 1, "model": "tiny"})
    again = make_node()
    assert again.resume() == 1 and again.levels.level(FAMILY) == level_range(FAMILY)[0]


def test_the_yardstick_is_recorded_once_per_due_round_and_survives_a_restart(make_node):
    node = make_node()
    schedule = resumed(node)
    assert schedule.due()
    record = schedule.run()
    assert record.round == 0 and record.questions > 0 and 0.0 <= record.score <= 1.0
    low = level_range(FAMILY)[0]
    assert set(record.by_level) == {f"{FAMILY}:{lv}" for lv in range(low, low + yardstick.LEVELS)}
    assert record.questions == yardstick.LEVELS * yardstick.PER_LEVEL
    assert not schedule.due() and node.state.yardstick == [record.to_json()]
    assert schedule.run() is None  # nothing due
    assert YardstickRecord.from_json(json.loads(node.home.yardstick_file.read_text())) == record
    # same adapter, greedy decoding: the same score
    assert yardstick.score_yardstick(node.policy, node.scorer, yardstick.yardstick_questions(node.tasks.spec)
                                     )["by_level"] == record.by_level
    again = make_node()
    resumed(again)
    assert [r["round"] for r in again.state.yardstick] == [0]


def test_signal_rates_count_local_and_external_groups():
    q = Question("bf", "q", "a")
    flat, varied = Group(q, ["a", "b"], [0.0, 0.0]), Group(q, ["a", "b"], [0.0, 1.0])
    ext = Group(q, ["a", "b"], [1.0, 0.5], source="peer")
    assert signal_rates([flat, varied, flat, varied], [ext, ext]) == {
        "signal_rate": 4 / 6, "signal_rate_local": 0.5, "signal_rate_external": 1.0}
    assert signal_rates([], []) == {"signal_rate": None, "signal_rate_local": None, "signal_rate_external": None}


def test_swarmnode_eval_scores_the_newest_checkpoint_or_the_untrained_policy(make_node, tiny_model_dir, tmp_path,
                                                                              capsys):
    from swarmnode.cli import main

    node = make_node(AlwaysRight())
    node.finish_round(node.run_round(0))
    common = ["--home", str(node.home.root), "--model", str(tiny_model_dir), "--tasks", str(tmp_path / "tasks.toml"),
              "--device", "cpu"]
    assert main(["eval", "--json", *common]) == 0
    trained = json.loads(capsys.readouterr().out)
    assert trained["round"] == 1 and trained["checkpoint"].endswith("round-000000")
    assert trained["questions"] == yardstick.LEVELS * yardstick.PER_LEVEL
    assert main(["eval", "--untrained", *common]) == 0
    out = capsys.readouterr().out
    assert out.startswith("yardstick after 0 rounds:") and f"{FAMILY}" in out
    assert main(["eval", *common[:2], "--tasks", str(tmp_path / "missing.toml")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_a_stop_request_abandons_the_yardstick_and_records_nothing(make_node):
    node = make_node()
    schedule = resumed(node)
    assert schedule.run(should_stop=lambda: True) is None
    assert node.state.yardstick == [] and schedule.due() and not node.home.yardstick_file.exists()


def test_the_untrained_yardstick_is_measured_once_per_model_and_task_mix(make_node, tmp_path, tiny_model_dir,
                                                                         monkeypatch):
    first = make_node(TextHash())
    first_schedule = resumed(first)
    measured = first_schedule.run()
    assert measured.round == 0 and not first_schedule.cached
    assert len(list((tmp_path / "cache" / "yardsticks").glob("untrained-*.json"))) == 1

    again = make_node(TextHash(), home="other")
    schedule = resumed(again)

    def no_decoding(*args, **kwargs):
        raise AssertionError("the untrained score was in the cache")

    monkeypatch.setattr(again.policy, "generate", no_decoding)
    kept = schedule.between_rounds()  # before round 0, with no yardstick time earned yet
    assert schedule.cached and (kept.round, kept.by_level, kept.score) == (0, measured.by_level, measured.score)
    assert [r["round"] for r in again.state.yardstick] == [0]


def test_the_untrained_yardstick_key_sees_the_model_the_tasks_and_the_definition(make_node, tmp_path, monkeypatch):
    from tinymodel import build_tiny_model

    node = make_node()
    questions = yardstick.yardstick_questions(node.tasks.spec)
    key = yardstick.untrained_key(node.policy, questions)
    assert yardstick.untrained_key(node.policy, questions) == key
    other_model = Policy(load_base_model(str(build_tiny_model(tmp_path / "other-model", seed=1)), torch.device("cpu")),
                         node.cfg)
    assert yardstick.untrained_key(other_model, questions) != key
    other_tasks = yardstick.yardstick_questions(load_task_file("laptop"))
    assert yardstick.untrained_key(node.policy, other_tasks) != key
    monkeypatch.setattr(yardstick, "ANSWER_SLACK", yardstick.ANSWER_SLACK + 1)  # another token cap
    assert yardstick.untrained_key(node.policy, questions) != key
    monkeypatch.setattr(yardstick, "VERSION", yardstick.VERSION + 1)
    assert yardstick.untrained_key(node.policy, questions) != key

    yardstick.store_untrained(key, {"score": 0.5})
    assert yardstick.cached_untrained(key) == {"score": 0.5}
    assert yardstick.cached_untrained("f" * 64) is None
    path = next((tmp_path / "cache" / "yardsticks").glob("untrained-*.json"))
    path.write_text("{torn")
    assert yardstick.cached_untrained(key) is None
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind


class OneQuestionAGap(YardstickClock):
    """Every gap may run a piece, and no more than its first question fits."""

    def gap(self) -> float:
        return 0.0

    def may_run(self, estimate: float | None) -> bool:
        return True


def test_a_yardstick_is_taken_in_pieces_between_rounds_of_the_adapter_it_was_due_for(make_node, monkeypatch):
    monkeypatch.setattr(yardstick, "MAX_NEW_TOKENS", 8)  # the tiny model never closes its answer: keep it short
    node = make_node(TextHash(), eval_every=8, learning_rate=0.05)
    schedule = resumed(node, OneQuestionAGap())
    questions = yardstick.yardstick_questions(node.tasks.spec)
    reference = {0: yardstick.score_yardstick(node.policy, node.scorer, questions)}
    records, pieces = {}, []
    for r in range(2 * 8):
        if node.next_round == 8:
            reference[8] = yardstick.score_yardstick(node.policy, node.scorer, questions)
        record = schedule.between_rounds()
        pieces.append(schedule.pending)
        if record is not None:
            records[record.round] = record
        node.finish_round(node.run_round(r))
    n = len(questions)
    assert pieces == [0] * (n - 1) + [None] * (8 - n + 1) + [8] * (n - 1) + [None] * (8 - n + 1)
    assert set(records) == {0, 8}
    assert records[0].by_level == reference[0]["by_level"]
    assert records[8].by_level == reference[8]["by_level"]  # though training went on meanwhile
    assert reference[8]["by_level"] != reference[0]["by_level"]  # and changed the policy's answers


def test_the_yardstick_waits_for_time_earned_by_rounds(make_node):
    node = make_node(eval_every=1)
    schedule = resumed(node)
    assert schedule.between_rounds() is None  # round 0 does not wait: no yardstick time earned yet
    assert (schedule.pending, schedule.clock.spent_s) == (0, 0.0)
    node.finish_round(node.run_round(0))  # its RoundFinished earns the schedule's clock its share
    assert schedule.clock.rounds_s > 0
    schedule.between_rounds()
    assert schedule.clock.spent_s > 0  # earned by round 0: at least one question


def test_the_yardstick_clock_gives_a_share_of_the_rounds_time_and_caps_each_gap():
    clock = YardstickClock(share=0.05)
    assert clock.gap() == 0.0 and not clock.may_run(None) and not clock.may_run(0.1)
    clock.round_done(100.0)
    assert clock.gap() == pytest.approx(5.0) and clock.may_run(None) and clock.may_run(4.0)
    assert not clock.may_run(6.0)  # more than the credit
    clock.spent(7.0)  # an overrun is paid back before the next piece
    assert clock.credit == pytest.approx(-2.0) and clock.gap() == 0.0 and not clock.may_run(None)
    clock.round_done(100.0)
    assert clock.credit == pytest.approx(3.0) and clock.gap() == pytest.approx(3.0)
    for _ in range(10):
        clock.round_done(20.0)
    assert clock.gap() == pytest.approx(1.0)  # 5 % of the last round, though the credit is larger
    assert clock.credit == pytest.approx(13.0)


def test_a_yardstick_that_cannot_run_is_one_warning_and_the_node_trains_on(make_node, monkeypatch, caplog):
    def broken(families):
        raise RuntimeError("generator exploded")

    monkeypatch.setattr(yardsticks, "yardstick_questions", broken)
    node = make_node()
    schedule = resumed(node)
    with caplog.at_level(logging.WARNING):
        assert schedule.between_rounds() is None
        assert schedule.between_rounds() is None
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "yardstick after 0 rounds not taken: its questions could not be made (RuntimeError: generator exploded)"]
    assert not schedule.due()
    node.finish_round(node.run_round(0))
    assert node.next_round == 1


def test_a_stop_while_a_yardstick_is_pending_is_one_warning(make_node, caplog):
    node = make_node()
    schedule = resumed(node)
    schedule.between_rounds()
    assert schedule.pending == 0
    with caplog.at_level(logging.WARNING):
        schedule.abandon()
        schedule.abandon()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "not finished: the node stopped" in warnings[0]
    assert schedule.pending is None and node.state.yardstick == []
