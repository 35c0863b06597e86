"""`swarmnode start --solo` on the embedded model, as separate OS processes: rounds, adapter, resume."""

import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from programs import output

TINY = ["--questions", "2", "--completions", "2", "--max-new-tokens", "6", "--local", "2", "--external", "0"]
KEYS = {"round", "started_at", "seconds", "reward_mean", "reward_by_task", "n_local", "n_external",
        "n_dropped_zero_adv", "tokens_generated", "loss", "peers"}


def _start(home, *extra):
    return [sys.executable, "-m", "swarmnode", "start", "--solo", "--home", str(home), "--threads", "1",
            *TINY, *extra]


def _rounds(home):
    path = home / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["round"] for line in path.read_text().splitlines() if line.endswith("}")]


pytestmark = pytest.mark.slow


def test_solo_rounds_adapter_and_resume_after_kill(tmp_path):
    home = tmp_path / "node"
    proc = subprocess.run(_start(home, "--rounds", "2"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (home / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1]
    assert all(KEYS <= set(r) for r in rows)
    assert all(r["tokens_generated"] > 0 and r["peers"] == 0 and r["n_external"] == 0 for r in rows)
    assert (home / "identity.key").stat().st_mode & 0o077 == 0
    assert list((home / "logs").glob("swarmnode.log*"))

    # The saved adapter loads with plain PEFT in a fresh process, while the next run goes on (a
    # copy of it: that run may prune round 1's checkpoint once it has written two newer ones).
    adapter = tmp_path / "adapter-round-1"
    shutil.copytree(home / "checkpoints" / "round-000001" / "adapter", adapter)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        lora_parameters = pool.submit(output, "load_adapter", adapter, timeout=300)

        # Kill -9 in the middle of the next run's second round, then restart: numbering continues.
        victim = subprocess.Popen(_start(home, "--rounds", "10"), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        deadline = time.time() + 300
        while len(_rounds(home)) < 3 and time.time() < deadline and victim.poll() is None:
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        assert int(lora_parameters.result().splitlines()[-1]) > 0
    done_before = _rounds(home)
    assert done_before[:3] == [0, 1, 2]

    proc = subprocess.run(_start(home, "--rounds", "2"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rounds = _rounds(home)
    assert rounds == list(range(len(rounds))), rounds     # no duplicate, no gap
    assert len(rounds) == len(done_before) + 2 or len(rounds) == len(done_before) + 1
    assert "resumed from" in proc.stderr


def test_sigterm_stops_cleanly_with_exit_0(tmp_path):
    home = tmp_path / "node"
    proc = subprocess.Popen(_start(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not _rounds(home) and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    rounds = _rounds(home)
    assert rounds and rounds == list(range(len(rounds)))
    assert "Traceback" not in err


def test_hub_id_without_internet_is_one_clear_line(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(_start(tmp_path / "n", "--model", "no-such-org/no-such-model", "--rounds", "1"),
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2
    assert "unknown model 'no-such-org/no-such-model'" in proc.stderr and "Traceback" not in proc.stderr
