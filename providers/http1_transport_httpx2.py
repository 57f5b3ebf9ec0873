"""`providers/http1_transport.py` for an httpx2 client (httpx's fork, which Vercel's SDK rides on).

Why a module of its own: httpx2 comes only with the `vercel` extra, and the other SDKs' adapters import the httpx
transport. A request whose body streams, or whose answer must arrive as it is sent (`streams`), goes to the SDK's
own transport: the keep-alive client hands an answer over whole.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx2

from providers.http1_client import Http1Client
from providers.http1_transport import exchange


class Http1Httpx2Transport(httpx2.AsyncBaseTransport):
    """An httpx2 transport over an `Http1Client`; `fallback` (the SDK's own) takes what must stream."""

    def __init__(
        self,
        connect_timeout_s: float,
        fallback: httpx2.AsyncBaseTransport,
        streams: Callable[[httpx2.Request], bool],
    ) -> None:
        self._client = Http1Client(connect_timeout_s=connect_timeout_s)
        self._fallback = fallback
        self._streams = streams

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if not isinstance(request.stream, httpx2.ByteStream) or self._streams(request):
            return await self._fallback.handle_async_request(request)
        status, headers, body = await exchange(self._client, request, httpx2)
        return httpx2.Response(status, headers=headers, content=body, request=request)

    async def aclose(self) -> None:
        await self._client.close()
        await self._fallback.aclose()
