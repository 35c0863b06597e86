"""Helpers for tests that run ``swarmnode start`` as real OS processes on the tiny model.

The tiny random model scores zero on most task families, so most rounds would skip the
GRPO update; :func:`write_signal_tasks` writes a task file (propositional logic only) on
which its completions get small partial rewards that differ, so nearly every round trains.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from swarmnode.paths import NodeHome
from swarmnode.swarm.identity import Identity

# One round of the tiny model on one core: about 0.1 s generating, 0.1-0.3 s training.
FAST_ROUND = ["--questions", "2", "--completions", "4", "--max-new-tokens", "8", "--threads", "1",
              "--local", "2", "--external", "0"]

_SIGNAL_TASKS = """\
[propositional_logic]
weight = 1.0
min_vars = 2
max_vars = 2
min_statements = 2
max_statements = 2
min_complexity = 1
max_complexity = 1
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_all(*procs: subprocess.Popen | None) -> None:
    """Terminate the processes among ``procs`` that still run, and reap them."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.terminate()
            p.wait(30)


def home_peer_id(home: Path) -> str:
    """The PeerID of the node in ``home``, its key made first when it has none yet (as
    ``swarmnode identity`` would, without a process)."""
    return Identity.load_or_create(NodeHome.resolve(home).identity_file).peer_id


def write_signal_tasks(path: Path) -> Path:
    path.write_text(_SIGNAL_TASKS)
    return path


def start_argv(home: Path, model: Path, *extra: str) -> list[str]:
    """``swarmnode start`` for a node in ``home`` on ``model`` with fast rounds."""
    return [sys.executable, "-m", "swarmnode", "start", "--home", str(home), "--model", str(model),
            *FAST_ROUND, *extra]


def cli(home: Path, *args: str, prefix: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """``swarmnode ARGS --home HOME`` as a user runs it (``prefix``: ``ip netns exec NS``)."""
    return subprocess.run([*prefix, sys.executable, "-m", "swarmnode", *args, "--home", str(home)],
                          cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=60)


def cli_json(home: Path, command: str, prefix: Sequence[str] = ()) -> Any:
    """``swarmnode COMMAND --json`` against ``home``'s running node (None while it gives no answer)."""
    out = cli(home, command, "--json", prefix=prefix)
    return json.loads(out.stdout) if out.returncode == 0 else None


def metric_rows(home: Path) -> list[dict]:
    """The complete rows of ``<home>/metrics.jsonl`` (a torn last line is left out)."""
    path = home / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def metric_rounds(home: Path) -> list[int]:
    return [row["round"] for row in metric_rows(home)]


class LogTail:
    """The text a node appended to ``<home>/logs/swarmnode.log`` since this object was made."""

    def __init__(self, home: Path):
        self.path = home / "logs" / "swarmnode.log"
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def text(self) -> str:
        if not self.path.exists():
            return ""
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            return fh.read().decode("utf-8", "replace")
