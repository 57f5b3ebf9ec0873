"""Httpx transports over `providers/http1_client.py`: a vendor SDK's httpx client, its requests on our wire.

Why: at 960 in flight the SDKs' httpx request paths were the engine's largest harness-chosen CPU. Prime's
control-plane client (httpx over httpcore): httpcore's pool walks every pooled connection on each request and
response (`is_idle`, `has_expired`, `is_available`), and its keep-alive check counts all connections, not the
idle ones, so past `max_keepalive_connections` every finished request closed its connection and the next opened
a new one (19% of the engine's samples under that client, 9% in the pool's bookkeeping). E2B's API client goes
through pyqwest's adapter and a Rust runtime whose threads wake the loop per answer (a terminate: 0.69 ms of
client CPU over it, 0.27 ms over this). Vercel's SDK rides httpx2, httpx's fork, over httpcore2's same pool. The
keep-alive HTTP/1.1 client the `stub` provider uses keeps an idle connection per finished request and looks at
nothing else.

The SDK still sees its httpx: its client, event hooks, `raise_for_status`, retries and exception handling are
unchanged. What the wire does wrong is raised as the exception httpcore raises for it, in the SDK's own dialect
(httpx and httpx2 name them alike), so an SDK retries exactly what it retried before: a refused connection
`ConnectError`, a connection closed before the whole answer or an answer that is not HTTP `RemoteProtocolError`,
a reset while reading `ReadError`, a deadline `ReadTimeout` (connecting included). The pool is unbounded, as the
stub's: no request queues in the client. Plain bodies only (what JSON APIs send); the answer arrives whole, so
`http1_transport_httpx2.py` hands requests whose body or answer must stream to the SDK's own transport.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import httpx

from providers.http1_client import BadHttpAnswer, Http1Client, ServerDisconnected

NO_DEADLINE_S = 86_400.0  # httpx's "no timeout" (None), as a deadline the client can hold
_SENT_BY_CLIENT = frozenset({"host", "content-length", "transfer-encoding", "content-type"})
_READ_BY_CLIENT = frozenset({"transfer-encoding"})  # the body arrives whole, de-chunked


class Http1Transport(httpx.AsyncBaseTransport):
    """An httpx transport whose requests go out on an `Http1Client` (keep-alive HTTP/1.1, no pool bookkeeping)."""

    def __init__(self, connect_timeout_s: float) -> None:
        self._client = Http1Client(connect_timeout_s=connect_timeout_s)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        status, headers, body = await exchange(self._client, request, httpx)
        return httpx.Response(status, headers=headers, content=body, request=request)

    async def aclose(self) -> None:
        await self._client.close()


async def exchange(client: Http1Client, request: Any, dialect: ModuleType) -> tuple[int, list[tuple[str, str]], bytes]:
    """One request of either dialect (`httpx` or `httpx2`) on `client`: its answer's status, headers, whole body."""
    body = await request.aread()
    headers = {name: value for name, value in request.headers.items() if name.lower() not in _SENT_BY_CLIENT}
    try:
        answer = await client.request(
            request.method,
            str(request.url),
            body=body or None,
            content_type=request.headers.get("content-type", "application/json"),
            headers=headers,
            timeout=_deadline_s(request),
        )
    except TimeoutError as exc:
        raise dialect.ReadTimeout(str(exc) or "timed out", request=request) from exc
    except (ServerDisconnected, BadHttpAnswer) as exc:
        raise dialect.RemoteProtocolError(str(exc) or type(exc).__name__, request=request) from exc
    except ConnectionRefusedError as exc:
        raise dialect.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
    except OSError as exc:
        raise dialect.ReadError(str(exc) or type(exc).__name__, request=request) from exc
    return answer.status, [(n, v) for n, v in answer.headers.items() if n not in _READ_BY_CLIENT], answer.body


def _deadline_s(request: Any) -> float:
    """The whole request's deadline: httpx's read timeout (the client's own unless the call gave one)."""
    timeouts = request.extensions.get("timeout") or {}
    seconds = timeouts.get("read")
    return NO_DEADLINE_S if seconds is None or not math.isfinite(seconds) else float(seconds)
