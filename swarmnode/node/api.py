"""The node's local HTTP API (aiohttp), bound to 127.0.0.1 only.

Read-only ``GET`` endpoints need no credentials: only processes on this machine can reach
them. Endpoints that change the node (``POST /v1/stop``, ``/v1/pause``, ``/v1/resume``) need
the bearer token that :meth:`ApiServer.start` writes, with the port, to ``<home>/api.json``
(mode 0600, so only the node's user can read it). Every answer, errors included, is JSON,
except ``/metrics`` (Prometheus text) and ``/v1/events`` (server-sent events); no answer
ever carries a traceback.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import secrets
import socket
import tempfile
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from swarmnode.node.families import registry_of
from swarmnode.node.gainmetrics import with_drawn
from swarmnode.node.prometheus import node_families
from swarmnode.node.state import NodeState
from swarmnode.paths import NodeHome
from swarmnode.swarm.transport.counters import TransportCounters

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
MAX_BODY = 1024  # POSTs carry no body; anything bigger is refused before it is read
KEEPALIVE_S = 15.0
# generate_latest writes the text format 0.0.4 (metric and label names escaped to it)
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_CLOSE = object()  # put in an event queue to end its stream


class NodeControl(Protocol):
    """What the API may ask of the node (the daemon implements it)."""

    def request_stop(self) -> None: ...

    def pause(self) -> None:
        """Start no new round until :meth:`resume`; bundles and the API keep being served."""

    def resume(self) -> None: ...

    def peer_rows(self) -> list[dict]:
        """One dict per known peer: peer_id, name, first_seen, last_seen, accepted, rejected,
        rejected_by_reason, last_round, reported_mean_reward, model (the name its latest accepted
        bundle gave, made safe to print; None before one), left_out_by_reason, logprob_measured,
        via ("lan" for a peer this node joined through an address found on the local network,
        else None)."""
        ...

    def join_addresses(self) -> list[str]:
        """Where a new node should dial to join through this one: its own dialable addresses,
        or its bootstrap peers' (its relays) when it has none; empty when solo."""
        ...

    def peer_count(self) -> int:
        """Peers connected now."""
        ...

    def swarm_key(self) -> str | None:
        """The private swarm's key (its text form), None for a public swarm. Served only with
        the bearer token: whoever holds it can join."""
        ...

    def transport_stats(self) -> dict[str, int]:
        """The transport's counters since start (published, delivered, ...); empty when solo."""
        ...
    def counters(self) -> TransportCounters | None:
        """The transport's own counters (what it refused, evicted and holds); None when solo
        or when the transport keeps none."""
        ...
    def credits(self) -> dict | None:
        """The receipt ledger's summary (``swarmnode.swarm.ledger``); None when solo."""


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message, "status": status}, status=status)


@web.middleware
async def _errors_as_json(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
    """Turn aiohttp's HTTP errors and any bug into a JSON answer without a traceback."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        return _error(413, f"request body over {MAX_BODY} bytes")
    if request.content_length is None and request.body_exists:
        # A chunked body has no length to check up front; no endpoint takes one anyway.
        return _error(411, "a request body needs a Content-Length")
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 404:
            return _error(404, f"no such endpoint: {request.method} {request.path}; see /v1/status")
        return _error(exc.status, exc.reason)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("API handler failed: %s %s", request.method, request.path)
        return _error(500, "internal error; see the node's log")


def _write_private_json(path: os.PathLike, data: dict) -> None:
    """Write ``data`` to ``path`` atomically, readable by the owner only."""
    directory = os.path.dirname(os.fspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".api-", suffix=".json", dir=directory)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


class LocalApi:
    """An aiohttp app bound to 127.0.0.1 only, answering only requests for that host, whose
    port and bearer token :meth:`start` writes to ``<home>/api.json``; subclasses add their
    routes (:meth:`_routes`). :meth:`start` and :meth:`stop` run on the owner's loop."""

    def __init__(self, *, home: NodeHome, port: int = 0):
        self.home = home
        self.port = port
        self.token = secrets.token_urlsafe(32)
        self.registry: CollectorRegistry = CollectorRegistry()  # what /metrics serves, where a subclass routes it
        self._runner: web.AppRunner | None = None

    @web.middleware
    async def _local_host_only(self, request: web.Request, handler):
        """Refuse requests for other host names: a web page that rebinds its own name to
        127.0.0.1 (DNS rebinding) must not read the node's API through the user's browser."""
        if request.host not in (f"{HOST}:{self.port}", f"localhost:{self.port}"):
            return _error(403, f"this API answers only requests for {HOST}:{self.port}")
        return await handler(request)

    def _routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self) -> int:
        """Bind 127.0.0.1, write ``<home>/api.json`` and return the port."""
        app = web.Application(middlewares=[_errors_as_json, self._local_host_only], client_max_size=MAX_BODY)
        self._routes(app)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((HOST, self.port))
        except OSError as exc:
            sock.close()
            await self._runner.cleanup()
            raise OSError(f"cannot open the API on {HOST}:{self.port} ({exc.strerror}); "
                          f"choose another --api-port, or 0 for a free one") from exc
        self.port = sock.getsockname()[1]  # the real port when 0 was asked
        await web.SockSite(self._runner, sock).start()
        try:
            _write_private_json(self.home.api_file, {
                "port": self.port, "token": self.token, "pid": os.getpid(), "url": f"http://{HOST}:{self.port}",
            })
        except OSError as exc:
            await self._runner.cleanup()
            raise OSError(f"cannot write {self.home.api_file} ({exc.strerror}); is the disk full or the "
                          "node's home not writable?") from exc
        return self.port

    async def _metrics(self, request: web.Request) -> web.Response:
        """``GET /metrics``: the Prometheus text of :attr:`registry` (its families made now)."""
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})

    async def stop(self) -> None:
        """Close the socket and remove ``api.json``."""
        try:
            self.home.api_file.unlink()
        except FileNotFoundError:
            pass
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class MetricsApi(LocalApi):
    """Only ``GET /metrics``, the families ``families()`` makes at each scrape (a relay's)."""

    def __init__(self, families: Callable[[], Iterable[Metric]], *, home: NodeHome, port: int = 0):
        super().__init__(home=home, port=port)
        self.registry = registry_of(families)

    def _routes(self, app: web.Application) -> None:
        app.router.add_get("/metrics", self._metrics)


class ApiServer(LocalApi):
    """Serves the API of one node; :meth:`start` and :meth:`stop` run on the node's loop."""

    def __init__(self, state: NodeState, control: NodeControl, *, home: NodeHome, port: int = 0,
                 keepalive_s: float = KEEPALIVE_S):
        super().__init__(home=home, port=port)
        self.state = state
        self.control = control
        self.keepalive_s = keepalive_s
        self.registry = registry_of(self._families)
        self._streams: set[asyncio.Queue] = set()

    def _routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/status", self._status)
        app.router.add_get("/v1/rounds", self._rounds)
        app.router.add_get("/v1/peers", self._peers)
        app.router.add_get("/v1/yardstick", self._yardstick)
        app.router.add_get("/v1/credits", self._credits)
        app.router.add_get("/v1/events", self._events)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/stop", self._authorized(self._stop))
        app.router.add_get("/v1/swarm-key", self._authorized(self._swarm_key))
        app.router.add_post("/v1/pause", self._authorized(self._pause))
        app.router.add_post("/v1/resume", self._authorized(self._resume))

    async def start(self) -> int:
        """Bind 127.0.0.1, write ``<home>/api.json`` and return the port."""
        self.state.bind_loop(asyncio.get_running_loop())
        return await super().start()

    async def stop(self) -> None:
        """End the event streams, close the socket and remove ``api.json``."""
        for q in list(self._streams):
            if q.full():
                q.get_nowait()
            q.put_nowait(_CLOSE)
        await super().stop()

    # -- read-only endpoints ----------------------------------------------------------------

    async def _status(self, request: web.Request) -> web.Response:
        info = self.state.info
        snap = self.state.snapshot()
        return web.json_response({
            "peer_id": info.peer_id, "name": info.name, "swarm": info.swarm, "transport": info.transport,
            "model": info.model, "device": info.device, "home": info.home, "priority": info.priority,
            "threads": snap["threads"], "round": snap["round"], "phase": snap["phase"], "paused": snap["paused"],
            "uptime_s": snap["uptime_s"], "peers": self.control.peer_count(), "last_reward": snap["last_reward"],
            "levels": snap["levels"], "dormant": snap["dormant"], "signal_rate": snap["signal_rate"],
            "yardstick": snap["yardstick"], "gain": snap["gain"], "yardstick_trend": snap["yardstick_trend"],
            "join_addresses": self.control.join_addresses(),
        })

    async def _rounds(self, request: web.Request) -> web.Response:
        raw = request.query.get("since", "0")
        try:
            since = int(raw)
        except ValueError:
            return _error(400, f"'since' must be a round number (an integer), got {raw!r}")
        return web.json_response({"rounds": [r.to_json() for r in self.state.rounds_since(since)]})

    async def _yardstick(self, request: web.Request) -> web.Response:
        return web.json_response({"yardstick": self.state.yardstick_records()})

    async def _peers(self, request: web.Request) -> web.Response:
        return web.json_response({"peers": with_drawn(self.control.peer_rows(), self.state.snapshot()["gain"])})

    async def _credits(self, request: web.Request) -> web.Response:
        return web.json_response({"credits": self.control.credits()})

    def _families(self) -> list[Metric]:
        """The node's ``/metrics`` families, read from its state and control at each scrape."""
        peers = with_drawn(self.control.peer_rows(), self.state.snapshot()["gain"])
        return node_families(self.state, self.control.peer_count(), self.control.transport_stats(),
                             self.control.counters(), peers, self.control.credits())

    async def _events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: ``event: <type>`` and ``data: <json>`` per event, in order."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        queue = self.state.subscribe()
        self._streams.add(queue)
        try:
            await response.prepare(request)
            await response.write(b": connected\n\n")
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), self.keepalive_s)
                except asyncio.TimeoutError:
                    await response.write(b": keepalive\n\n")
                    continue
                if event is _CLOSE:
                    break
                await response.write(sse_frame(event))
            await response.write_eof()
            return response
        except ConnectionError:  # the client went away
            return response
        finally:
            self._streams.discard(queue)
            self.state.unsubscribe(queue)

    # -- endpoints that change the node ---------------------------------------------------

    def _authorized(self, handler: Callable[[web.Request], Awaitable[web.Response]]):
        expected = f"Bearer {self.token}".encode()

        async def check(request: web.Request) -> web.Response:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return _error(401, "this action needs 'Authorization: Bearer <token>' with the token "
                                   "from the node's api.json")
            return await handler(request)

        return check

    async def _stop(self, request: web.Request) -> web.Response:
        self.control.request_stop()
        return web.json_response({"stopping": True})

    async def _swarm_key(self, request: web.Request) -> web.Response:
        return web.json_response({"swarm_key": self.control.swarm_key()})

    async def _pause(self, request: web.Request) -> web.Response:
        self.control.pause()
        return web.json_response({"paused": True})

    async def _resume(self, request: web.Request) -> web.Response:
        self.control.resume()
        return web.json_response({"paused": False})


def sse_frame(event: dict) -> bytes:
    """One server-sent event; the JSON holds no newline, so it fits one ``data:`` line."""
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n".encode()
