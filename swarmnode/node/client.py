"""Talking to a running node through its local API (the client of ``swarmnode status``,
``peers`` and the dashboard).

A node writes ``<home>/api.json`` (port, bearer token, pid) when its API is up and removes
it on exit. :class:`NoNodeRunning` covers every way of finding no node: no file, a file left
by a process that is gone, or a port that refuses connections.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any, AsyncIterator

import aiohttp

from swarmnode.events import NodeEvent, parse_event
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
    def read(cls, home: NodeHome) -> "ApiEndpoint":
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

    async def __aenter__(self) -> "NodeApi":
        self._session = aiohttp.ClientSession(self.endpoint.url)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._session is not None
        await self._session.close()

    async def _request(self, method: str, path: str, *, auth: bool = False) -> Any:
        assert self._session is not None, "use NodeApi inside 'async with'"
        if self._session.closed:
            # A caller that kept this client across an await (a dashboard key press) may find
            # that its owner has closed it since: to that caller the node is gone.
            raise NoNodeRunning(self.home)
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

    async def credits(self) -> dict | None:
        return (await self._request("GET", "/v1/credits"))["credits"]

    async def rounds(self, since: int = 0) -> list[dict]:
        return (await self._request("GET", f"/v1/rounds?since={since}"))["rounds"]

    async def swarm_key(self) -> str | None:
        """The node's private swarm key (needs the token of ``api.json``), None when public."""
        return (await self._request("GET", "/v1/swarm-key", auth=True))["swarm_key"]

    async def pause(self) -> dict:
        return await self._request("POST", "/v1/pause", auth=True)

    async def resume(self) -> dict:
        return await self._request("POST", "/v1/resume", auth=True)

    async def stop(self) -> dict:
        return await self._request("POST", "/v1/stop", auth=True)

    async def events(self) -> AsyncIterator[NodeEvent | None]:
        """Follow ``/v1/events``: yields None once connected, then each event.

        Events of a type this version does not know (a newer node's) are skipped. Ends when
        the node closes the stream; raises :class:`NoNodeRunning` if it cannot connect.
        """
        assert self._session is not None, "use NodeApi inside 'async with'"
        try:
            async with self._session.get("/v1/events", timeout=_STREAM_TIMEOUT) as resp:
                if resp.status != 200:
                    raise ApiError(f"GET /v1/events: HTTP {resp.status}")
                yield None
                parser = SseParser()
                async for raw in resp.content:
                    data = parser.feed(raw.decode("utf-8", "replace"))
                    event = None if data is None else parse_event(data)
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
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None
