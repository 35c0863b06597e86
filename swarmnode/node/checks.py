"""One line of ``swarmnode doctor``'s report: a check's name, its status and the fix."""

from __future__ import annotations

from dataclasses import dataclass

OK, WARNING, PROBLEM = "ok", "warning", "problem"


@dataclass(frozen=True)
class Check:
    """One line of the report. ``fix`` says what to do; it is set for every problem."""

    check: str
    status: str
    detail: str
    fix: str | None = None
