"""The round a catalogue model runs where the config leaves its keys at their defaults."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

import pytest

from swarmnode.catalogue import CATALOGUE, SMOLLM2, model_round
from swarmnode.cli import config as configcmd
from swarmnode.config import NodeConfig, coerce, load_config
from swarmnode.train.tasks import PACKAGED_TASK_SETS, load_task_file

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in [n for n in os.environ if n.startswith("SWARMNODE_")]:
        monkeypatch.delenv(name)


def show_json(argv: list[str], capsys) -> dict:
    parser = argparse.ArgumentParser(prog="swarmnode")
    configcmd.add_parser(parser.add_subparsers())
    args = parser.parse_args(["config", "show", "--json", *argv])
    assert args.func(args) == 0
    return json.loads(capsys.readouterr().out)["keys"]


def test_every_round_is_a_valid_config_with_a_reason():
    for model in CATALOGUE.values():
        for key, value in model.round:
            assert coerce(key, value) == value, (model.name, key)
            if key == "tasks":
                assert value in PACKAGED_TASK_SETS and load_task_file(value)
        assert not model.round or model.round_why, f"{model.name} sets a round without saying why"


def test_the_short_set_is_the_one_the_evidence_was_measured_on():
    """SmolLM2's round claims the equal-nodes and mixed-swarm runs: their task files must be the
    packaged set, family for family, in the same order (the order decides the questions drawn)."""
    short = load_task_file("short")
    for run in ("equal", "mixed"):
        measured = load_task_file(ROOT / "docs" / "experiments" / run / "tasks.toml")
        assert list(measured.items()) == list(short.items()), run


def test_keys_left_at_their_defaults_take_the_model_round(tmp_path, monkeypatch):
    (tmp_path / "config.toml").write_text("[round]\nmax_new_tokens = 32\n", encoding="utf-8")
    monkeypatch.setenv("SWARMNODE_LEARNING_RATE", "0.001")
    loaded = load_config({"home": str(tmp_path), "completions": "6"})
    taken = model_round("embedded", loaded.sources)  # the alias names SmolLM2
    assert taken == {"tasks": "short", "adaptive_difficulty": False}
    untouched = load_config({"home": str(tmp_path / "none")}, environ={}).sources
    assert model_round(SMOLLM2.name, untouched) == dict(SMOLLM2.round)
    assert model_round("auto", loaded.sources) == {}
    assert model_round(str(tmp_path), loaded.sources) == {}  # a local model: the defaults
    assert model_round("qwen2.5-coder-0.5b", loaded.sources) == {}


def test_config_show_says_where_the_round_comes_from(tmp_path, capsys):
    keys = show_json(["--home", str(tmp_path), "--model", "embedded", "--completions", "6"], capsys)
    assert keys["max_new_tokens"] == {"value": 8, "source": "model:smollm2-135m"}
    assert keys["tasks"] == {"value": "short", "source": "model:smollm2-135m"}
    assert keys["completions"] == {"value": 6, "source": "flag:--completions"}
    assert keys["questions"] == {"value": 8, "source": "default"}
    keys = show_json(["--home", str(tmp_path), "--model", "qwen2.5-coder-0.5b"], capsys)
    assert keys["max_new_tokens"] == {"value": NodeConfig().max_new_tokens, "source": "default"}


def test_prepare_applies_the_round_of_the_model_auto_picked(tmp_path, monkeypatch, caplog):
    from swarmnode.node import modelchoice

    monkeypatch.setattr(modelchoice, "this_machine", lambda device: modelchoice.Machine("cpu", 8 << 30, 2))
    monkeypatch.setattr(modelchoice, "log", logging.getLogger("test_model_round"))
    monkeypatch.setattr(modelchoice, "prepare_model", _no_fetch)  # only the config matters here
    loaded = load_config({"home": str(tmp_path), "max_new_tokens": "16"})
    with caplog.at_level(logging.INFO, logger="test_model_round"):
        cfg = modelchoice.prepare(loaded.config, loaded.sources)
    assert (cfg.model, cfg.tasks, cfg.completions, cfg.max_new_tokens) == ("smollm2-135m", "short", 4, 16)
    assert "the round of smollm2-135m" in caplog.text and "max_new_tokens" not in caplog.text
    # without the sources (a fetch only) nothing but the model changes
    assert modelchoice.prepare(loaded.config).tasks is None


class _Source:
    """What prepare_model returns, for a model that is not fetched."""

    entry = None
    name = path = "stub"


def _no_fetch(spec, model_file, dtype):
    return _Source()
