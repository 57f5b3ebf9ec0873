"""A small HTTP/1.1 client on asyncio protocols: the `stub` provider's wire, cheaper than aiohttp's request path.

Why not aiohttp: at 64 rollouts in flight a lifecycle's few JSON calls through `ClientSession.request` cost the
engine about as much CPU as a bare aiohttp loop's whole lifecycle (bench/bench_overhead.py), and that CPU is
taken from the machine the vendor under test shares, so the harness measured its own request path. This client
does only what a JSON API over keep-alive connections needs: one request line and a few headers written in one
`write` (a body past `STREAM_ABOVE_BYTES` streamed after them, see below), a response read by Content-Length,
chunked encoding or to the connection's close, one timer per request that aborts the connection at its deadline,
and an unbounded pool of idle keep-alive connections per origin (no client-side queue: a 960-wide burst opens 960
connections, as aiohttp's `limit=0` did). TLS is asyncio's own.

Failures are ordinary exceptions: a deadline is `TimeoutError`; a refused, reset or half-answered connection
and an answer that is not HTTP are `OSError`s (`ConnectionError` subclasses), which every adapter classifies as
transport. A connection that failed, timed out or was cancelled mid-request is closed, never reused.

A large body (a repository's tar, 20 MB, at 960 rollouts in flight) is streamed, never copied: it may be a sequence
of bytes-like parts (a multipart form's prefix, the shared data, its suffix), written as memoryview slices of
`CHUNK_BYTES` under the transport's flow control (`pause_writing`/`resume_writing`), so a request holds at most
about one chunk beyond the transport's high-water mark, however large its body and however slow its peer. Joining
the parts (or `transport.writelines`, which joins them in 3.11) held three copies of each body: 200 swe-task
rollouts took the engine to 11.4 GB.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlencode, urlsplit

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 256 * 1024 * 1024
IDLE_KEEP_S = 30.0  # an idle connection older than this is closed instead of reused (a server drops them too)
CHUNK_BYTES = 256 * 1024  # a streamed body is written in slices of this size, each only once the transport drained
STREAM_ABOVE_BYTES = CHUNK_BYTES  # a body up to this size goes with its head in one write

Body = bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview]
"""A request body: bytes-like, or a sequence of bytes-like parts sent back to back (never joined when large)."""


class ServerDisconnected(ConnectionError):
    """The connection ended before a whole answer arrived."""


class BadHttpAnswer(ConnectionError):
    """The peer answered something that is not HTTP/1.x (or past our size bounds)."""


class Headers(dict[str, str]):
    """Response headers by lower-case name, looked up case-insensitively (`headers.get("Retry-After")`)."""

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key.lower() if isinstance(key, str) else key)


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    status: int
    headers: Headers
    body: bytes

    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a URL's requests go, and the bytes of its Host header."""

    scheme: str
    host: str
    port: int
    host_header: str

    @property
    def tls(self) -> bool:
        return self.scheme == "https"


@lru_cache(maxsize=4096)
def split_url(url: str) -> tuple[Origin, str]:
    """(origin, request target) of an absolute http(s) URL; cached, since a run asks about few distinct bases."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    default_port = 443 if parts.scheme == "https" else 80
    port = parts.port or default_port
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == default_port else f"{shown}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Origin(parts.scheme, host, port, host_header), target


class _Connection(asyncio.Protocol):
    """One keep-alive connection: at most one request at a time, its answer parsed as the bytes arrive."""

    __slots__ = (
        "_body_left",
        "_buffer",
        "_chunked",
        "_chunks",
        "_head",
        "_keep_alive",
        "_no_body",
        "_on_lost",
        "_paused",
        "_to_close",
        "_waiter",
        "_writable",
        "closed",
        "idle_since",
        "origin",
        "transport",
    )

    def __init__(self, origin: Origin, on_lost: Callable[[_Connection], None]) -> None:
        self.origin = origin
        self._on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._buffer = bytearray()
        self._waiter: asyncio.Future[HttpAnswer] | None = None
        self._head: tuple[int, Headers] | None = None
        self._body_left = 0
        self._chunked = False
        self._to_close = False
        self._chunks: list[bytes] = []
        self._no_body = False
        self._keep_alive = True
        self._paused = False
        self._writable: asyncio.Future[None] | None = None  # a streaming writer waits on it while paused

    # -- asyncio callbacks ---------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self.abort()  # bytes nobody asked for: this connection's framing can no longer be trusted
            return
        self._buffer += data
        try:
            self._parse()
        except BadHttpAnswer as exc:
            self._fail(exc)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writer()

    def _wake_writer(self, _: object = None) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def eof_received(self) -> bool | None:
        return None  # close our side too; connection_lost finishes a read-to-close body

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._on_lost(self)  # the client forgets it at once: a server that drops idle connections leaks nothing
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._head is not None and self._to_close:
            self._finish(bytes(self._buffer))  # a body delimited by the connection's close
            return
        reason = f": {exc}" if exc else ""
        waiter.set_exception(ServerDisconnected(f"server closed the connection before a whole answer{reason}"))
        self._wake_writer()

    # -- one request -----------------------------------------------------------------------------------------
    def send(self, request: bytes, no_body: bool) -> asyncio.Future[HttpAnswer]:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        self._head = None
        self._buffer.clear()
        self._chunks = []
        self._no_body = no_body
        self.transport.write(request)
        self._waiter.add_done_callback(self._wake_writer)  # an early answer, a failure or the deadline ends a stream
        return self._waiter

    async def stream(self, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """Write a body's parts after its head, `CHUNK_BYTES` at a time, each once the transport is below its
        high-water mark; stops early once the answer is settled (the server answered before the whole body, the
        deadline passed, the connection dropped), and then the connection is never reused."""
        assert self.transport is not None and self._waiter is not None
        loop = asyncio.get_running_loop()
        answer = self._waiter
        for part in parts:
            view = memoryview(part).cast("B")
            for start in range(0, len(view), CHUNK_BYTES):
                while self._paused and not answer.done() and not self.closed:
                    self._writable = loop.create_future()
                    try:
                        await self._writable
                    finally:
                        self._writable = None
                if answer.done() or self.closed or self.transport.is_closing():
                    self._keep_alive = False  # the body was cut short: this connection's framing is gone
                    return
                self.transport.write(view[start : start + CHUNK_BYTES])
                # a loopback peer's socket buffers take megabytes before the transport pauses: without a turn of the
                # loop between chunks one body went out whole while the loop waited (960 of them: a 13.6 s stall)
                await asyncio.sleep(0)

    @property
    def reusable(self) -> bool:
        return not self.closed and self._keep_alive and self.transport is not None and not self.transport.is_closing()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, exc: BaseException) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self.abort()

    def _finish(self, body: bytes) -> None:
        assert self._head is not None and self._waiter is not None
        status, headers = self._head
        self._buffer.clear()
        if not self._waiter.done():
            self._waiter.set_result(HttpAnswer(status, headers, body))

    def _parse(self) -> None:
        if self._head is None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEADER_BYTES:
                    raise BadHttpAnswer("response headers too long")
                return
            self._read_head(bytes(self._buffer[:end]))
            del self._buffer[: end + 4]
            if self._head is None:  # an interim 1xx answer: the real one follows
                self._parse()
                return
        if self._chunked:
            self._read_chunks()
        elif self._to_close:
            if len(self._buffer) > MAX_BODY_BYTES:
                raise BadHttpAnswer("response body too long")
        elif len(self._buffer) >= self._body_left:
            # the usual case (exactly the answer) copies once, not twice
            body = (
                bytes(self._buffer) if len(self._buffer) == self._body_left else bytes(self._buffer[: self._body_left])
            )
            if len(self._buffer) > self._body_left:
                self._keep_alive = False  # more bytes than the answer: never reuse this connection
            self._finish(body)

    def _read_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        status_line = lines[0].split(b" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
            raise BadHttpAnswer(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        try:
            status = int(status_line[1])
        except ValueError:
            raise BadHttpAnswer(f"not an HTTP status: {lines[0][:80]!r}") from None
        if 100 <= status < 200 and status != 101:
            return  # 100 Continue and the like: skipped
        headers = Headers()
        for raw in lines[1:]:
            name, sep, value = raw.partition(b":")
            if not sep:
                raise BadHttpAnswer(f"not a header line: {raw[:80]!r}")
            key = name.strip().decode("latin-1").lower()
            text = value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        connection = (headers.get("connection") or "").lower()
        self._keep_alive = "close" not in connection and status_line[0] != b"HTTP/1.0"
        self._chunked = self._to_close = False
        if self._no_body or status in (204, 304):
            self._body_left = 0
        elif "chunked" in (headers.get("transfer-encoding") or "").lower():
            self._chunked = True
        elif "content-length" in headers:
            try:
                self._body_left = int(headers["content-length"])
            except ValueError:
                raise BadHttpAnswer(f"bad Content-Length: {headers['content-length'][:40]!r}") from None
            if not 0 <= self._body_left <= MAX_BODY_BYTES:
                raise BadHttpAnswer(f"Content-Length out of bounds: {self._body_left}")
        else:
            self._to_close = True
            self._keep_alive = False
        self._head = (status, headers)

    def _read_chunks(self) -> None:
        while True:
            end = self._buffer.find(b"\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEADER_BYTES:
                    raise BadHttpAnswer("chunk size line too long")
                return
            size_text = bytes(self._buffer[:end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise BadHttpAnswer(f"bad chunk size: {size_text[:20]!r}") from None
            if size == 0:
                trailer_end = self._buffer.find(b"\r\n\r\n", end)
                if trailer_end < 0:
                    return  # the trailers' end has not arrived yet
                del self._buffer[: trailer_end + 4]
                if self._buffer:
                    self._keep_alive = False
                self._finish(b"".join(self._chunks))
                return
            if len(self._buffer) < end + 2 + size + 2:
                return
            self._chunks.append(bytes(self._buffer[end + 2 : end + 2 + size]))
            if sum(len(chunk) for chunk in self._chunks) > MAX_BODY_BYTES:
                raise BadHttpAnswer("response body too long")
            del self._buffer[: end + 2 + size + 2]


class Http1Client:
    """Keep-alive connections per origin, no cap on how many: requests never queue inside the client."""

    def __init__(self, headers: Mapping[str, str] | None = None, connect_timeout_s: float = 10.0) -> None:
        self.connect_timeout_s = connect_timeout_s
        self._defaults = dict(headers or {})
        self._default_lines = _header_lines(self._defaults)
        self._idle: dict[Origin, dict[_Connection, None]] = {}
        self._open: set[_Connection] = set()
        self._tls: ssl.SSLContext | None = None

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: Body | None = None,
        content_type: str = "application/json",
        params: Iterable[tuple[str, object]] | Mapping[str, object] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float,
    ) -> HttpAnswer:
        """One request and its whole answer within `timeout` seconds (connect included); `TimeoutError` past it.
        A `body` of parts is sent back to back; one past `STREAM_ABOVE_BYTES` is streamed, never joined."""
        origin, target = split_url(url)
        if params:
            query = urlencode(list(params.items()) if isinstance(params, Mapping) else list(params))
            target = f"{target}{'&' if '?' in target else '?'}{query}"
        # a request's own header replaces the client's default of the same name (a gateway's own token)
        extra = _header_lines(_merged(self._defaults, headers)) if headers else self._default_lines
        parts = _parts(body)
        if parts is not None:
            extra += f"Content-Type: {content_type}\r\nContent-Length: {sum(part.nbytes for part in parts)}\r\n"
        elif method in ("POST", "PUT", "PATCH"):
            extra += "Content-Length: 0\r\n"
        head = f"{method} {target} HTTP/1.1\r\nHost: {origin.host_header}\r\n{extra}\r\n".encode("latin-1")
        streamed: Sequence[memoryview] = ()
        if parts is None:
            request = head
        elif sum(part.nbytes for part in parts) <= STREAM_ABOVE_BYTES:
            request = b"".join((head, *parts))  # a small request: one write, as a JSON call always was
        else:
            request, streamed = head, parts
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        connection = self._take_idle(origin, loop.time())
        if connection is None:
            connection = await self._connect(origin, deadline)
        answer = connection.send(request, no_body=method == "HEAD")
        timer = loop.call_at(deadline, _expire, answer)  # one timer, no task-level timeout machinery
        try:
            if streamed:
                await connection.stream(streamed)
            result = await answer
        except BaseException:
            self._discard(connection)  # timed out, cancelled or failed mid-answer: its framing is unknown
            raise
        finally:
            timer.cancel()
        self._release(connection, loop.time())
        return result

    async def _connect(self, origin: Origin, deadline: float) -> _Connection:
        loop = asyncio.get_running_loop()
        limit = min(self.connect_timeout_s, max(0.0, deadline - loop.time()))
        if origin.tls and self._tls is None:
            self._tls = ssl.create_default_context()
        async with asyncio.timeout(limit):
            _, connection = await loop.create_connection(
                lambda: _Connection(origin, self._forget),
                origin.host,
                origin.port,
                ssl=self._tls if origin.tls else None,
            )
        self._open.add(connection)
        return connection

    def _take_idle(self, origin: Origin, now: float) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            connection, _ = idle.popitem()  # the most recently used first: the one least likely to be dropped
            if connection.reusable and now - connection.idle_since < IDLE_KEEP_S:
                return connection
            self._discard(connection)
        return None

    def _release(self, connection: _Connection, now: float) -> None:
        if not connection.reusable:
            self._discard(connection)
            return
        connection.idle_since = now
        self._idle.setdefault(connection.origin, {})[connection] = None

    def _discard(self, connection: _Connection) -> None:
        connection.abort()
        self._forget(connection)

    def _forget(self, connection: _Connection) -> None:
        self._open.discard(connection)
        idle = self._idle.get(connection.origin)
        if idle is not None:
            idle.pop(connection, None)

    @property
    def open_connections(self) -> int:
        return sum(1 for connection in self._open if not connection.closed)

    async def close(self) -> None:
        """Close every connection, idle or busy (a busy one's request then fails as disconnected)."""
        for connection in list(self._open):
            connection.closed = True
            if connection.transport is not None:
                connection.transport.close()
        self._open.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports run their close callbacks


def _parts(body: Body | None) -> list[memoryview] | None:
    """A body as flat byte views of its parts, copying nothing; None for no body."""
    if body is None:
        return None
    if isinstance(body, bytes | bytearray | memoryview):
        return [memoryview(body).cast("B")]
    return [memoryview(part).cast("B") for part in body]


def _header_lines(headers: Mapping[str, str]) -> str:
    return "".join(f"{name}: {value}\r\n" for name, value in headers.items())


def _merged(defaults: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    replaced = {name.lower() for name in own}
    return {**{name: value for name, value in defaults.items() if name.lower() not in replaced}, **own}


def _expire(answer: asyncio.Future[HttpAnswer]) -> None:
    if not answer.done():
        answer.set_exception(TimeoutError("no whole answer before the deadline"))
