"""``<home>/metrics.jsonl``: one JSON line per finished round, no duplicates, no gaps (and
``<home>/yardstick.jsonl`` alike, one line per yardstick record).

A round's line is written before its checkpoint. A crash between the two leaves a line for
a round the checkpoint does not have; :meth:`MetricsLog.truncate_after` drops it (and any
half-written last line) when the node resumes, and the round is run again.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Generic

from swarmnode.records import R, RoundRecord

log = logging.getLogger(__name__)


class MetricsError(RuntimeError):
    """``metrics.jsonl`` could not be written; ``str()`` names the file and the reason."""


class MetricsLog(Generic[R]):
    """A log of ``kind`` records, one per round number."""

    def __init__(self, path: Path, kind: type[R] = RoundRecord):
        self.path = path
        self.kind = kind

    def read(self) -> list[R]:
        """The complete rows; a torn or hand-mangled line is skipped with a warning."""
        if not self.path.exists():
            return []
        rows = []
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise ValueError("not an object")
                    record = self.kind.from_json(row)
                except ValueError as exc:
                    log.warning("%s line %d is not a metrics row (%s); ignoring it", self.path, n, exc)
                    continue
                rows.append(record)
        return rows

    def truncate_after(self, last_round: int | None) -> list[R]:
        """Keep only rows of rounds <= ``last_round`` (None keeps none), one per round; return them."""
        rows = self.read()
        kept: dict[int, R] = {}
        if last_round is not None:
            for row in rows:
                if row.round <= last_round:
                    kept[row.round] = row
        result = [kept[r] for r in sorted(kept)]
        if len(result) != len(rows) or not self._ends_cleanly():
            tmp = self.path.with_suffix(".jsonl.tmp")
            try:
                with open(tmp, "w", encoding="utf-8") as fh:
                    fh.writelines(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in result)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise MetricsError(f"could not rewrite {self.path}: {exc.strerror or exc} "
                                   "(disk full or not writable?)") from None
        return result

    def _ends_cleanly(self) -> bool:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return True
        with open(self.path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) == b"\n"

    def append(self, record: R) -> None:
        """Add one row; raises MetricsError (a half-written line is dropped on the next resume)."""
        try:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record.to_json(), sort_keys=True) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise MetricsError(f"could not append to {self.path}: {exc.strerror or exc} "
                               "(disk full or not writable?)") from None
