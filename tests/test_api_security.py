"""The local API under attack: where it listens, its token, path traversal and request sizes.

A real :class:`ApiServer` (with the fake node control of ``apifakes``); requests are written
as raw bytes on a socket where a client library would clean them up first.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import psutil
import pytest

from apifakes import FakeControl, make_state
from swarmnode.node.api import MAX_BODY, ApiServer
from swarmnode.paths import NodeHome
from swarmnode.swarm.transport.base import local_ipv4_addresses


@pytest.fixture
async def api(tmp_path):
    home = NodeHome(tmp_path / "home").create()
    (home.root / "secret.txt").write_text("SECRET-FILE-CONTENT")
    control = FakeControl()
    server = ApiServer(make_state(), control, home=home)
    port = await server.start()
    yield server, control, port, home
    await server.stop()


async def raw(port: int, request: bytes, host: str = "127.0.0.1", timeout: float = 10.0) -> tuple[int, bytes]:
    """Send ``request`` as is; the status code and the whole answer."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), None)
        # A server may answer before a body it refuses has arrived, and then wait for it.
        body = await asyncio.wait_for(reader.readexactly(length) if length is not None else reader.read(-1), timeout)
    finally:
        writer.close()
    return int(head.split(b" ", 2)[1]), head + body


def get(path: str, port: int, extra: bytes = b"") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n".encode() + extra + b"\r\n"


async def test_listens_on_loopback_only(api):
    server, control, port, home = api
    listening = [c for c in psutil.Process().net_connections(kind="tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert [c.laddr.ip for c in listening] == ["127.0.0.1"]
    others = ["127.0.0.2"] + [a for a in local_ipv4_addresses() if not a.startswith("127.")]
    for address in others:  # another address of this very machine
        with pytest.raises(OSError):
            await asyncio.wait_for(asyncio.open_connection(address, port), 5)


@pytest.mark.parametrize("path", ["/v1/stop", "/v1/pause", "/v1/resume"])
async def test_actions_refuse_every_wrong_credential(api, path):
    server, control, port, home = api
    token = server.token
    wrong = [b"", b"Authorization: Bearer\r\n", b"Authorization: Bearer wrong\r\n",
             f"Authorization: Bearer {token[:-1]}\r\n".encode(), f"Authorization: Bearer {token}x\r\n".encode(),
             f"Authorization: bearer {token}\r\n".encode(), f"Authorization: Basic {token}\r\n".encode(),
             f"Authorization: {token}\r\n".encode(), f"X-Token: {token}\r\n".encode(),
             f"Cookie: token={token}\r\n".encode()]
    for headers in wrong:
        request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
                   "Content-Length: 0\r\n").encode() + headers + b"\r\n"
        status, answer = await raw(port, request)
        assert status == 401, (headers, answer)
    status, _ = await raw(port, get(f"{path}?token={token}", port))
    assert status == 405  # actions are POST only; a link cannot trigger one
    assert control.calls == []
    status, _ = await raw(port, (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
                                 f"Content-Length: 0\r\nAuthorization: Bearer {token}\r\n\r\n").encode())
    assert status == 200 and len(control.calls) == 1


TRAVERSALS = [
    "/api.json", "/v1/../api.json", "/v1/%2e%2e/api.json", "/v1/%2E%2E/%2E%2E/api.json", "/%2e%2e/secret.txt",
    "/v1/status/../../secret.txt", "/v1/..%2fapi.json", "/v1/%2e%2e%2fapi.json", "/..%5capi.json",
    "/v1/..\\api.json", "//etc/passwd", "/etc/passwd", "/v1/../../../../../../etc/passwd",
    "/v1/%252e%252e/api.json", "/v1/peers/..;/..;/api.json", "/v1/rounds?since=../../api.json",
    "/static/../api.json", "/v1/./././api.json",
]


@pytest.mark.parametrize("path", TRAVERSALS)
async def test_no_path_reads_a_file(api, path):
    server, control, port, home = api
    status, answer = await raw(port, get(path, port))
    assert status in (400, 403, 404), answer
    for secret in (server.token.encode(), b"SECRET-FILE-CONTENT", b"root:"):
        assert secret not in answer
    assert b"Traceback" not in answer


async def test_absolute_file_and_absolute_form_targets_read_nothing(api):
    server, control, port, home = api
    for target in (str(home.api_file), f"http://127.0.0.1:{port}/../api.json", f"file://{home.api_file}"):
        status, answer = await raw(port, get(target, port))
        assert status in (400, 403, 404) and server.token.encode() not in answer, (target, answer)


async def test_request_size_limits(api):
    server, control, port, home = api
    auth = f"Authorization: Bearer {server.token}\r\n"
    head = f"POST /v1/pause HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n{auth}"
    status, _ = await raw(port, (head + f"Content-Length: {MAX_BODY + 1}\r\n\r\n").encode() + b"x" * (MAX_BODY + 1))
    assert status == 413
    status, _ = await raw(port, (head + "Content-Length: 10000000000\r\n\r\n").encode())  # announced, never sent
    assert status == 413
    assert control.calls == []
    status, _ = await raw(port, get("/v1/status", port, b"X-Big: " + b"a" * 100_000 + b"\r\n"))
    assert status in (400, 431)
    status, _ = await raw(port, get("/v1/status?" + "a" * 100_000, port))
    assert status in (400, 414)
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(500))
    status, _ = await raw(port, get("/v1/status", port, many))
    assert status in (200, 400, 431)
    async with aiohttp.ClientSession() as session:  # the server is still there
        async with session.get(f"http://127.0.0.1:{port}/v1/status") as resp:
            assert resp.status == 200


async def test_a_chunked_body_is_refused_even_with_the_token(api):
    """No Content-Length: the size cannot be checked up front, so the body is refused (411)
    before anything reaches the node, token or not."""
    server, control, port, home = api
    chunk = b"y" * 65536
    body = b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(80)) + b"0\r\n\r\n"
    for auth in ("", f"Authorization: Bearer {server.token}\r\n"):
        request = (f"POST /v1/pause HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n{auth}"
                   "Transfer-Encoding: chunked\r\n\r\n").encode() + body
        status, answer = await raw(port, request)
        assert status == 411, answer
    assert control.calls == []


async def test_errors_carry_no_internals(api):
    """Errors the app sees are JSON; a request line aiohttp's parser cannot read is refused by
    the parser itself with a short plain-text 400 (before any app code runs)."""
    server, control, port, home = api
    for request in (get("/nope", port), get("/v1/rounds?since=%ff%fe", port)):
        status, answer = await raw(port, request)
        assert 400 <= status < 500 and "error" in json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert b"Traceback" not in answer and str(home.root).encode() not in answer
    for request in (b"BREW /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b"GET /v1/status HTTP/9.9\r\n\r\n",
                    b"\x00\xff\xfe garbage\r\n\r\n"):
        status, answer = await raw(port, request)
        assert status == 400 and b"Traceback" not in answer and str(home.root).encode() not in answer
