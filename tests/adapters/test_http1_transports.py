"""The SDKs' httpx and httpx2 clients over the keep-alive HTTP/1.1 client, against a real loopback server.

What a user relies on: a vendor SDK sees the answer its own transport would have given (status, headers, body),
every way the wire fails raised as the exception its httpcore raises (so the SDK retries what it retried before),
and, for httpx2 (Vercel's SDK), what must stream still goes through the SDK's own transport, as it comes.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator

import httpx
import httpx2
import pytest
import pytest_asyncio
from aiohttp import web

from providers.http1_transport import Http1Transport
from providers.http1_transport_httpx2 import Http1Httpx2Transport

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def server() -> AsyncIterator[str]:
    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        await asyncio.sleep(float(request.query.get("pause", "0")))
        seen = {"method": request.method, "path": request.path, "query": dict(request.query), "body": body.decode()}
        seen["auth"] = request.headers.get("authorization", "")
        return web.json_response(seen, status=int(request.query.get("status", "200")), headers={"x-seen": "1"})

    async def trickle(request: web.Request) -> web.StreamResponse:
        answer = web.StreamResponse()
        await answer.prepare(request)
        await answer.write(b'{"line": 1}\n')
        await asyncio.sleep(float(request.query.get("pause", "0")))
        await answer.write(b'{"line": 2}\n')
        await answer.write_eof()
        return answer

    app = web.Application()
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/cmd/logs", trickle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


def _refused_url() -> str:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    return f"http://127.0.0.1:{port}/echo"


class CountingTransport(httpx2.AsyncBaseTransport):
    """The SDK's own transport, counting what it was handed."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.paths: list[str] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.paths.append(request.url.path)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_an_httpx_client_gets_the_servers_answer_and_its_errors(server: str) -> None:
    async with httpx.AsyncClient(transport=Http1Transport(connect_timeout_s=5.0)) as client:
        answer = await client.post(f"{server}/echo?status=201&a=b", json={"k": "v"}, headers={"authorization": "t"})
        assert answer.status_code == 201 and answer.headers["x-seen"] == "1"
        assert answer.json() == {"method": "POST", "path": "/echo", "query": {"status": "201", "a": "b"},
                                 "body": '{"k":"v"}', "auth": "t"}  # fmt: skip
        with pytest.raises(httpx.ConnectError):
            await client.get(_refused_url())


async def test_httpx2_plain_requests_go_on_the_keep_alive_client_and_streams_on_the_sdks(server: str) -> None:
    fallback = CountingTransport()
    wire = Http1Httpx2Transport(5.0, fallback, streams=lambda request: request.url.path.endswith("/logs"))
    async with httpx2.AsyncClient(transport=wire) as client:
        for _ in range(3):
            answer = await client.delete(f"{server}/echo?status=404")
            assert answer.status_code == 404 and answer.json()["method"] == "DELETE"
        assert fallback.paths == []  # plain requests never reached the SDK's transport

        async def chunks() -> AsyncIterator[bytes]:
            yield b"part"

        streamed = await client.post(f"{server}/echo", content=chunks())
        assert streamed.json()["body"] == "part" and fallback.paths == ["/echo"]  # a streaming body: the SDK's

        async with client.stream("GET", f"{server}/cmd/logs?pause=0.5") as logs:
            lines = logs.aiter_lines()
            assert json.loads(await anext(lines)) == {"line": 1}
            first_at = time.monotonic()
            assert [json.loads(line) async for line in lines] == [{"line": 2}]
            assert time.monotonic() - first_at >= 0.4  # the first line was handed over before the server paused
        assert fallback.paths == ["/echo", "/cmd/logs"]

        with pytest.raises(httpx2.ConnectError):
            await client.get(_refused_url())
        with pytest.raises(httpx2.ReadTimeout):
            await client.get(f"{server}/echo?pause=1.5", timeout=0.2)
        assert fallback.paths == ["/echo", "/cmd/logs"]
