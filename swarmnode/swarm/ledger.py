"""The author's ledger: what this node's rollouts gave the swarm, from verified receipts.

Two files under ``<home>/credits/``: ``shared.json``, the node's own recent bundles (round,
digest, group keys; rewritten whole, atomically, each round) that receipts must name, and
``receipts.jsonl``, one JSON line per counted receipt, with the credits it newly counted
(appended and fsynced; a torn last line is dropped on load; past ``max_credits`` credits in
all it is rewritten with its newest lines of at most half as many).

A receipt counts only when it names one of the last ``shared_window`` bundles this node
shared and groups that bundle held, is the first of its trainer's round, credits a group that
trainer had not credited yet, and comes from a peer *established* with this node
(:class:`~swarmnode.swarm.standing.Standing`). A newcomer's receipt waits in a bounded room
until its trainer is established, and is counted then. Each bundle takes credits from at most
``max_trainers_per_bundle`` trainers. So the file never holds more lines for the bundles still
in the window than ``shared_window * max_trainers_per_bundle * max_groups`` credits, at most
half its cap: a compaction never forgets what a replay would need (``docs/reliability.md`` has the figures).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from swarmnode.swarm.identity import name_from_peer_id
from swarmnode.swarm.receipt import Receipt

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LedgerLimits:
    shared_window: int = 16            # own bundles receipts may name
    max_trainers_per_bundle: int = 64
    max_groups: int = 16
    max_pending: int = 256             # newcomers' receipts waiting for their trainer's standing
    max_credits: int = 40_000          # in receipts.jsonl and memory (about 110 bytes each on disk)

    def __post_init__(self) -> None:
        # Lines for the bundles still in the window must fit in what a compaction keeps.
        need = 2 * self.shared_window * self.max_trainers_per_bundle * self.max_groups
        if self.max_credits < need:
            raise ValueError(f"max_credits must be at least {need} (2 x shared_window x max_trainers_per_bundle x "
                             "max_groups) so that a compaction keeps every credit a replay could repeat")


@dataclass(frozen=True)
class _Line:
    at: float
    trainer: str
    round: int
    credits: tuple[tuple[str, str, bool], ...]  # (bundle digest, group key, signal) newly credited

    def to_json(self) -> str:
        return json.dumps({"at": self.at, "trainer": self.trainer, "round": self.round,
                           "credits": [list(c) for c in self.credits]}, separators=(",", ":")) + "\n"

    @classmethod
    def from_json(cls, text: str) -> _Line:
        row = json.loads(text)
        credits = tuple((str(d), str(k), s is True) for d, k, s in row["credits"])
        return cls(float(row["at"]), str(row["trainer"]), int(row["round"]), credits)


class Ledger:
    """Verified receipts addressed to this node, counted by the rules above; thread-safe."""

    def __init__(self, directory: Path, is_established: Callable[[str], bool],
                 limits: LedgerLimits = LedgerLimits()):
        self.dir = Path(directory)
        self.is_established = is_established
        self.limits = limits
        self.refused: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._shared: OrderedDict[str, tuple[int, frozenset[str]]] = OrderedDict()  # digest -> (round, keys)
        self._pending: OrderedDict[tuple[str, int], tuple[Receipt, float]] = OrderedDict()
        self._lines: deque[_Line] = deque()
        self._credits = 0  # credits in _lines
        self._rounds: set[tuple[str, int]] = set()
        self._credited: set[tuple[str, str, str]] = set()  # (trainer, digest, key)
        self._trainers: dict[str, set[str]] = {}  # digest -> trainers that credited it
        self.dir.mkdir(parents=True, exist_ok=True)
        self._load()

    @property
    def receipts_file(self) -> Path:
        return self.dir / "receipts.jsonl"

    @property
    def shared_file(self) -> Path:
        return self.dir / "shared.json"

    # ---- the node's own bundles ------------------------------------------------------------
    def note_shared(self, round_no: int, digest: str, keys: list[str]) -> None:
        """This node shared bundle ``digest`` of ``round_no`` holding groups ``keys``."""
        with self._lock:
            self._shared[digest] = (round_no, frozenset(keys))
            while len(self._shared) > self.limits.shared_window:
                self._shared.popitem(last=False)
            rows = [[d, r, sorted(k)] for d, (r, k) in self._shared.items()]
        try:
            _write_atomic(self.shared_file, json.dumps(rows, separators=(",", ":")))
        except OSError as exc:  # the memory still holds it; only a restart would forget it
            log.warning("could not write %s: %s", self.shared_file, exc.strerror or exc)

    # ---- receipts --------------------------------------------------------------------------
    def offer(self, receipt: Receipt, now: float | None = None) -> str | None:
        """Count a verified receipt addressed to this node. Returns None when counted, ``"pending"``
        when it waits for its trainer's standing, else the reason it was refused (counted)."""
        now = time.time() if now is None else now
        with self._lock:
            reason = self._admit(receipt, now)
            if reason is not None and reason != "pending":
                self.refused[reason] += 1
            return reason

    def refuse(self, reason: str) -> None:
        """Count a receipt refused before it reached the ledger (by :mod:`swarmnode.swarm.receipt`'s checks)."""
        with self._lock:
            self.refused[reason] += 1

    def promote(self, now: float | None = None) -> int:
        """Count the waiting receipts whose trainers are now established; how many were counted."""
        now = time.time() if now is None else now
        counted = 0
        with self._lock:
            for key, (receipt, at) in list(self._pending.items()):
                if self.is_established(receipt.trainer):
                    del self._pending[key]
                    reason = self._admit(receipt, at)
                    counted += reason is None
                    if reason is not None:
                        self.refused[reason] += 1
        return counted

    def _admit(self, receipt: Receipt, now: float) -> str | None:
        for _, digest, credits in receipt.bundles:
            shared = self._shared.get(digest)
            if shared is None:
                return "unknown_bundle"
            if any(c.key not in shared[1] for c in credits):
                return "unknown_group"
        if any(self._shared[d][0] != r for r, d, _ in receipt.bundles):
            return "unknown_bundle"
        if (receipt.trainer, receipt.round) in self._rounds:
            return "replay"
        if not self.is_established(receipt.trainer):
            self._pending[(receipt.trainer, receipt.round)] = (receipt, now)
            self._pending.move_to_end((receipt.trainer, receipt.round))
            while len(self._pending) > self.limits.max_pending:
                self._pending.popitem(last=False)
                self.refused["pending_full"] += 1
            return "pending"
        new: dict[tuple[str, str], bool] = {}  # (digest, key) -> signal; a receipt naming one twice counts it once
        for _, digest, credits in receipt.bundles:
            trainers = self._trainers.get(digest, set())
            if receipt.trainer not in trainers and len(trainers) >= self.limits.max_trainers_per_bundle:
                return "bundle_full"
            new.update(((digest, c.key), c.signal) for c in credits
                       if (receipt.trainer, digest, c.key) not in self._credited)
        if not new:
            return "nothing_new"
        line = _Line(round(now, 3), receipt.trainer, receipt.round, tuple((d, k, s) for (d, k), s in new.items()))
        try:
            with open(self.receipts_file, "a", encoding="utf-8") as fh:
                fh.write(line.to_json())
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            log.warning("could not record a receipt in %s: %s", self.receipts_file, exc.strerror or exc)
            return "disk"
        self._index(line)
        if self._credits > self.limits.max_credits:
            self._compact()
        return None

    def _index(self, line: _Line) -> None:
        self._lines.append(line)
        self._credits += len(line.credits)
        self._rounds.add((line.trainer, line.round))
        for digest, key, _ in line.credits:
            self._credited.add((line.trainer, digest, key))
            self._trainers.setdefault(digest, set()).add(line.trainer)

    def _reindex(self, lines: list[_Line]) -> None:
        self._lines.clear()
        self._credits = 0
        self._rounds.clear()
        self._credited.clear()
        self._trainers.clear()
        for line in lines:
            self._index(line)

    def _compact(self) -> None:
        keep = _newest(list(self._lines), self.limits.max_credits // 2)
        try:
            _write_atomic(self.receipts_file, "".join(line.to_json() for line in keep))
        except OSError as exc:
            log.warning("could not compact %s: %s", self.receipts_file, exc.strerror or exc)
            return
        self._reindex(keep)

    def _load(self) -> None:
        try:
            rows = json.loads(self.shared_file.read_text(encoding="utf-8"))
            for digest, round_no, keys in rows[-self.limits.shared_window:]:
                self._shared[str(digest)] = (int(round_no), frozenset(map(str, keys)))
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError) as exc:
            log.warning("%s is damaged (%s); receipts for bundles shared before it are refused", self.shared_file, exc)
        lines, torn = _read_lines(self.receipts_file, self.limits.max_credits)
        if torn:
            log.warning("%s: dropped a torn or damaged line", self.receipts_file)
            _write_atomic(self.receipts_file, "".join(line.to_json() for line in lines))
        self._reindex(lines)

    # ---- what the node shows -----------------------------------------------------------------
    def summary(self, now: float | None = None) -> dict:
        """:func:`summarize` of the receipts counted, with ``pending`` and ``refused`` by reason."""
        with self._lock:
            lines = list(self._lines)
            pending, refused = len(self._pending), dict(self.refused)
        return {**summarize(lines, time.time() if now is None else now), "pending": pending, "refused": refused}


def summary_of_files(directory: Path, now: float | None = None, max_credits: int = LedgerLimits.max_credits) -> dict:
    """:func:`summarize` of the receipts in ``directory`` as a stopped node left them (read only:
    a torn line is skipped, not repaired); ``pending`` 0 and ``refused`` empty (a running node's)."""
    lines, _ = _read_lines(Path(directory) / "receipts.jsonl", max_credits)
    return {**summarize(lines, time.time() if now is None else now), "pending": 0, "refused": {}}


def summarize(lines: list[_Line], now: float) -> dict:
    """What this node's rollouts gave: ``total``, ``last_hour``, ``last_day`` (``groups`` trained
    on, ``with_signal``, by how many ``peers``, ``receipts``), ``hours`` (the last 24, oldest
    first) and ``by_peer`` (most groups first, each with its ``name`` and ``last`` receipt time)."""
    by_hour: list[list[_Line]] = [[] for _ in range(24)]  # the last 24 hours, oldest first
    for ln in lines:
        # A line's time is rounded to the millisecond, so one written just now can lie ahead of now.
        ago = int(max(0.0, now - ln.at) // 3600)
        if 0 <= ago < 24:
            by_hour[23 - ago].append(ln)
    peers: dict[str, list[_Line]] = {}
    for ln in lines:
        peers.setdefault(ln.trainer, []).append(ln)
    by_peer = [{"peer_id": p, "name": name_from_peer_id(p), **_totals(ls), "last": max(ln.at for ln in ls)}
               for p, ls in peers.items()]
    by_peer.sort(key=lambda row: (-row["groups"], row["peer_id"]))
    return {"total": _totals(lines), "last_hour": _totals(by_hour[-1]),
            "last_day": _totals([ln for ls in by_hour for ln in ls]),
            "hours": [_totals(ls) for ls in by_hour], "by_peer": by_peer}


def _newest(lines: list[_Line], max_credits: int) -> list[_Line]:
    """The newest of ``lines`` holding at most ``max_credits`` credits together."""
    total, start = 0, len(lines)
    while start and total + len(lines[start - 1].credits) <= max_credits:
        start -= 1
        total += len(lines[start].credits)
    return lines[start:]


def _read_lines(path: Path, max_credits: int) -> tuple[list[_Line], bool]:
    """The newest readable lines of ``path`` holding at most ``max_credits`` credits, and
    whether any line was torn or damaged."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], False
    lines, torn = [], bool(raw) and not raw.endswith(b"\n")
    for text in raw.split(b"\n"):
        if not text.strip():
            continue
        try:
            lines.append(_Line.from_json(text.decode("utf-8")))
        except (ValueError, KeyError, TypeError):
            torn = True
    return _newest(lines, max_credits), torn


def _totals(lines: list[_Line]) -> dict[str, int]:
    return {"groups": sum(len(ln.credits) for ln in lines),
            "with_signal": sum(s for ln in lines for _, _, s in ln.credits),
            "peers": len({ln.trainer for ln in lines}), "receipts": len(lines)}


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
