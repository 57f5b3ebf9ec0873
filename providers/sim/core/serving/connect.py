"""The Connect RPC protocol, server side, on aiohttp: what Prime's sandbox gateway (prime-sandboxes 0.5.x) and
E2B's in-sandbox daemon envd (e2b 2.x) speak to their SDKs.

Written against the protocol specification (connectrpc.com/docs/protocol) and checked against the
`connectrpc` clients that prime-sandboxes 0.5.1 and e2b 2.56.0 ship with. Implemented:

- routes `POST .../{service}/{method}`; unknown methods answer HTTP 404 `unimplemented`;
- unary RPCs: `application/proto` or `application/json` bodies (one bare message), `content-encoding`
  gzip or identity; errors as an HTTP status mapped from the Connect code plus the JSON body
  `{"code", "message"}` (`application/json`);
- server-streaming RPCs: `application/connect+proto` or `application/connect+json`; every message is an
  envelope: 1 flags byte (bit 0 compressed, bit 1 end of stream), a big-endian uint32 length, the
  payload; `connect-content-encoding` gzip or identity for the request envelope; the response is HTTP
  200 and always ends with an end-of-stream envelope holding JSON `{"error": {"code", "message"}?,
  "metadata": {...}?}`, so errors (auth, deadline, not found) travel there, even before any message;
- `connect-protocol-version` (must be 1 when sent), `connect-timeout-ms` (at most 10 digits): the
  handler runs under that deadline and an expired one ends the call with `deadline_exceeded`;
- an unsupported content type is HTTP 415 with `Accept-Post` listing what is served.

Responses are never compressed (identity is always acceptable to a Connect client). Message classes are
any protobuf-generated classes (`FromString`/`SerializeToString`); the JSON codec loads protobuf's
`json_format` only when a client asks for JSON. A procedure whose message type is `dict` (`JSON_OBJECT`)
speaks JSON only, its messages plain objects in protobuf's JSON mapping: a front then needs no generated
classes of the vendor's (a `proto` request to it is HTTP 415).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import gzip
import json
import logging
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

log = logging.getLogger(__name__)

FLAG_COMPRESSED = 0b01
FLAG_END_STREAM = 0b10
_PREFIX = struct.Struct(">BI")
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
_CODECS = ("proto", "json")
JSON_OBJECT = dict
"""The message type of a JSON-only procedure: requests arrive as dicts, replies are dicts."""


class Code(enum.StrEnum):
    """Connect error codes (their wire spelling)."""

    CANCELED = "canceled"
    UNKNOWN = "unknown"
    INVALID_ARGUMENT = "invalid_argument"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    NOT_FOUND = "not_found"
    ALREADY_EXISTS = "already_exists"
    PERMISSION_DENIED = "permission_denied"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    FAILED_PRECONDITION = "failed_precondition"
    ABORTED = "aborted"
    OUT_OF_RANGE = "out_of_range"
    UNIMPLEMENTED = "unimplemented"
    INTERNAL = "internal"
    UNAVAILABLE = "unavailable"
    DATA_LOSS = "data_loss"
    UNAUTHENTICATED = "unauthenticated"


HTTP_STATUS: dict[Code, int] = {
    Code.CANCELED: 499,
    Code.UNKNOWN: 500,
    Code.INVALID_ARGUMENT: 400,
    Code.DEADLINE_EXCEEDED: 504,
    Code.NOT_FOUND: 404,
    Code.ALREADY_EXISTS: 409,
    Code.PERMISSION_DENIED: 403,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.FAILED_PRECONDITION: 400,
    Code.ABORTED: 409,
    Code.OUT_OF_RANGE: 400,
    Code.UNIMPLEMENTED: 501,
    Code.INTERNAL: 500,
    Code.UNAVAILABLE: 503,
    Code.DATA_LOSS: 500,
    Code.UNAUTHENTICATED: 401,
}
"""Connect code -> HTTP status of a unary error answer (the specification's table)."""


class RpcError(Exception):
    """End this call with a Connect error."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = Code(code)
        self.message = message

    def to_dict(self) -> dict[str, str]:
        return {"code": str(self.code), "message": self.message}


class Message(Protocol):
    def SerializeToString(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Codec:
    """`proto` (binary protobuf) or `json` (protobuf's canonical JSON)."""

    name: str

    def decode(self, data: bytes, message_type: Any) -> Any:
        try:
            if message_type is JSON_OBJECT:
                value = json.loads(data.decode("utf-8")) if data else {}
                if not isinstance(value, dict):
                    raise ValueError("a message must be a JSON object")
                return value
            if self.name == "proto":
                return message_type.FromString(data)
            from google.protobuf import json_format

            message = message_type()
            json_format.Parse(data.decode("utf-8"), message)
            return message
        except Exception as exc:
            raise RpcError(Code.INVALID_ARGUMENT, f"cannot decode {self.name} request: {exc}") from None

    def encode(self, message: Any) -> bytes:
        if isinstance(message, dict):
            return json.dumps(message, separators=(",", ":")).encode("utf-8")
        if self.name == "proto":
            data: bytes = message.SerializeToString()
            return data
        from google.protobuf import json_format

        return json_format.MessageToJson(message, indent=None).encode("utf-8")


# --- envelopes ---------------------------------------------------------------------------------------


def envelope(payload: bytes, *, end_stream: bool = False) -> bytes:
    """One uncompressed streaming envelope."""
    return _PREFIX.pack(FLAG_END_STREAM if end_stream else 0, len(payload)) + payload


def end_stream_envelope(error: RpcError | None = None, metadata: Mapping[str, Sequence[str]] | None = None) -> bytes:
    """The end-of-stream envelope: `{}` on success, `{"error": {...}}` on failure, trailers as metadata."""
    body: dict[str, Any] = {}
    if error is not None:
        body["error"] = error.to_dict()
    if metadata:
        body["metadata"] = {key: list(values) for key, values in metadata.items()}
    return envelope(json.dumps(body, separators=(",", ":")).encode("utf-8"), end_stream=True)


@dataclass(frozen=True, slots=True)
class Envelope:
    flags: int
    payload: bytes

    @property
    def end_stream(self) -> bool:
        return bool(self.flags & FLAG_END_STREAM)

    @property
    def compressed(self) -> bool:
        return bool(self.flags & FLAG_COMPRESSED)


def split_envelopes(data: bytes) -> list[Envelope]:
    """Every envelope in a complete body; a truncated one is an `invalid_argument` error."""
    out: list[Envelope] = []
    offset = 0
    while offset < len(data):
        if len(data) - offset < _PREFIX.size:
            raise RpcError(Code.INVALID_ARGUMENT, "protocol error: incomplete envelope prefix")
        flags, length = _PREFIX.unpack_from(data, offset)
        offset += _PREFIX.size
        if length > MAX_MESSAGE_BYTES:
            raise RpcError(Code.RESOURCE_EXHAUSTED, f"message is larger than {MAX_MESSAGE_BYTES} bytes")
        if len(data) - offset < length:
            raise RpcError(Code.INVALID_ARGUMENT, f"protocol error: envelope of {length} bytes is truncated")
        out.append(Envelope(flags, data[offset : offset + length]))
        offset += length
    return out


def decompress(data: bytes, encoding: str) -> bytes:
    if encoding in ("", "identity"):
        return data
    if encoding == "gzip":
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise RpcError(Code.INVALID_ARGUMENT, f"cannot gunzip request: {exc}") from None
    raise RpcError(Code.UNIMPLEMENTED, f"unknown compression {encoding!r}; supported: gzip, identity")


HTTP_DECODED = frozenset({"gzip", "deflate"})
"""`Content-Encoding`s aiohttp has already undone when a handler reads the body: decoding them again refused
every gzip unary request (tests/sim/fronts/test_fuzz_connect_streams.py)."""


class UnreadableBody(RpcError):
    """A body aiohttp could not decode (a `Content-Encoding: gzip` that is not gzip): `invalid_argument`, once a
    500 with a traceback. The connection is closed after the answer: its parser cannot find the next request."""

    def __init__(self, exc: RequestPayloadError) -> None:
        super().__init__(Code.INVALID_ARGUMENT, f"cannot read the request body: {str(exc).strip()}")


async def read_body(request: web.Request) -> bytes:
    try:
        return await request.read()
    except RequestPayloadError as exc:
        request.content.feed_eof()  # else aiohttp reads the broken body again after the answer, and logs that
        raise UnreadableBody(exc) from None


def parse_timeout_ms(value: str | None) -> float | None:
    """`connect-timeout-ms` as seconds (None: no deadline)."""
    if value is None or value == "":
        return None
    if len(value) > 10 or not value.isdigit():
        raise RpcError(Code.INVALID_ARGUMENT, f"invalid connect-timeout-ms {value!r}")
    return int(value) / 1000.0


# --- procedures and dispatch -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallContext:
    """What a handler knows about its call: the HTTP request (route, headers) and its deadline."""

    request: web.Request
    procedure: str
    codec: Codec
    timeout_s: float | None  # the client's deadline, real seconds from the start of the call


UnaryHandler = Callable[[Any, CallContext], Awaitable[Any]]
StreamHandler = Callable[[Any, CallContext], AsyncIterator[Any]]
Authorize = Callable[[web.Request], None]


@dataclass(frozen=True, slots=True)
class Procedure:
    name: str
    input_type: Any
    output_type: Any
    handler: UnaryHandler | StreamHandler
    server_streaming: bool = False

    @property
    def codecs(self) -> tuple[str, ...]:
        """The codecs this procedure is served in: JSON only for `JSON_OBJECT` messages."""
        return ("json",) if self.input_type is JSON_OBJECT else _CODECS


@dataclass
class ConnectService:
    """One Connect service (`package.Service`); `handle(request, method)` serves one call."""

    name: str
    procedures: dict[str, Procedure] = field(default_factory=dict)
    authorize: Authorize | None = None  # raises RpcError before the request body is read

    def add(self, procedure: Procedure) -> None:
        self.procedures[procedure.name] = procedure

    async def handle(self, request: web.Request, method: str) -> web.StreamResponse:
        procedure = self.procedures.get(method)
        if procedure is None:
            return _unary_error(RpcError(Code.UNIMPLEMENTED, f"{self.name}/{method} is not implemented"), 404)
        content_type = (request.headers.get("Content-Type") or "").partition(";")[0].strip().lower()
        prefix = "application/connect+" if procedure.server_streaming else "application/"
        codec_name = content_type[len(prefix) :] if content_type.startswith(prefix) else ""
        if codec_name not in procedure.codecs:
            accepted = ", ".join(prefix + name for name in procedure.codecs)
            return web.Response(status=415, headers={"Accept-Post": accepted})
        codec = Codec(codec_name)
        if procedure.server_streaming:
            return await self._serve_stream(request, procedure, codec)
        return await self._serve_unary(request, procedure, codec)

    def _preamble(self, request: web.Request, compression_header: str) -> tuple[float | None, str]:
        version = request.headers.get("connect-protocol-version")
        if version is not None and version != "1":
            raise RpcError(Code.INVALID_ARGUMENT, f"connect-protocol-version must be '1', got {version!r}")
        timeout_s = parse_timeout_ms(request.headers.get("connect-timeout-ms"))
        if self.authorize is not None:
            self.authorize(request)
        return timeout_s, (request.headers.get(compression_header) or "identity").strip().lower()

    async def _serve_unary(self, request: web.Request, procedure: Procedure, codec: Codec) -> web.StreamResponse:
        try:
            timeout_s, encoding = self._preamble(request, "Content-Encoding")
            body = await read_body(request)
            if encoding not in HTTP_DECODED:
                body = decompress(body, encoding)
            message = codec.decode(body, procedure.input_type)
            ctx = CallContext(request, procedure.name, codec, timeout_s)
            handler: UnaryHandler = procedure.handler  # type: ignore[assignment]
            try:
                async with asyncio.timeout(timeout_s):
                    reply = await handler(message, ctx)
            except TimeoutError:
                raise RpcError(Code.DEADLINE_EXCEEDED, "the call's deadline expired") from None
        except RpcError as exc:
            return _unary_error(exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connect: %s/%s failed", self.name, procedure.name)
            return _unary_error(RpcError(Code.INTERNAL, "internal error (simulator bug)"))
        return web.Response(body=codec.encode(reply), content_type=f"application/{codec.name}")

    async def _serve_stream(self, request: web.Request, procedure: Procedure, codec: Codec) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        response.content_type = f"application/connect+{codec.name}"
        response.headers["connect-accept-encoding"] = "gzip"
        messages: AsyncIterator[Any] | None = None
        error: RpcError | None = None
        try:
            timeout_s, encoding = self._preamble(request, "connect-content-encoding")
            envelopes = split_envelopes(await read_body(request))
            if len(envelopes) != 1 or envelopes[0].end_stream:
                raise RpcError(
                    Code.INVALID_ARGUMENT, f"a server-streaming call takes 1 request message, got {len(envelopes)}"
                )
            payload = envelopes[0].payload
            if envelopes[0].compressed:
                if encoding == "identity":
                    raise RpcError(Code.INTERNAL, "protocol error: compressed message without connect-content-encoding")
                payload = decompress(payload, encoding)
            message = codec.decode(payload, procedure.input_type)
            ctx = CallContext(request, procedure.name, codec, timeout_s)
            stream: StreamHandler = procedure.handler  # type: ignore[assignment]
            messages = stream(message, ctx)
            await response.prepare(request)
            try:
                async with asyncio.timeout(timeout_s):
                    async for reply in messages:
                        await response.write(envelope(codec.encode(reply)))
            except TimeoutError:
                raise RpcError(Code.DEADLINE_EXCEEDED, "the call's deadline expired") from None
        except RpcError as exc:
            error = exc
        except (ConnectionResetError, ConnectionError):
            return response  # the client went away: nothing left to tell it
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connect: %s/%s failed", self.name, procedure.name)
            error = RpcError(Code.INTERNAL, "internal error (simulator bug)")
        finally:
            if messages is not None:
                with contextlib.suppress(Exception):
                    await messages.aclose()  # type: ignore[attr-defined]
        with contextlib.suppress(ConnectionResetError, ConnectionError):
            if not response.prepared:
                if isinstance(error, UnreadableBody):
                    response.force_close()
                await response.prepare(request)
            await response.write(end_stream_envelope(error))
            await response.write_eof()
        return response


def _unary_error(error: RpcError, status: int | None = None) -> web.Response:
    response = web.json_response(error.to_dict(), status=status or HTTP_STATUS[error.code])
    if isinstance(error, UnreadableBody):
        response.force_close()
    return response
