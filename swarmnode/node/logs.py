"""Logging: human-readable lines on stderr and in a rotating file under ``<home>/logs/``.

A record logged with ``extra={"terminal": False}`` (another program's own output, such as
pip's while the model is fetched) goes to the file only.
"""

from __future__ import annotations

import logging
import logging.handlers
import warnings

from swarmnode.paths import NodeHome

_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# Third-party loggers that are chatty at INFO and say nothing a node operator can act on.
_QUIET = ("httpx", "urllib3", "filelock", "transformers", "hivemind", "libp2p", "asyncio", "aiohttp.access")


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
        fh = logging.handlers.RotatingFileHandler(home.logs / "swarmnode.log", maxBytes=5 << 20, backupCount=3,
                                                  encoding="utf-8")
        fh.setFormatter(logging.Formatter(_FORMAT))
        root.addHandler(fh)
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    logging.captureWarnings(True)
    warnings.filterwarnings("ignore", module="transformers")
