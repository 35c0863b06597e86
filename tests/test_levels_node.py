"""Levels, signal rate and yardstick in a node's round, checkpoint and restart (tiny model)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from swarmnode.config import NodeConfig
from swarmnode.node.checkpoint import latest_checkpoint, save_checkpoint
from swarmnode.node.round import Node, RoundAbandoned, signal_rates
from swarmnode.node.state import NodeState
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


@pytest.fixture
def make_node(tiny_model_dir, tmp_path):
    task_file = tmp_path / "tasks.toml"
    task_file.write_text(f'[{FAMILY}]\nweight = 1.0\ntasks = ["is_leap_year"]\n')
    families = load_task_file(task_file)
    cfg = replace(NodeConfig(), solo=True, questions=WINDOW, completions=2, max_new_tokens=4, eval_every=1)
    base = load_base_model(str(tiny_model_dir), torch.device("cpu"))

    def make(scorer: Scorer | None = None) -> Node:
        state = NodeState()
        return Node(cfg, NodeHome(tmp_path / "home").create(), Policy(base, cfg), TaskSource(families, 1),
                    scorer or Scorer(families), SoloLink(), state, 1, levels=Levels(families))

    return make


def test_a_round_records_its_levels_and_a_finished_round_moves_and_checkpoints_them(make_node):
    node = make_node(AlwaysRight())
    start = level_range(FAMILY)[0]
    assert node.levels.level(FAMILY) == start
    row = node.run_round(0)
    assert row.levels == {FAMILY: start}
    assert row.level_moves == {FAMILY: start + 1}
    assert row.signal_rate == 0.0 and row.signal_rate_local == 0.0 and row.signal_rate_external is None
    assert node.levels.level(FAMILY) == start  # not committed until the round is finished
    node.finish_round(row)
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
    node.resume()
    assert node.yardstick_due()
    record = node.run_yardstick()
    assert record.round == 0 and record.questions > 0 and 0.0 <= record.score <= 1.0
    low = level_range(FAMILY)[0]
    assert set(record.by_level) == {f"{FAMILY}:{lv}" for lv in range(low, low + yardstick.LEVELS)}
    assert record.questions == yardstick.LEVELS * yardstick.PER_LEVEL
    assert not node.yardstick_due() and node.state.yardstick == [record.to_json()]
    assert YardstickRecord.from_json(json.loads(node.home.yardstick_file.read_text())) == record
    # same adapter, greedy decoding: the same score
    assert node.run_yardstick().score == record.score
    again = make_node()
    again.resume()
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
    node.resume()
    assert node.run_yardstick(should_stop=lambda: True) is None
    assert node.state.yardstick == [] and node.yardstick_due() and not node.home.yardstick_file.exists()
