"""`swarmnode config show` and `swarmnode config init`."""

from __future__ import annotations

import argparse
import json
import os

import pytest

from swarmnode.cli import config as configcmd
from swarmnode.config import ConfigError, NodeConfig, coerce, load_config, read_toml


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="swarmnode")
    configcmd.add_parser(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in [n for n in os.environ if n.startswith("SWARMNODE_")]:
        monkeypatch.delenv(name)


def test_show_json_reports_value_and_source_of_each_layer(tmp_path, monkeypatch, capsys):
    (tmp_path / "config.toml").write_text('[round]\ncompletions = 6\nquestions = 5\n', encoding="utf-8")
    monkeypatch.setenv("SWARMNODE_QUESTIONS", "4")
    assert run(["config", "show", "--json", "--home", str(tmp_path), "--max-new-tokens", "64"]) == 0
    data = json.loads(capsys.readouterr().out)
    keys = data["keys"]
    assert data["file"] == str(tmp_path / "config.toml")
    assert data["home"] == str(tmp_path.resolve())
    assert keys["max_new_tokens"] == {"value": 64, "source": "flag:--max-new-tokens"}
    assert keys["questions"] == {"value": 4, "source": "env:SWARMNODE_QUESTIONS"}
    assert keys["completions"] == {"value": 6, "source": f"file:{tmp_path / 'config.toml'}"}
    assert keys["temperature"] == {"value": 1.0, "source": "default"}
    assert set(keys) == {f.name for f in NodeConfig.keys()}


def test_show_text_has_one_line_per_key_with_source(tmp_path, capsys):
    assert run(["config", "show", "--home", str(tmp_path), "--solo"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()
             if line and not line.startswith(("[", "config", "node"))}
    assert set(lines) == {f.name for f in NodeConfig.keys()}
    assert lines["solo"].split()[1:] == ["true", "flag:--solo"]
    assert lines["rounds"].split()[1:] == ["(unset)", "default"]
    assert "config file: (none)" in out


def test_show_rejects_bad_values_with_config_error(tmp_path):
    with pytest.raises(ConfigError, match="max_new_tokens"):
        run(["config", "show", "--home", str(tmp_path), "--max-new-tokens", "zero"])


def test_init_writes_a_file_that_loads_as_the_defaults(tmp_path, capsys):
    assert run(["config", "init", "--home", str(tmp_path)]) == 0
    path = tmp_path / "config.toml"
    assert str(path) in capsys.readouterr().out
    assert read_toml(path) == {}  # everything is commented out
    loaded = load_config({"home": str(tmp_path)}, environ={})
    assert loaded.file == path
    assert loaded.config == NodeConfig(home=str(tmp_path))


def test_init_lists_every_key_and_uncommenting_gives_the_default(tmp_path):
    text = configcmd.render_init()
    defaults = NodeConfig()
    for f in NodeConfig.keys():
        line = next(ln for ln in text.splitlines() if ln.startswith(f"# {f.name} = "))
        if getattr(defaults, f.name) is None:
            assert "unset by default" in line
            continue
        path = tmp_path / f"{f.name}.toml"
        path.write_text(line[2:] + "\n", encoding="utf-8")
        [(key, value)] = read_toml(path).items()
        assert coerce(key, value) == getattr(defaults, f.name)
        assert f.metadata["help"].split()[0] in text


def test_init_refuses_to_overwrite_without_force(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("questions = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="--force"):
        run(["config", "init", "--home", str(tmp_path)])
    assert path.read_text(encoding="utf-8") == "questions = 3\n"
    assert run(["config", "init", "--home", str(tmp_path), "--force"]) == 0
    assert path.read_text(encoding="utf-8") == configcmd.render_init()


def test_init_uses_swarmnode_home_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMNODE_HOME", str(tmp_path / "h"))
    assert run(["config", "init"]) == 0
    assert (tmp_path / "h" / "config.toml").is_file()


def test_init_into_an_unwritable_place_is_a_config_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot write"):
        run(["config", "init", "--home", str(blocker / "home")])
