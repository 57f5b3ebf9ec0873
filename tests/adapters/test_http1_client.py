"""The stub provider's HTTP/1.1 client against real loopback servers that answer exactly the bytes a test writes.

What a user relies on: every answer is read whole however the server frames it, a connection is reused only when
its framing is known to be intact, and every way a request can go wrong ends as a `TimeoutError` or an `OSError`
(which the adapters classify as transport), never as a hang or a wrong answer handed to the next request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
import pytest_asyncio

from providers.http1_client import BadHttpAnswer, Http1Client, ServerDisconnected, split_url

Handler = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]
"""Given one request's head (and its body read), writes an answer; returns whether to keep the connection open."""


@dataclass
class ScriptedServer:
    handler: Handler
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                request = head + (await reader.readexactly(length) if length else b"")
                self.requests.append(request)
                if not await self.handler(request, writer):
                    break
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest_asyncio.fixture
async def scripted() -> AsyncIterator[Callable[[Handler], Awaitable[ScriptedServer]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> ScriptedServer:
        scripted = ScriptedServer(handler)
        server = await asyncio.start_server(scripted.serve, "127.0.0.1", 0)
        scripted.port = server.sockets[0].getsockname()[1]
        servers.append(server)
        return scripted

    yield start
    for server in servers:
        server.close()


def json_answer(body: object, status: int = 200, extra: str = "") -> bytes:
    data = json.dumps(body).encode()
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n{extra}\r\n"
    return head.encode() + data


async def echo_path(request: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(json_answer({"line": request.split(b"\r\n", 1)[0].decode()}))
    return True


async def test_keep_alive_reuses_one_connection_for_sequential_requests(scripted) -> None:
    server = await scripted(echo_path)
    client = Http1Client()
    try:
        for index in range(5):
            answer = await client.request("GET", f"{server.url}/api/v1/x{index}", timeout=5)
            assert answer.status == 200
            assert json.loads(answer.body) == {"line": f"GET /api/v1/x{index} HTTP/1.1"}
        assert server.connections == 1
        assert client.open_connections == 1
    finally:
        await client.close()


async def test_concurrent_requests_never_queue_behind_each_other(scripted) -> None:
    """No client-side cap: 50 requests at once open 50 connections, as the stub needs for a 960-wide burst."""
    release = asyncio.Event()

    async def slow(request: bytes, writer: asyncio.StreamWriter) -> bool:
        await release.wait()
        writer.write(json_answer({}))
        return True

    server = await scripted(slow)
    client = Http1Client()
    try:
        tasks = [asyncio.ensure_future(client.request("GET", f"{server.url}/", timeout=10)) for _ in range(50)]
        for _ in range(200):
            if server.connections == 50:
                break
            await asyncio.sleep(0.01)
        assert server.connections == 50
        release.set()
        assert [answer.status for answer in await asyncio.gather(*tasks)] == [200] * 50
        assert client.open_connections == 50  # all idle, kept for the next wave
    finally:
        await client.close()


async def test_chunked_and_read_to_close_bodies_are_read_whole(scripted) -> None:
    async def chunked(request: bytes, writer: asyncio.StreamWriter) -> bool:
        if b"/chunked" in request:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for part in (b'{"a":', b' 1, "b": ', b'"' + b"x" * 5000 + b'"}'):
                writer.write(f"{len(part):x};ext=1\r\n".encode() + part + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\nX-Trailer: y\r\n\r\n")
            return True
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b'{"closed": true}')
        return False

    server = await scripted(chunked)
    client = Http1Client()
    try:
        answer = await client.request("GET", f"{server.url}/chunked", timeout=5)
        assert json.loads(answer.body) == {"a": 1, "b": "x" * 5000}
        again = await client.request("GET", f"{server.url}/chunked", timeout=5)
        assert again.body == answer.body and server.connections == 1  # chunked framing intact: reused
        closed = await client.request("GET", f"{server.url}/close", timeout=5)
        assert json.loads(closed.body) == {"closed": True}
        await client.request("GET", f"{server.url}/chunked", timeout=5)
        assert server.connections == 2  # a body delimited by the close is never followed on that connection
    finally:
        await client.close()


async def test_a_cut_off_answer_is_a_transport_error_not_a_short_body(scripted) -> None:
    async def truncated(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b'{"partial"')
        return False

    server = await scripted(truncated)
    client = Http1Client()
    try:
        with pytest.raises(ServerDisconnected):
            await client.request("GET", f"{server.url}/", timeout=5)
        assert client.open_connections == 0
    finally:
        await client.close()


async def test_garbage_instead_of_http_is_an_oserror(scripted) -> None:
    async def garbage(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        return True

    server = await scripted(garbage)
    client = Http1Client()
    try:
        with pytest.raises(BadHttpAnswer) as caught:
            await client.request("GET", f"{server.url}/", timeout=5)
        assert isinstance(caught.value, OSError)
    finally:
        await client.close()


@pytest.mark.parametrize("ending", ["timeout", "cancel"])
async def test_a_request_that_ended_unanswered_never_lends_its_connection_to_the_next(scripted, ending) -> None:
    """The late answer of a timed-out or cancelled request must not be read as the next request's answer."""

    async def late_then_prompt(request: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.5 if b"/slow" in request else 0)
        writer.write(json_answer({"path": request.split(b" ")[1].decode()}))
        return True

    server = await scripted(late_then_prompt)
    client = Http1Client()
    try:
        if ending == "timeout":
            with pytest.raises(TimeoutError):
                await client.request("GET", f"{server.url}/slow", timeout=0.1)
        else:
            task = asyncio.ensure_future(client.request("GET", f"{server.url}/slow", timeout=5))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        answer = await client.request("GET", f"{server.url}/fast", timeout=5)
        assert json.loads(answer.body) == {"path": "/fast"}
        assert server.connections == 2
    finally:
        await client.close()


async def test_a_server_that_drops_idle_connections_leaves_nothing_behind(scripted) -> None:
    async def once(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(json_answer({"ok": True}))
        await writer.drain()
        return False  # the server closes right after answering, without saying so

    server = await scripted(once)
    client = Http1Client()
    try:
        for _ in range(3):
            assert (await client.request("GET", f"{server.url}/", timeout=5)).status == 200
            for _ in range(100):
                if client.open_connections == 0:
                    break
                await asyncio.sleep(0.01)
            assert client.open_connections == 0
        assert server.connections == 3
    finally:
        await client.close()


async def test_request_headers_body_query_and_case_insensitive_answer_headers(scripted) -> None:
    async def throttle(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(json_answer({"detail": "slow down"}, status=429, extra="Retry-After: 3\r\n"))
        return True

    server = await scripted(throttle)
    client = Http1Client(headers={"Authorization": "Bearer main", "User-Agent": "test"})
    try:
        answer = await client.request(
            "POST",
            f"{server.url}/api/v1/sandbox",
            body=b'{"x":1}',
            params=[("labels", "a=b"), ("page", 2)],
            headers={"authorization": "Bearer gateway"},
            timeout=5,
        )
        assert answer.status == 429
        assert answer.headers.get("Retry-After") == "3" and answer.headers["retry-after"] == "3"
        sent = server.requests[0]
        assert sent.startswith(b"POST /api/v1/sandbox?labels=a%3Db&page=2 HTTP/1.1\r\n")
        assert f"Host: 127.0.0.1:{server.port}".encode() in sent
        assert b"authorization: Bearer gateway" in sent and b"Bearer main" not in sent
        assert b"User-Agent: test" in sent and b"Content-Length: 7" in sent and sent.endswith(b'{"x":1}')
    finally:
        await client.close()


async def test_no_content_and_interim_answers(scripted) -> None:
    async def answers(request: bytes, writer: asyncio.StreamWriter) -> bool:
        if request.startswith(b"DELETE"):
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + json_answer({"after": "continue"}))
        return True

    server = await scripted(answers)
    client = Http1Client()
    try:
        deleted = await client.request("DELETE", f"{server.url}/x", timeout=5)
        assert (deleted.status, deleted.body) == (204, b"")
        answer = await client.request("POST", f"{server.url}/y", body=b"{}", timeout=5)
        assert json.loads(answer.body) == {"after": "continue"}
        assert server.connections == 1
    finally:
        await client.close()


async def test_a_refused_connection_is_an_oserror() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    client = Http1Client()
    try:
        with pytest.raises(OSError):
            await client.request("GET", f"http://127.0.0.1:{port}/", timeout=5)
    finally:
        await client.close()


def test_urls_split_into_origin_and_target() -> None:
    origin, target = split_url("http://127.0.0.1:8080/api/v1/sandbox?x=1")
    assert (origin.host, origin.port, origin.host_header, target) == (
        "127.0.0.1",
        8080,
        "127.0.0.1:8080",
        "/api/v1/sandbox?x=1",
    )
    origin, target = split_url("https://api.example.com")
    assert (origin.tls, origin.port, origin.host_header, target) == (True, 443, "api.example.com", "/")
    with pytest.raises(ValueError):
        split_url("ftp://example.com/")
