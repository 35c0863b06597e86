"""Background priority: the node yields the CPU to whatever the user runs beside it.

``priority = "background"`` (the default) lowers the whole process once, at start:

- Linux: nice 19 on every thread that exists (Linux keeps a nice value per thread; threads
  made later inherit it from the thread that makes them). Where the kernel schedules sessions
  as groups (autogroup, ``/proc/sys/kernel/sched_autogroup_enabled``), nice orders threads
  only within their session, and busy sessions share the CPU evenly: two busy loops on one
  CPU, each in a session of its own, got 1.50 and 1.50 CPU-seconds in 3 s at nice 19 and nice
  0, and 0.04 against 2.94 with the nice 19 one's session lowered too (``pytest -s tests/test_priority.py``
  measures the latter). So a node that leads its session (``start --tui``, a service) lowers
  the session too; one started in a terminal's session leaves it (the user's shell's) alone
  and says so;
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
AUTOGROUP = Path("/proc/self/autogroup")
AUTOGROUP_ENABLED = Path("/proc/sys/kernel/sched_autogroup_enabled")
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


def _autogroups_on(enabled: Path = AUTOGROUP_ENABLED) -> bool:
    try:
        return enabled.read_text().strip() == "1"
    except OSError:
        return False


def _lower_session(nice: int, autogroup: Path = AUTOGROUP, enabled: Path = AUTOGROUP_ENABLED) -> str:
    """Under autogroup scheduling, this session's group to ``nice`` when this process leads the
    session (nothing of the user's shares it); what that leaves, for the description: "" where
    sessions are not groups, else where the priority holds."""
    if not _autogroups_on(enabled):
        return ""
    if os.getsid(0) != os.getpid():
        log.info("this kernel shares the CPU equally between busy sessions (autogroup): nice %d puts the "
                 "node behind the programs of its own terminal only; `swarmnode start --tui` and `swarmnode "
                 "service install` run it in a session of its own, which it lowers too", nice)
        return " within its session"
    try:
        current = int(autogroup.read_text().split("nice")[1])
        if current < nice:
            autogroup.write_text(str(nice))
    except (OSError, ValueError, IndexError) as exc:  # the kernel allows one write a second unprivileged
        log.warning("cannot lower the node's session (%s); programs of other sessions share the CPU with it "
                    "equally", exc)
        return " within its session"
    return f", its session {nice}"


def _background() -> str:
    """Lower this process's priority; returns what was set. Raises OSError (or AttributeError
    where the call does not exist) when the platform refuses."""
    if sys.platform.startswith("linux"):
        _renice_linux_threads(BACKGROUND_NICE)
        return f"background (nice {BACKGROUND_NICE}{_lower_session(BACKGROUND_NICE)})"
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
    if sys.platform.startswith("linux") and _autogroups_on():
        return (f"background ({how}, and on its session with --tui or as a service): your programs come first; "
                "in a terminal without --tui, only that terminal's (the kernel shares the CPU equally between busy "
                "sessions: autogroup)")
    return f"background ({how}): your programs come first"
