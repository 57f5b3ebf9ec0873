"""The HTTP/1.1 client streams a large request body without copying it (a repository's tar to 960 sandboxes at once).

What a user relies on: a body of tens of MB (or a multipart form of parts around shared data) arrives intact, the
engine's memory while sending it stays within a few chunks however large the body, and a peer that stops reading
makes the client wait, not buffer the rest. The peers are real processes on loopback, so tracemalloc counts only the
client's own allocations.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from providers.http1_client import CHUNK_BYTES, Http1Client, _Connection

BODY_BYTES = 50 * 1024 * 1024
PEAK_BOUND = 8 * CHUNK_BYTES  # a few chunks in flight: the transport's buffer and one slice, never the body

# Reads one request (head, then Content-Length bytes in pieces, hashed as they come) and answers its size and hash.
_HASHING_PEER = r"""
import hashlib, json, socket, sys
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
data = b""
while b"\r\n\r\n" not in data:
    data += conn.recv(65536)
head, _, rest = data.partition(b"\r\n\r\n")
length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:"))
digest, seen = hashlib.sha256(rest), len(rest)
while seen < length:
    piece = conn.recv(1 << 20)
    if not piece:
        break
    digest.update(piece)
    seen += len(piece)
body = json.dumps({"bytes": seen, "sha256": digest.hexdigest()}).encode()
conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
conn.close()
"""

# Accepts one connection and never reads from it (a stuck gateway); a small receive buffer keeps the kernel's share
# of the body small, so the client's own flow control is what holds the rest.
_SILENT_PEER = r"""
import socket, sys, time
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
server.bind(("127.0.0.1", 0))
server.listen(1)
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
time.sleep(120)
"""


def _peer(script: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield process, int(process.stdout.readline())
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def hashing_peer() -> Iterator[tuple[subprocess.Popen[str], int]]:
    yield from _peer(_HASHING_PEER)


@pytest.fixture
def silent_peer() -> Iterator[tuple[subprocess.Popen[str], int]]:
    yield from _peer(_SILENT_PEER)


@pytest.fixture
def roomy_silent_peer() -> Iterator[tuple[subprocess.Popen[str], int]]:
    yield from _peer(_SILENT_PEER.replace("server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)\n", ""))


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


async def test_a_50_mb_form_arrives_intact_and_the_client_holds_a_few_chunks_of_it(hashing_peer, traced) -> None:
    _, port = hashing_peer
    data = bytes(range(256)) * (BODY_BYTES // 256)
    prefix, suffix = b"--b\r\nContent-Disposition: form-data; name=file\r\n\r\n", b"\r\n--b--\r\n"
    expected = hashlib.sha256(prefix + data + suffix).hexdigest()
    client = Http1Client()
    tracemalloc.reset_peak()
    before, _ = tracemalloc.get_traced_memory()
    answer = await client.request(
        "POST", f"http://127.0.0.1:{port}/upload", body=(prefix, data, suffix), content_type="x", timeout=60
    )
    _, peak = tracemalloc.get_traced_memory()
    await client.close()
    assert answer.status == 200
    assert json.loads(answer.body) == {"bytes": len(prefix) + BODY_BYTES + len(suffix), "sha256": expected}
    assert peak - before < PEAK_BOUND, f"the client held {peak - before} bytes sending a {BODY_BYTES}-byte body"


async def test_a_peer_that_stops_reading_pauses_the_client_instead_of_filling_its_buffer(silent_peer, traced) -> None:
    _, port = silent_peer
    data = bytes(BODY_BYTES)
    client = Http1Client()
    tracemalloc.reset_peak()
    before, _ = tracemalloc.get_traced_memory()
    sending = asyncio.create_task(client.request("POST", f"http://127.0.0.1:{port}/", body=data, timeout=120))
    connection = None
    for _ in range(2000):  # until the transport said stop (bounded in turns, not in seconds)
        await asyncio.sleep(0.005)
        connection = next(iter(client._open), None)
        if connection is not None and connection._paused:
            break
    assert connection is not None and connection._paused, "the transport never paused the writer"
    for _ in range(20):  # the loop keeps turning while the peer reads nothing: the writer must stay parked
        await asyncio.sleep(0.005)
    assert connection.transport is not None
    _, high = connection.transport.get_write_buffer_limits()
    buffered = connection.transport.get_write_buffer_size()
    _, peak = tracemalloc.get_traced_memory()
    assert not sending.done()
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending
    await client.close()
    assert buffered <= high + CHUNK_BYTES, f"{buffered} bytes buffered past the high-water mark {high}"
    assert peak - before < PEAK_BOUND, f"the client held {peak - before} bytes of a {BODY_BYTES}-byte body"
    assert client.open_connections == 0  # the cut-off request's connection is closed, never reused


async def test_an_answer_before_the_whole_body_ends_the_stream_and_retires_the_connection() -> None:
    """A gateway that refuses an upload from its head (413) answers before the body arrived: the client takes the
    answer, stops sending, and does not lend the half-written connection to the next request."""
    connections = 0

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        head = await reader.readuntil(b"\r\n\r\n")
        if head.startswith(b"POST"):
            writer.write(b"HTTP/1.1 413 Too Large\r\nContent-Length: 2\r\n\r\nno")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await asyncio.sleep(0.5)  # neither reads the body nor closes at once
        writer.close()

    server = await asyncio.start_server(refuse, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = Http1Client()
    try:
        refused = await client.request("POST", f"http://127.0.0.1:{port}/", body=bytes(BODY_BYTES), timeout=30)
        after = await client.request("GET", f"http://127.0.0.1:{port}/", timeout=30)
    finally:
        await client.close()
        server.close()
    assert (refused.status, refused.body) == (413, b"no")
    assert (after.status, after.body) == (200, b"ok")
    assert connections == 2


async def test_other_tasks_run_between_the_chunks_of_a_large_body(roomy_silent_peer, monkeypatch) -> None:
    """A loopback peer's socket buffers take megabytes before the transport pauses; 960 bodies each written in one
    go held the engine's loop for seconds (its timers, every other rollout's calls). Each chunk is a turn of the loop:
    by the time the transport first pauses, other tasks ran between the chunks that went out."""
    _, port = roomy_silent_peer
    turns = 0
    at_head: list[int] = []
    at_pause: list[int] = []
    send, pause = _Connection.send, _Connection.pause_writing

    def noting_send(self: _Connection, request: bytes, no_body: bool) -> Any:
        at_head.append(turns)
        return send(self, request, no_body)

    def noting_pause(self: _Connection) -> None:
        at_pause.append(turns)
        pause(self)

    monkeypatch.setattr(_Connection, "send", noting_send)
    monkeypatch.setattr(_Connection, "pause_writing", noting_pause)

    async def ticker() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    client = Http1Client()
    ticking = asyncio.create_task(ticker())
    sending = asyncio.create_task(
        client.request("POST", f"http://127.0.0.1:{port}/", body=bytes(BODY_BYTES), timeout=60)
    )
    for _ in range(2000):  # until the transport said stop (bounded in turns, not in seconds)
        await asyncio.sleep(0.005)
        if at_pause:
            break
    ticking.cancel()
    sending.cancel()
    await asyncio.gather(ticking, sending, return_exceptions=True)
    await client.close()
    assert at_head and at_pause, "the transport never paused the writer"
    between = at_pause[0] - at_head[0]
    assert between >= 4, f"only {between} turns of the loop between the head and the transport's first pause"
