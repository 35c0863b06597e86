"""Logging: human-readable lines on stderr and in a rotating file under ``<home>/logs/``.

A record logged with ``extra={"terminal": False}`` (another program's own output, such as
pip's while the model is fetched) goes to the file only.
"""

from __future__ import annotations

import faulthandler
import logging
import logging.handlers
import warnings
from pathlib import Path

from swarmnode.paths import NodeHome

_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# Third-party loggers that are chatty at INFO and say nothing a node operator can act on.
_QUIET = ("httpx", "urllib3", "filelock", "transformers", "hivemind", "libp2p", "asyncio", "aiohttp.access")


# A stop that takes longer than this is stuck somewhere (a library's thread, a call that never
# returns): every thread's stack then goes to the log file, so the next look finds where.
SLOW_STOP_S = 60.0


def log_file(home: NodeHome) -> Path:
    return home.logs / "swarmnode.log"


def report_a_slow_stop(home: NodeHome, after_s: float = SLOW_STOP_S) -> None:
    """If this process is still alive ``after_s`` seconds from now, append every thread's stack
    to the node's log file (once; nothing is interrupted). Call it when the node begins to stop;
    the report is dropped when the process exits first."""
    home.logs.mkdir(parents=True, exist_ok=True)
    out = log_file(home).open("a", encoding="utf-8")
    faulthandler.dump_traceback_later(after_s, repeat=False, file=out, exit=False)


def setup_logging(home: NodeHome | None, level: str = "info") -> None:
    root = logging.getLogger()
    root.setLevel(level.upper())
    for h in list(root.handlers):
        root.removeHandler(h)
    stderr = logging.StreamHandler()
    stderr.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    stderr.addFilter(lambda record: getattr(record, "terminal", True))
    root.addHandler(stderr)
    if home is not None:
        home.logs.mkdir(parents=True, exist_ok=True)
        fh = logging.handlers.RotatingFileHandler(log_file(home), maxBytes=5 << 20, backupCount=3,
                                                  encoding="utf-8")
        fh.setFormatter(logging.Formatter(_FORMAT))
        root.addHandler(fh)
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    quiet_library_warnings()


def quiet_library_warnings() -> None:
    """Warnings become log records, and transformers' are dropped: its deprecation notices
    concern its own API as peft calls it, nothing a node's operator can act on."""
    logging.captureWarnings(True)
    warnings.filterwarnings("ignore", module="transformers")
