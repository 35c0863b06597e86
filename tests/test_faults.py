"""Faults a desktop node meets: a full disk, and config, identity, checkpoint and metrics files
that are corrupt or edited by hand. Each ends in one clear line naming the file, never a traceback;
what can be recovered from is, and nothing already saved is lost.

Every case runs ``swarmnode start`` as its own process, as a user would; independent cases run
side by side.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nodeproc import metric_rounds, start_argv, write_signal_tasks
from programs import argv
from swarmnode.node.checkpoint import latest_checkpoint, list_checkpoints
from swarmnode.swarm.identity import Identity

# One worker in a parallel run (--dist loadgroup): the module's trained home is built once, not once a worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_faults")]


def _run_all(cases: dict[str, list[str]], timeout: float = 300) -> dict[str, subprocess.CompletedProcess]:
    """Run independent commands side by side; their results by case name."""
    procs = {name: subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, argv in cases.items()}
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=timeout)
        results[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return results


def _one_clear_line(err: str, *must_name: str) -> str:
    """The ``swarmnode: ...`` error line of ``err``; asserts there is no traceback and it names the files."""
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("swarmnode: ")]
    assert len(lines) == 1, err[-3000:]
    for name in must_name:
        assert name in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def trained_home(tmp_path_factory, tiny_model_dir):
    """A node home after two rounds: checkpoints of rounds 0 and 1, metrics rows 0 and 1."""
    root = tmp_path_factory.mktemp("trained")
    home = root / "home"
    tasks = write_signal_tasks(root / "tasks.toml")
    argv = start_argv(home, tiny_model_dir, "--solo", "--tasks", str(tasks), "--rounds", "2")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert metric_rounds(home) == [0, 1]
    return home, tasks


def _copy_home(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _snapshot(ckpt_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(ckpt_dir)): p.read_bytes() for p in sorted(ckpt_dir.rglob("*")) if p.is_file()}


# ---- disk full, home not writable ----------------------------------------------------------

def _limit_file_size(limit: int):
    def preexec() -> None:
        # Writes past the limit then fail with EFBIG, as on a full disk; the signal would kill instead.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


def test_checkpoint_write_failure_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, trained_home,
                                                                               tiny_model_dir):
    home = _copy_home(trained_home[0], tmp_path / "home")
    before = _snapshot(home / "checkpoints")
    # 32 KiB: api.json, log lines and metrics rows fit; the adapter file (about 60 KiB) does not.
    argv = start_argv(home, tiny_model_dir, "--solo", "--tasks", str(trained_home[1]), "--rounds", "3")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          preexec_fn=_limit_file_size(32 * 1024))
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = _one_clear_line(proc.stderr, str(home / "checkpoints"), "round 2")
    assert "previous checkpoint is intact" in line
    assert _snapshot(home / "checkpoints") == before  # nothing changed, no temporary directory left
    assert latest_checkpoint(home / "checkpoints").round == 1


def test_disk_full_mid_run_stops_cleanly_and_resumes_once_space_is_back(tmp_path, trained_home, tiny_model_dir):
    mount = tmp_path / "small-disk"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.decode().strip()}); the file-size-limit test "
                    "covers the same failure")
    try:
        home = _copy_home(trained_home[0], mount / "home")
        argv = start_argv(home, tiny_model_dir, "--solo", "--tasks", str(trained_home[1]))
        node = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 300
        # The metrics row is written before the round's checkpoint, so wait for the checkpoint itself.
        while latest_checkpoint(home / "checkpoints").round < 3:  # the copy starts at round 1
            assert node.poll() is None and time.time() < deadline, node.stderr.read()[-3000:]
            time.sleep(0.05)
        # Fill the disk while the node runs. Unbuffered: a buffered file would raise the same
        # ENOSPC again when closing, on whatever part of the last write it still held.
        with open(mount / "filler", "wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"\0" * 65536)
            except OSError:
                pass
        _, err = node.communicate(timeout=120)
        assert node.returncode == 1, err[-3000:]
        _one_clear_line(err, str(home))
        saved = latest_checkpoint(home / "checkpoints")
        assert saved is not None and saved.round >= 3
        assert not [p for p in (home / "checkpoints").iterdir() if p.name.startswith(".tmp")]

        (mount / "filler").unlink()
        again = subprocess.run([*argv, "--rounds", "1"], capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        assert f"next round is {saved.round + 1}" in again.stderr
        assert metric_rounds(home) == list(range(saved.round + 2))
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_home_that_cannot_be_created_is_one_line(tmp_path, tiny_model_dir):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    proc = subprocess.run(start_argv(blocker / "home", tiny_model_dir, "--solo", "--rounds", "1"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    _one_clear_line(proc.stderr, str(blocker / "home"), "--home")


# ---- corrupt or hand-edited config and identity files ---------------------------------------

_CONFIGS = {
    "bad-toml": ("questions = [1, 2\n", "config.toml"),
    "unknown-key": ("questoins = 4\n", "questoins"),
    "wrong-type": ('questions = "many"\n', "questions"),
}


def _valid_key(path: Path) -> bytes:
    return Identity.load_or_create(path).private_key_protobuf()


def test_corrupt_config_and_identity_files_are_one_line_naming_the_file(tmp_path, tiny_model_dir):
    cases, expect = {}, {}
    for name, (text, key) in _CONFIGS.items():
        home = tmp_path / name
        home.mkdir()
        (home / "config.toml").write_text(text)
        cases[name] = start_argv(home, tiny_model_dir, "--solo", "--rounds", "1")
        expect[name] = (2, [str(home / "config.toml"), key])

    good = _valid_key(tmp_path / "good.key")
    identities = {
        "key-truncated": (good[:40], 0o600),
        "key-garbage": (os.urandom(68), 0o600),
        "key-empty": (b"", 0o600),
        "key-mode-0644": (good, 0o644),
    }
    for name, (data, mode) in identities.items():
        home = tmp_path / name
        home.mkdir()
        key = home / "identity.key"
        key.write_bytes(data)
        key.chmod(mode)
        cases[name] = start_argv(home, tiny_model_dir, "--solo", "--rounds", "1")
        expect[name] = (1, [str(key)])

    results = _run_all(cases)
    for name, proc in results.items():
        status, named = expect[name]
        assert proc.returncode == status, (name, proc.stderr[-3000:])
        _one_clear_line(proc.stderr, *named)
    assert "chmod 600" in results["key-mode-0644"].stderr
    # A refused key is left as it was: the user decides what to do with it.
    assert (tmp_path / "key-mode-0644" / "identity.key").read_bytes() == good


# ---- damaged checkpoints and metrics: warn, fall back, run on --------------------------------

def _flip_byte(path: Path, offset: int = 100) -> None:
    data = bytearray(path.read_bytes())
    data[min(offset, len(data) - 1)] ^= 0xFF
    path.write_bytes(bytes(data))


def test_damaged_checkpoints_and_metrics_warn_fall_back_and_run_on(tmp_path, trained_home, tiny_model_dir):
    src, tasks = trained_home
    newest = "checkpoints/round-000001"
    edits = {
        "adapter-edited": lambda h: _flip_byte(h / newest / "adapter" / "adapter_model.safetensors"),
        "state-edited": lambda h: (h / newest / "state.json").write_text('{"round": 7, "seed": 1}'),
        "manifest-deleted": lambda h: (h / newest / "manifest.json").unlink(),
        "metrics-garbage-and-torn": lambda h: h.joinpath("metrics.jsonl").write_text(
            "\x00\xffnot json\n" + h.joinpath("metrics.jsonl").read_text() + '[1, 2]\n{"round": 2, "lo'),
        "metrics-duplicated-row": lambda h: h.joinpath("metrics.jsonl").write_text(
            h.joinpath("metrics.jsonl").read_text() * 2),
    }
    cases = {}
    for name, edit in edits.items():
        home = _copy_home(src, tmp_path / name)
        edit(home)
        cases[name] = start_argv(home, tiny_model_dir, "--solo", "--tasks", str(tasks), "--rounds", "1")
    results = _run_all(cases)

    for name, proc in results.items():
        home = tmp_path / name
        assert proc.returncode == 0, (name, proc.stderr[-3000:])
        assert "Traceback" not in proc.stderr, (name, proc.stderr[-3000:])
        if name.startswith("metrics"):
            assert "next round is 2" in proc.stderr, name
            assert metric_rounds(home) == [0, 1, 2], name
        else:  # round 1's checkpoint is refused by name; the node falls back to round 0 and redoes round 1
            warning = [line for line in proc.stderr.splitlines() if "is damaged" in line]
            assert warning and str(home / newest) in warning[0], (name, proc.stderr[-3000:])
            assert "next round is 1" in proc.stderr, name
            assert metric_rounds(home) == [0, 1], name
            assert [r for r, _ in list_checkpoints(home / "checkpoints")] == [0, 1]
            assert latest_checkpoint(home / "checkpoints").round == 1  # rewritten whole
    assert "is not a metrics row" in results["metrics-garbage-and-torn"].stderr


def test_a_crash_while_creating_the_identity_leaves_no_half_written_key(tmp_path):
    key = tmp_path / "identity.key"
    # The process dies right after opening the new key file, before writing a byte.
    proc = subprocess.run(argv("identity_crash", key), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 9, proc.stderr
    assert not key.exists()
    identity = Identity.load_or_create(key)  # the next start creates a key instead of refusing an empty file
    assert Identity.load_or_create(key).peer_id == identity.peer_id
    assert key.stat().st_mode & 0o077 == 0
