"""Atomic per-round checkpoints: adapter, optimizer state, round number, RNG states.

Layout: ``<home>/checkpoints/round-000042/`` holding ``adapter/`` (PEFT format),
``optimizer.pt``, ``rng.pt``, ``state.json`` and ``manifest.json`` (sha256 of every other
file). A checkpoint is written into a hidden temporary directory, every file fsynced, then
renamed into place, so a crash leaves either the whole new checkpoint or none of it. On
load, a checkpoint whose manifest is missing or does not match is skipped with a warning
and the previous one is used. Tensors are loaded with ``weights_only=True``: no pickle code
runs on load.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from swarmnode.train.curriculum import check_record

log = logging.getLogger(__name__)

_NAME = re.compile(r"^round-(\d{6,})$")


class CheckpointError(RuntimeError):
    """A checkpoint could not be written; the previous one is intact. ``str()`` says why."""


@dataclass
class Checkpoint:
    round: int
    path: Path
    state: dict[str, Any]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # directories cannot be opened on some platforms (Windows)
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rng_snapshot() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def save_checkpoint(root: Path, round_no: int, policy, state: dict[str, Any], keep: int = 2) -> Path:
    """Write the checkpoint of a finished round; prune all but the newest ``keep``."""
    final = root / f"round-{round_no:06d}"
    tmp = root / f".tmp-round-{round_no:06d}-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        # Leftovers of writes a crash interrupted: never valid, and they would pile up one per crash.
        for stale in root.glob(".tmp-round-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir()
        policy.save_adapter(tmp / "adapter")
        torch.save(policy.optimizer.state_dict(), tmp / "optimizer.pt")
        rng = rng_snapshot()
        torch.save({"torch": rng["torch"],
                    "numpy": [rng["numpy"][0], torch.from_numpy(rng["numpy"][1].astype(np.int64)),
                              *rng["numpy"][2:]],
                    "python": [rng["python"][0], list(rng["python"][1]), rng["python"][2]]},
                   tmp / "rng.pt")
        (tmp / "state.json").write_text(json.dumps({"round": round_no, **state}, sort_keys=True))
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        manifest = {str(p.relative_to(tmp)): _sha256(p) for p in files}
        (tmp / "manifest.json").write_text(json.dumps(manifest, sort_keys=True))
        for p in [*files, tmp / "manifest.json"]:
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
        for d in {p.parent for p in files}:
            _fsync_dir(d)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
    except Exception as exc:  # torch.save and safetensors report a failed write as their own errors, not OSError
        shutil.rmtree(tmp, ignore_errors=True)
        reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__)
        raise CheckpointError(f"could not write checkpoint of round {round_no} under {root}: "
                              f"{reason.splitlines()[0]} (disk full or not writable?); the previous checkpoint "
                              "is intact") from None
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old[1], ignore_errors=True)
    return final


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Checkpoint directories by round, oldest first (validity not checked)."""
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _NAME.match(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    return sorted(found)


def _verify(path: Path) -> dict[str, Any]:
    manifest = json.loads((path / "manifest.json").read_text())
    if not isinstance(manifest, dict) or "state.json" not in manifest:
        raise ValueError("manifest lists no state.json")
    for rel, digest in manifest.items():
        f = path / rel
        if not f.is_file() or _sha256(f) != digest:
            raise ValueError(f"{rel} is missing or does not match the manifest")
    state = json.loads((path / "state.json").read_text())
    if not isinstance(state, dict) or not isinstance(state.get("round"), int):
        raise ValueError("state.json has no round")
    if "levels" in state:
        check_record(state["levels"])  # a LevelError is a ValueError: damaged, fall back
    return state


def latest_checkpoint(root: Path) -> Checkpoint | None:
    """The newest checkpoint that verifies; broken newer ones are reported and skipped."""
    for round_no, path in reversed(list_checkpoints(root)):
        try:
            state = _verify(path)
        except (OSError, ValueError) as exc:
            log.warning("checkpoint %s is damaged (%s); falling back to the previous one", path, exc)
            continue
        return Checkpoint(round_no, path, state)
    return None


def restore(checkpoint: Checkpoint, policy) -> None:
    """Load adapter, optimizer and RNG states of ``checkpoint`` into ``policy`` and the RNGs."""
    policy.load_adapter_weights(checkpoint.path / "adapter")
    opt = torch.load(checkpoint.path / "optimizer.pt", map_location=policy.device, weights_only=True)
    policy.optimizer.load_state_dict(opt)
    # load_state_dict brings back the saved learning rate and weight decay too: the config's
    # win, so a node restarted with other values (or its model's round) trains with them.
    for group in policy.optimizer.param_groups:
        group["lr"], group["weight_decay"] = policy.cfg.learning_rate, policy.cfg.weight_decay
    rng = torch.load(checkpoint.path / "rng.pt", weights_only=True)
    torch.set_rng_state(rng["torch"])
    np_state = rng["numpy"]
    np.random.set_state((np_state[0], np_state[1].numpy().astype(np.uint32), *np_state[2:]))
    py = rng["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
