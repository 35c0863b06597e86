"""A program of the tests that reports on stdout as JSON lines ``{"event": NAME, ...}``, run in
its own session so that killing it takes its children along."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

from waiting import wait_until


class EventProcess:
    """``argv`` running with its JSON events collected in :attr:`events` (other lines ignored);
    its stderr to ``stderr`` where given, else discarded."""

    def __init__(self, argv: list[str], stderr: Path | None = None):
        self._stderr = open(stderr, "w") if stderr else subprocess.DEVNULL
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, start_new_session=True)
        self.events: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def last(self, name: str) -> dict | None:
        return next((e for e in reversed(self.events) if e["event"] == name), None)

    def wait(self, name: str, timeout: float) -> dict:
        """The latest event ``name``, once there is one; AssertionError if the program exits first."""
        def seen() -> dict | None:
            if self.proc.poll() is not None and self.last(name) is None:
                raise AssertionError(f"{Path(self.proc.args[1]).name} exited with {self.proc.returncode} "
                                     f"before {name!r}")
            return self.last(name)
        return wait_until(seen, timeout, f"event {name!r} of {Path(self.proc.args[1]).name}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if self._stderr is not subprocess.DEVNULL:
            self._stderr.close()
