"""The one log line for a fast path a model cannot take.

Every fast path (shared-prompt decoding, chunked chosen-token log-probs, activation
checkpointing) has a plain path that computes the same result with more memory or time. A
model that needs the plain one gets it silently after the first time: the log says once per
process, path and model type what was given up and why.
"""

from __future__ import annotations

import logging

log = logging.getLogger("swarmnode.train")
_reported: set[tuple[str, str]] = set()


def fell_back(config, path: str, reason: str) -> None:
    """Log, once per (``path``, model type), that ``config``'s model takes the plain ``path`` because ``reason``."""
    key = (path, config.model_type)
    if key not in _reported:
        _reported.add(key)
        log.info("%s model: %s, because %s", config.model_type, path, reason)
