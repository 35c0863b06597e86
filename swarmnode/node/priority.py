"""Background priority: the node yields the CPU to whatever the user runs beside it.

``priority = "background"`` (the default) lowers the whole process once, at start:

- Linux: nice 19 on every thread that exists (Linux keeps a nice value per thread; threads
  made later inherit it from the thread that makes them);
- macOS: the Darwin background band (``setpriority(PRIO_DARWIN_PROCESS, 0, PRIO_DARWIN_BG)``,
  what ``taskpolicy -b`` sets: lowest CPU priority and throttled disk I/O), else nice 19;
- Windows: the idle priority class, through psutil.

A platform that refuses (a container, a restricted user) leaves the node at normal priority
with one warning line; it never stops the node. Only lowering is ever asked, which needs no
privilege, so the refusal is rare.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

log = logging.getLogger(__name__)

BACKGROUND_NICE = 19
# <sys/resource.h> on macOS; Python's os module does not name them.
PRIO_DARWIN_PROCESS = 4
PRIO_DARWIN_BG = 0x1000


def _renice_linux_threads(nice: int, tasks: Path = Path("/proc/self/task")) -> None:
    """Every thread of this process to ``nice`` (never raising a thread already nicer)."""
    for entry in tasks.iterdir():
        tid = int(entry.name)
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
        except ProcessLookupError:  # the thread ended meanwhile
            continue


def _background() -> str:
    """Lower this process's priority; returns what was set. Raises OSError (or AttributeError
    where the call does not exist) when the platform refuses."""
    if sys.platform.startswith("linux"):
        _renice_linux_threads(BACKGROUND_NICE)
        return f"background (nice {BACKGROUND_NICE})"
    if sys.platform == "darwin":
        try:
            os.setpriority(PRIO_DARWIN_PROCESS, 0, PRIO_DARWIN_BG)
            return "background (macOS background band)"
        except OSError as exc:
            log.debug("no macOS background band (%s); using nice", exc)
    if sys.platform == "win32":
        import psutil

        psutil.Process().nice(psutil.IDLE_PRIORITY_CLASS)
        return "background (idle priority class)"
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current < BACKGROUND_NICE:
        os.setpriority(os.PRIO_PROCESS, 0, BACKGROUND_NICE)
    return f"background (nice {BACKGROUND_NICE})"


def apply_priority(priority: str) -> str:
    """Run the node at ``priority`` ("background" or "normal"); returns a one-line description of
    what the node runs at. A refusal logs one warning and returns "normal (...)"; it never raises."""
    if priority != "background":
        return "normal"
    try:
        what = _background()
    except (OSError, AttributeError) as exc:
        log.warning("cannot lower the node's priority (%s); it runs at normal priority", exc)
        return f"normal (background refused: {exc})"
    log.info("priority: %s; other programs come first", what)
    return what


def describe_priority(priority: str) -> str:
    """What :func:`apply_priority` would set here, without setting it (for ``doctor``)."""
    if priority != "background":
        return "normal: the node competes with your programs for the CPU"
    where = {"linux": f"nice {BACKGROUND_NICE} on every thread", "darwin": "the macOS background band",
             "win32": "the idle priority class"}
    how = next((v for k, v in where.items() if sys.platform.startswith(k)), f"nice {BACKGROUND_NICE}")
    return f"background ({how}): your programs come first"
