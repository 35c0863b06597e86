"""Where a node keeps its files.

``--home DIR`` (or ``SWARMNODE_HOME``) puts every file of one node under DIR, so several nodes
can run on one machine. Without it the platform's usual places are used (platformdirs): the
user data directory for state, the user config directory for ``config.toml``, the user
cache directory for converted models (shared by every node of the user).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP = "swarmnode"


def default_home() -> Path:
    return Path(platformdirs.user_data_dir(APP, appauthor=False))


def cache_dir() -> Path:
    """Shared model cache; ``SWARMNODE_CACHE`` overrides it (tests, read-only homes)."""
    env = os.environ.get("SWARMNODE_CACHE")
    return Path(env).expanduser() if env else Path(platformdirs.user_cache_dir(APP, appauthor=False))


def default_config_file(home: str | os.PathLike | None) -> Path | None:
    """The config file used when ``--config`` is not given, or None if there is none."""
    candidates = []
    if home:
        candidates.append(Path(home).expanduser() / "config.toml")
    else:
        candidates.append(default_home() / "config.toml")
        candidates.append(Path(platformdirs.user_config_dir(APP, appauthor=False)) / "config.toml")
    for c in candidates:
        if c.is_file():
            return c
    return None


def home_setting(flag: str | None) -> str | None:
    """The home a command was pointed at: its ``--home`` flag, else ``SWARMNODE_HOME``, else None."""
    return flag or os.environ.get("SWARMNODE_HOME") or None


@dataclass(frozen=True)
class NodeHome:
    """The files of one node, all under ``root``."""

    root: Path

    @classmethod
    def resolve(cls, home: str | os.PathLike | None) -> NodeHome:
        return cls(Path(home).expanduser().resolve() if home else default_home())

    @property
    def config_file(self) -> Path:
        return self.root / "config.toml"

    @property
    def identity_file(self) -> Path:
        return self.root / "identity.key"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def metrics_file(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def yardstick_file(self) -> Path:
        return self.root / "yardstick.jsonl"

    @property
    def credits(self) -> Path:
        """The receipt ledger: what this node's rollouts gave its peers (swarmnode.swarm.ledger)."""
        return self.root / "credits"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def api_file(self) -> Path:
        return self.root / "api.json"

    @classmethod
    def from_flag(cls, flag: str | None) -> NodeHome:
        """The home of a command's ``--home`` flag (see :func:`home_setting`), else the default."""
        return cls.resolve(home_setting(flag))

    def create(self) -> NodeHome:
        """Create the directories; raise OSError with a readable message if that fails."""
        for d in (self.root, self.checkpoints, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        return self
