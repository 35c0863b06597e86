"""Talking to a running node through its local API, and the ``status``, ``peers`` and ``tui``
subcommands.

A node writes ``<home>/api.json`` (port, bearer token, pid) when its API is up and removes
it on exit. :class:`NoNodeRunning` covers every way of finding no node: no file, a file left
by a process that is gone, or a port that refuses connections.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp

from swarmnode.paths import NodeHome

_REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=5)
_STREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=5, sock_connect=5)


class NoNodeRunning(Exception):
    """No node answers at this home; ``str()`` is the line to show the user."""

    def __init__(self, home: NodeHome):
        self.home = home
        super().__init__(f"no node running at {home.root}")


class ApiError(Exception):
    """The node answered with an error status; ``str()`` is its message."""


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but another user's
        return True
    return True


@dataclass(frozen=True)
class ApiEndpoint:
    """Where a node's API listens and the token that its ``POST`` endpoints need."""

    url: str
    token: str
    pid: int

    @classmethod
    def read(cls, home: NodeHome) -> ApiEndpoint:
        """Read ``<home>/api.json``; raise :class:`NoNodeRunning` if no live node wrote it."""
        try:
            data = json.loads(home.api_file.read_text())
            endpoint = cls(url=str(data["url"]), token=str(data["token"]), pid=int(data["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            raise NoNodeRunning(home) from None
        if not _process_alive(endpoint.pid):
            raise NoNodeRunning(home)
        return endpoint


class NodeApi:
    """Async client of one node's API; use as ``async with NodeApi(home) as api``."""

    def __init__(self, home: NodeHome):
        self.home = home
        self.endpoint = ApiEndpoint.read(home)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> NodeApi:
        self._session = aiohttp.ClientSession(self.endpoint.url)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._session is not None
        await self._session.close()

    async def _request(self, method: str, path: str, *, auth: bool = False) -> Any:
        assert self._session is not None, "use NodeApi inside 'async with'"
        headers = {"Authorization": f"Bearer {self.endpoint.token}"} if auth else {}
        try:
            async with self._session.request(method, path, headers=headers, timeout=_REQUEST_TIMEOUT) as resp:
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError):
            raise NoNodeRunning(self.home) from None
        except ValueError:
            raise ApiError(f"{method} {path}: the node answered something that is not JSON") from None
        if resp.status >= 400:
            raise ApiError(f"{method} {path}: {body.get('error', resp.reason)} (HTTP {resp.status})")
        return body

    async def status(self) -> dict:
        return await self._request("GET", "/v1/status")

    async def peers(self) -> list[dict]:
        return (await self._request("GET", "/v1/peers"))["peers"]

    async def yardstick(self) -> list[dict]:
        return (await self._request("GET", "/v1/yardstick"))["yardstick"]

    async def rounds(self, since: int = 0) -> list[dict]:
        return (await self._request("GET", f"/v1/rounds?since={since}"))["rounds"]

    async def pause(self) -> dict:
        return await self._request("POST", "/v1/pause", auth=True)

    async def resume(self) -> dict:
        return await self._request("POST", "/v1/resume", auth=True)

    async def stop(self) -> dict:
        return await self._request("POST", "/v1/stop", auth=True)

    async def events(self) -> AsyncIterator[dict | None]:
        """Follow ``/v1/events``: yields None once connected, then each event dict.

        Ends when the node closes the stream; raises :class:`NoNodeRunning` if it cannot connect.
        """
        assert self._session is not None, "use NodeApi inside 'async with'"
        try:
            async with self._session.get("/v1/events", timeout=_STREAM_TIMEOUT) as resp:
                if resp.status != 200:
                    raise ApiError(f"GET /v1/events: HTTP {resp.status}")
                yield None
                parser = SseParser()
                async for raw in resp.content:
                    event = parser.feed(raw.decode("utf-8", "replace"))
                    if event is not None:
                        yield event
        except (aiohttp.ClientError, asyncio.TimeoutError):
            raise NoNodeRunning(self.home) from None


class SseParser:
    """Turns the lines of a server-sent event stream into event dicts (the ``data`` JSON)."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> dict | None:
        """Take one line; return the event it completes, if any. Bad JSON events are skipped."""
        line = line.rstrip("\r\n")
        if not line:
            data, self._data = self._data, []
            if not data:
                return None
            try:
                event = json.loads("\n".join(data))
            except ValueError:
                return None
            return event if isinstance(event, dict) and "type" in event else None
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value.removeprefix(" "))
        return None


# -- formatting shared with the dashboard -------------------------------------------------------


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


def format_ago(timestamp: float | None, now: float | None = None) -> str:
    if not timestamp:
        return "never"
    return format_duration((now or time.time()) - timestamp) + " ago"


def format_reward(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def short_peer_id(peer_id: str) -> str:
    return peer_id if len(peer_id) <= 16 else f"{peer_id[:8]}…{peer_id[-6:]}"


def status_lines(status: dict) -> list[str]:
    """The human form of ``/v1/status``."""
    rows = [
        ("node", f"{status['name']} ({status['peer_id']})"),
        ("swarm", f"{status['swarm']} over {status['transport']}"),
        ("model", f"{status['model']} on {status['device']}"),
        ("round", f"{status['round']} ({status['phase']}{', paused' if status['paused'] else ''})"),
        ("uptime", format_duration(status["uptime_s"])),
        ("peers", str(status["peers"])),
        ("reward", f"{format_reward(status['last_reward'])} (last round's mean)"),
        ("signal", f"{format_reward(status.get('signal_rate'))} (share of last round's groups with signal)"),
        ("levels", format_levels(status.get("levels") or {}, status.get("dormant") or ())),
        ("yardst.", format_yardstick(status.get("yardstick"))),
    ]
    threads = status.get("threads") or {}
    if threads:
        rows.append(("threads", f"{threads['count']} ({threads['reason']})"))
    if status.get("priority"):
        rows.append(("priority", status["priority"]))
    return [f"{key:<8} {value}" for key, value in rows]


def format_levels(levels: dict, dormant: Iterable[str] = ()) -> str:
    """``family level`` pairs, short, a dormant family's level in brackets: ``base_conversion -2,
    bf (0)``; '-' when there are none."""
    dormant = set(dormant)
    return ", ".join(f"{family} ({level})" if family in dormant else f"{family} {level}"
                     for family, level in sorted(levels.items())) or "-"


def format_yardstick(record: dict | None) -> str:
    """The latest yardstick record in a few words; '-' before the first."""
    if record is None:
        return "-"
    return f"{format_reward(record['score'])} greedy on {record['questions']} held-out questions, " \
           f"after {record['round']} rounds"


def peer_table_lines(peers: list[dict], now: float | None = None) -> list[str]:
    """The human form of ``/v1/peers``: one aligned row per peer."""
    if not peers:
        return ["no peers seen yet"]
    header = ("NAME", "PEER ID", "LAST SEEN", "ACCEPTED", "REJECTED", "ROUND", "REWARD")
    rows = [header] + [(
        p.get("name") or "-", short_peer_id(p["peer_id"]), format_ago(p.get("last_seen"), now),
        str(p.get("accepted", 0)), str(p.get("rejected", 0)),
        "-" if p.get("last_round") is None else str(p["last_round"]),
        format_reward(p.get("reported_mean_reward")),
    ) for p in peers]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
