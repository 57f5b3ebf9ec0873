"""The Prime SDK's control-plane requests over `providers/http1_client.py` instead of httpcore, for the `prime` adapter.

Why: at 960 in flight the SDK's control-plane client (httpx over httpcore) was the engine's largest piece of
harness-chosen CPU: httpcore's pool walks every pooled connection on each request and response (`is_idle`,
`has_expired`, `is_available`), and its keep-alive check counts all connections, not the idle ones, so past
`max_keepalive_connections` every finished request closes its connection and the next opens a new one (measured:
19% of the engine's samples under the control-plane client, 9% of them in the pool's bookkeeping). The
keep-alive HTTP/1.1 client the `stub` provider uses keeps an idle connection per finished request and looks at
nothing else.

The SDK still sees httpx: this is an `httpx.AsyncBaseTransport`, so its client, event hooks, `raise_for_status`,
retries and exception handling are unchanged. What the wire does wrong is raised as the httpx exception httpcore
raises for it, so the SDK retries exactly what it retried before: a refused connection `ConnectError`, a
connection closed before the whole answer or an answer that is not HTTP `RemoteProtocolError`, a reset while
reading `ReadError`, a deadline `ReadTimeout` (connecting included: the SDK reads every httpx timeout as one
`APITimeoutError`). The pool is unbounded, as
the stub's: `api_max_connections` and `api_keepalive` apply to the httpcore transport (`api_transport=httpx`).
"""

from __future__ import annotations

import math

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
        body = await request.aread()
        headers = {name: value for name, value in request.headers.items() if name.lower() not in _SENT_BY_CLIENT}
        try:
            answer = await self._client.request(
                request.method,
                str(request.url),
                body=body or None,
                content_type=request.headers.get("content-type", "application/json"),
                headers=headers,
                timeout=_deadline_s(request),
            )
        except TimeoutError as exc:
            raise httpx.ReadTimeout(str(exc) or "timed out", request=request) from exc
        except (ServerDisconnected, BadHttpAnswer) as exc:
            raise httpx.RemoteProtocolError(str(exc) or type(exc).__name__, request=request) from exc
        except ConnectionRefusedError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc
        headers_back = [(name, value) for name, value in answer.headers.items() if name not in _READ_BY_CLIENT]
        return httpx.Response(answer.status, headers=headers_back, content=answer.body, request=request)

    async def aclose(self) -> None:
        await self._client.close()


def _deadline_s(request: httpx.Request) -> float:
    """The whole request's deadline: httpx's read timeout (the client's own unless the call gave one)."""
    timeouts = request.extensions.get("timeout") or {}
    seconds = timeouts.get("read")
    return NO_DEADLINE_S if seconds is None or not math.isfinite(seconds) else float(seconds)
