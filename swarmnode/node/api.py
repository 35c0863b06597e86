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
import math
import os
import secrets
import socket
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from aiohttp import web

from swarmnode.node.gainmetrics import gain_families, with_drawn
from swarmnode.node.state import NodeState
from swarmnode.paths import NodeHome

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
MAX_BODY = 1024  # POSTs carry no body; anything bigger is refused before it is read
KEEPALIVE_S = 15.0
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
        bundle gave, made safe to print; None before one)."""

    def peer_count(self) -> int:
        """Peers connected now."""

    def transport_stats(self) -> dict[str, int]:
        """The transport's counters since start (published, delivered, ...); empty when solo."""
    def refusals(self) -> dict[str, int]:
        """The transport's own counters: ``refused_<reason>``, ``evicted``, ``stored_bytes``,
        ``cached_bytes`` (hivemind's DHT; empty for other transports)."""


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
    """Only ``GET /metrics``, whose Prometheus text ``text()`` makes (a relay's)."""

    def __init__(self, text: Callable[[], str], *, home: NodeHome, port: int = 0):
        super().__init__(home=home, port=port)
        self._text = text

    def _routes(self, app: web.Application) -> None:
        app.router.add_get("/metrics", self._metrics)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self._text().encode(), headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})


class ApiServer(LocalApi):
    """Serves the API of one node; :meth:`start` and :meth:`stop` run on the node's loop."""

    def __init__(self, state: NodeState, control: NodeControl, *, home: NodeHome, port: int = 0,
                 keepalive_s: float = KEEPALIVE_S):
        super().__init__(home=home, port=port)
        self.state = state
        self.control = control
        self.keepalive_s = keepalive_s
        self._streams: set[asyncio.Queue] = set()

    def _routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/status", self._status)
        app.router.add_get("/v1/rounds", self._rounds)
        app.router.add_get("/v1/peers", self._peers)
        app.router.add_get("/v1/yardstick", self._yardstick)
        app.router.add_get("/v1/events", self._events)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/stop", self._authorized(self._stop))
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

    async def _metrics(self, request: web.Request) -> web.Response:
        peers = with_drawn(self.control.peer_rows(), self.state.snapshot()["gain"])
        body = prometheus_text(self.state, self.control.peer_count(), self.control.transport_stats(),
                               self.control.refusals(), peers).encode()
        return web.Response(body=body, headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})

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

    async def _pause(self, request: web.Request) -> web.Response:
        self.control.pause()
        return web.json_response({"paused": True})

    async def _resume(self, request: web.Request) -> web.Response:
        self.control.resume()
        return web.json_response({"paused": False})


def sse_frame(event: dict) -> bytes:
    """One server-sent event; the JSON holds no newline, so it fits one ``data:`` line."""
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


# -- Prometheus text exposition format --------------------------------------------------------


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value) if isinstance(value, float) else str(value)


class _Exposition:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str,
               samples: list[tuple[str, dict[str, str], Any]]) -> None:
        help_text = help_text.replace("\\", "\\\\").replace("\n", "\\n")
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for sample_name, labels, value in samples:
            label_text = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels.items())
            self.lines.append(f"{sample_name}{{{label_text}}} {_number(value)}" if labels
                              else f"{sample_name} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def prometheus_text(state: NodeState, peers: int, transport: Mapping[str, int] | None = None,
                    refusals: Mapping[str, int] | None = None, peer_rows: list[dict] | None = None) -> str:
    """The node's metrics in the Prometheus text format (version 0.0.4): ``transport`` and
    ``refusals`` as :meth:`NodeControl.transport_stats` and :meth:`NodeControl.refusals` give
    them (their families only when there are some); ``peer_rows`` as :func:`with_drawn` gives
    them (see :func:`swarmnode.node.gainmetrics.gain_families`)."""
    snap = state.snapshot()
    finished = snap["rounds_finished"]
    out = _Exposition()
    out.family("swarmnode_rounds_total", "counter", "Rounds finished since the node started.",
               [("swarmnode_rounds_total", {}, finished)])
    out.family("swarmnode_round", "gauge", "The round the node is in.", [("swarmnode_round", {}, snap["round"])])
    out.family("swarmnode_reward_last", "gauge", "Mean reward of the node's own completions in the last round.",
               [("swarmnode_reward_last", {}, snap["last_reward"])])
    out.family("swarmnode_reward_mean", "gauge", "Mean reward over the rounds finished since the node started.",
               [("swarmnode_reward_mean", {}, snap["reward_sum"] / finished if finished else None)])
    out.family("swarmnode_tokens_generated_total", "counter", "Completion tokens generated since the node started.",
               [("swarmnode_tokens_generated_total", {}, snap["tokens_generated"])])
    bundles = snap["bundles"]
    out.family("swarmnode_bundles_total", "counter",
               "Rollout bundles received from peers, by outcome (and reason, for rejected ones).",
               [("swarmnode_bundles_total", {"outcome": outcome, "reason": reason}, count)
                for (outcome, reason), count in sorted(bundles.items())]
               or [("swarmnode_bundles_total", {"outcome": "accepted", "reason": ""}, 0)])
    out.family("swarmnode_peers", "gauge", "Peers connected now.", [("swarmnode_peers", {}, peers)])
    out.family("swarmnode_paused", "gauge", "1 while the node is paused (starts no new round).",
               [("swarmnode_paused", {}, int(snap["paused"]))])
    threads = snap["threads"]
    out.family("swarmnode_threads", "gauge", "Torch intra-op threads the node uses now (see /v1/status for why).",
               [("swarmnode_threads", {}, threads.get("count"))])
    out.family("swarmnode_signal_rate", "gauge",
               "Share of the last round's groups (local and external) with non-zero advantage.",
               [("swarmnode_signal_rate", {}, snap["signal_rate"])])
    out.family("swarmnode_level", "gauge", "Difficulty level of each task family (the next round draws at it).",
               [("swarmnode_level", {"family": f}, lv) for f, lv in sorted(snap["levels"].items())])
    out.family("swarmnode_family_dormant", "gauge",
               "1 for a task family drawn rarely because its last groups at an end of its ladder had no signal.",
               [("swarmnode_family_dormant", {"family": f}, int(f in snap["dormant"])) for f in sorted(snap["levels"])])
    yardstick = snap["yardstick"]
    out.family("swarmnode_yardstick_score", "gauge",
               "Greedy score on the fixed held-out yardstick, latest record, overall and by family.",
               [] if yardstick is None else
               [("swarmnode_yardstick_score", {"family": ""}, yardstick["score"])]
               + [("swarmnode_yardstick_score", {"family": f}, v) for f, v in yardstick["by_family"].items()])
    out.family("swarmnode_yardstick_round", "gauge", "Rounds trained when the latest yardstick record was taken.",
               [("swarmnode_yardstick_round", {}, None if yardstick is None else yardstick["round"])])
    out.family("swarmnode_round_seconds", "summary", "Wall-clock seconds per finished round.",
               [("swarmnode_round_seconds_sum", {}, float(snap["round_seconds_sum"])),
                ("swarmnode_round_seconds_count", {}, finished)])
    _transport_families(out, transport, refusals)
    gain_families(out, snap["gain"], snap["yardstick_trend"], peer_rows or [])
    return out.text()


def _transport_families(out: _Exposition, transport: Mapping[str, int] | None,
                        refusals: Mapping[str, int] | None) -> None:
    """The transport's families, each only when there is something to show: its events
    (:meth:`NodeControl.transport_stats`) and what it refused, evicted and holds
    (:meth:`NodeControl.refusals`)."""
    if transport:
        out.family("swarmnode_transport_events_total", "counter",
                   "Transport events since start: bundles published, publish errors, messages delivered to the "
                   "node, duplicates dropped, handler errors, join attempts.",
                   [("swarmnode_transport_events_total", {"event": name}, count)
                    for name, count in sorted(transport.items())])
    if not refusals:
        return
    refused = sorted((k.removeprefix("refused_"), n) for k, n in refusals.items() if k.startswith("refused_"))
    out.family("swarmnode_transport_refused_total", "counter",
               "Records the transport itself refused (hivemind: its DHT's validator and storage; libp2p: "
               "pushes, holds and announcements it dropped), by reason.",
               [("swarmnode_transport_refused_total", {"reason": r}, n) for r, n in refused]
               or [("swarmnode_transport_refused_total", {"reason": ""}, 0)])
    out.family("swarmnode_transport_evicted_total", "counter",
               "Records the transport's stores evicted to stay within their bounds.",
               [("swarmnode_transport_evicted_total", {}, refusals.get("evicted", 0))])
    out.family("swarmnode_transport_stored_bytes", "gauge",
               "Bytes of peers' records the transport holds now: by store (stored, cached, held) and by the "
               "signers' standing with it (newcomer, established; hivemind's announcements apart: announce_*).",
               [("swarmnode_transport_stored_bytes", {"store": store}, refusals[f"{store}_bytes"])
                for store in ("stored", "cached", "held", "newcomer", "established", "announce_newcomer",
                              "announce_established") if f"{store}_bytes" in refusals])
    stores = [(how, refusals[f"announce_{how}"]) for how in ("direct", "traversal", "direct_failed")
              if f"announce_{how}" in refusals]
    if stores:
        out.family("swarmnode_transport_announce_stores_total", "counter",
                   "This node's announcements stored straight at its shard's remembered replicas (direct), by a "
                   "DHT traversal, and direct stores that reached too few and traversed in the same round "
                   "(direct_failed, counted in both).",
                   [("swarmnode_transport_announce_stores_total", {"how": how}, n) for how, n in stores])
    out.family("swarmnode_transport_signers", "gauge",
               "Signers whose records the transport holds now, by standing with it (announcements: announce_*).",
               [("swarmnode_transport_signers", {"standing": standing}, refusals[plural])
                for standing, plural in (("newcomer", "newcomers"), ("established", "established"),
                                         ("announce_newcomer", "announce_newcomers"),
                                         ("announce_established", "announce_established"))
                if plural in refusals])


def relay_prometheus_text(peers: int, transport: Mapping[str, int], refusals: Mapping[str, int],
                          holds: Mapping[str, int]) -> str:
    """A relay's metrics in the Prometheus text format: its peers, its transport's families
    (see :func:`prometheus_text`) and ``holds``, the bundles private peers left with it
    (libp2p) by outcome (``held``, ``dropped``)."""
    out = _Exposition()
    out.family("swarmnode_peers", "gauge", "Peers connected now.", [("swarmnode_peers", {}, peers)])
    _transport_families(out, transport, refusals)
    out.family("swarmnode_relay_holds_total", "counter",
               "Bundles private peers pushed to this relay to hold, by outcome (libp2p).",
               [("swarmnode_relay_holds_total", {"outcome": outcome}, n) for outcome, n in sorted(holds.items())])
    return out.text()

