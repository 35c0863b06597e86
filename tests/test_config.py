import re
import subprocess
import sys

import pytest

from swarmnode.config import ConfigError, NodeConfig, load_config


def test_defaults_match_the_paper_round():
    cfg = load_config({}, environ={}, config_path=None).config
    assert (cfg.questions, cfg.completions, cfg.max_new_tokens, cfg.local, cfg.external) == (8, 8, 256, 4, 4)
    assert (cfg.eps_low, cfg.eps_high, cfg.temperature) == (0.2, 0.28, 1.0)


def test_precedence_flag_over_env_over_file(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text('questions = 3\ncompletions = 5\n[swarm]\nswarm = "filed"\n')
    loaded = load_config({"questions": "7"}, config_path=f,
                         environ={"SWARMNODE_QUESTIONS": "6", "SWARMNODE_COMPLETIONS": "4"})
    cfg = loaded.config
    assert (cfg.questions, cfg.completions, cfg.swarm) == (7, 4, "filed")
    assert loaded.sources["questions"] == "flag:--questions"
    assert loaded.sources["completions"] == "env:SWARMNODE_COMPLETIONS"
    assert loaded.sources["swarm"] == f"file:{f}"
    assert loaded.sources["model"] == "default"


def test_home_config_file_is_found(tmp_path):
    (tmp_path / "config.toml").write_text("seed = 11\n")
    loaded = load_config({"home": str(tmp_path)}, environ={})
    assert loaded.config.seed == 11 and loaded.file == tmp_path / "config.toml"


@pytest.mark.parametrize("text, key", [
    ("questionz = 3\n", "questionz"),
    ("questions = 'many'\n", "questions"),
    ("questions = 0\n", "questions"),
    ("transport = 'pigeon'\n", "transport"),
    ("solo = 'yes'\n", "solo"),
    ("bootstrap = 'one'\n", "bootstrap"),
])
def test_bad_file_values_name_the_key(tmp_path, text, key):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config({}, config_path=f, environ={})
    assert err.value.key == key and key in str(err.value) and str(f) in str(err.value)


@pytest.mark.parametrize("text, says", [
    ("questions = 'many'\n", "expected an integer, got 'many'"),
    ("questions = true\n", "expected an integer, got True"),
    ("temperature = 'hot'\n", "expected a number, got 'hot'"),
    ("solo = 1\n", "expected true or false, got 1"),
    ("bootstrap = ['a', 2]\n", "expected a list of strings, got ['a', 2]"),
    ("swarm = 3\n", "expected a string, got 3"),
    ("rounds = 'ten'\n", "expected an integer, got 'ten'"),  # an optional key: its type all the same
])
def test_a_value_of_the_wrong_type_says_what_the_key_expects(tmp_path, text, says):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(says)):
        load_config({}, config_path=f, environ={})


def test_a_file_number_is_a_float_where_the_key_is_one(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("temperature = 1\nrounds = 3\n")
    cfg = load_config({}, config_path=f, environ={}).config
    assert type(cfg.temperature) is float and cfg.temperature == 1.0 and cfg.rounds == 3


def test_bad_env_value_names_the_variable():
    with pytest.raises(ConfigError, match="SWARMNODE_MAX_NEW_TOKENS"):
        load_config({}, environ={"SWARMNODE_MAX_NEW_TOKENS": "lots"})


@pytest.mark.slow
def test_cli_exits_2_with_one_line_naming_the_key(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("completions = -1\n")
    proc = subprocess.run([sys.executable, "-m", "swarmnode", "start", "--solo", "--config", str(f)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "completions" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_start_refuses_a_transport_that_is_not_a_network_in_one_line(tmp_path):
    """The in-process test transport once passed the config and crashed ``start`` with a traceback."""
    proc = subprocess.run([sys.executable, "-m", "swarmnode", "start", "--home", str(tmp_path), "--transport",
                           "memory"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("swarmnode: config key 'transport' (from flag:--transport): expected one of "
                                   "hivemind, libp2p; got 'memory'")


def test_invalid_toml_is_a_config_error(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("questions = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config({}, config_path=f, environ={})


def test_every_key_has_help():
    assert all(f.metadata["help"] for f in NodeConfig.keys())
