import json
import os

import pytest
import torch

from apifakes import finished_row
from swarmnode.config import NodeConfig
from swarmnode.node.checkpoint import CheckpointError, latest_checkpoint, list_checkpoints, restore, save_checkpoint
from swarmnode.node.metrics import MetricsLog
from swarmnode.train.model import load_base_model
from swarmnode.train.policy import Policy


@pytest.fixture()
def policy(tiny_model_dir):
    return Policy(load_base_model(str(tiny_model_dir), torch.device("cpu")), NodeConfig(lora_r=2, lora_alpha=4))


def _perturb(policy, value):
    with torch.no_grad():
        for p in policy.params:
            p.fill_(value)


def test_save_restore_round_trip_and_pruning(tmp_path, policy):
    for r in range(4):
        _perturb(policy, float(r))
        save_checkpoint(tmp_path, r, policy, {"seed": 5}, keep=2)
    expected_draw = torch.rand(3)  # the first draw after the last save
    assert [r for r, _ in list_checkpoints(tmp_path)] == [2, 3]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]
    _perturb(policy, 9.0)
    torch.rand(100)
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt.round == 3 and ckpt.state["seed"] == 5
    restore(ckpt, policy)
    assert all(torch.all(p == 3.0) for p in policy.params)
    assert torch.equal(torch.rand(3), expected_draw)


def test_a_restart_trains_with_the_configs_learning_rate_not_the_saved_one(tmp_path, policy, tiny_model_dir):
    save_checkpoint(tmp_path, 0, policy, {}, keep=2)  # saved at the default 1e-4, no weight decay
    other = Policy(load_base_model(str(tiny_model_dir), torch.device("cpu")),
                   NodeConfig(lora_r=2, lora_alpha=4, learning_rate=2e-4, weight_decay=0.01))
    restore(latest_checkpoint(tmp_path), other)
    assert [(g["lr"], g["weight_decay"]) for g in other.optimizer.param_groups] == \
        [(2e-4, 0.01)] * len(other.optimizer.param_groups)


def test_damaged_newest_checkpoint_falls_back_to_previous(tmp_path, policy, caplog):
    save_checkpoint(tmp_path, 0, policy, {}, keep=3)
    newest = save_checkpoint(tmp_path, 1, policy, {}, keep=3)
    with open(newest / "optimizer.pt", "r+b") as fh:
        fh.seek(10)
        fh.write(b"\x00garbage")
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt.round == 0
    assert "damaged" in caplog.text
    (tmp_path / "round-000000" / "manifest.json").unlink()
    assert latest_checkpoint(tmp_path) is None


def test_unwritable_home_keeps_the_previous_checkpoint(tmp_path, policy):
    save_checkpoint(tmp_path, 0, policy, {})
    if os.geteuid() == 0:
        # root ignores permissions: simulate a full disk instead.
        orig = torch.save

        def full(*a, **k):
            raise OSError(28, "No space left on device")
        torch.save = full
        try:
            with pytest.raises(CheckpointError, match="No space left"):
                save_checkpoint(tmp_path, 1, policy, {})
        finally:
            torch.save = orig
    else:
        os.chmod(tmp_path, 0o500)
        try:
            with pytest.raises(CheckpointError):
                save_checkpoint(tmp_path, 1, policy, {})
        finally:
            os.chmod(tmp_path, 0o700)
    assert latest_checkpoint(tmp_path).round == 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


def test_metrics_truncate_drops_rounds_past_the_checkpoint_and_torn_lines(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    for r in range(3):
        log.append(finished_row(r, 0.1 * r))
    with open(log.path, "a") as fh:
        fh.write('{"round": 3, "rew')
    rows = log.truncate_after(1)
    assert [r.round for r in rows] == [0, 1] and rows[1] == finished_row(1, 0.1)
    assert [json.loads(line)["round"] for line in log.path.read_text().splitlines()] == [0, 1]
    assert log.truncate_after(None) == [] and log.path.read_text() == ""
