"""The gateway's ConnectRPC routes: one per served procedure, then a catch-all answering `unimplemented`.

One route per procedure so the OpenAPI document can describe each one's own bodies (a unary call takes a
bare JSON message, `Start` an enveloped stream), which a single `{method}` route could not.

The gateway token is checked at the edge, before the content type is looked at, the way an auth middleware in
front of a Connect handler does (connect-go's `authn`): a call that is not a Connect stream (unary, or an
unknown content type) gets HTTP 401 `{"code": "unauthenticated"}`; a Connect stream gets its error in the
end-of-stream message with HTTP 200, as the protocol has every streamed error travel (and as the SDK reads it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from providers.sim.core.serving.connect import ConnectService
from providers.sim.prime.command_session import SERVICE, connect_handler
from providers.sim.prime.gateway import GatewayTokens

STREAM_CONTENT_PREFIX = "application/connect+"


def _is_connect_stream(request: web.Request) -> bool:
    return (request.headers.get("Content-Type") or "").strip().lower().startswith(STREAM_CONTENT_PREFIX)


def _procedure_handler(
    service: ConnectService, method: str, get_tokens: Callable[[web.Request], GatewayTokens]
) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.StreamResponse:
        match = request.match_info
        authorized = get_tokens(request).check(match["user_ns"], match["job_id"], request.headers.get("Authorization"))
        if not authorized and not (service.procedures[method].server_streaming and _is_connect_stream(request)):
            return web.json_response(
                {"code": "unauthenticated", "message": "Invalid or expired gateway token"}, status=401
            )
        return await service.handle(request, method)

    return handle


def add_connect_routes(
    router: web.UrlDispatcher,
    prefix: str,
    service: ConnectService | None,
    get_tokens: Callable[[web.Request], GatewayTokens],
) -> None:
    """`POST {prefix}/{user_ns}/{job_id}/command_session.CommandSession/<Procedure>` for each procedure served,
    and `.../{method}` for every other name (404 `unimplemented`; 501 when prime-sandboxes is missing)."""
    base = f"{prefix}/{{user_ns}}/{{job_id}}/{SERVICE}"
    for method in service.procedures if service is not None else ():
        assert service is not None
        router.add_post(f"{base}/{method}", _procedure_handler(service, method, get_tokens))
    router.add_post(f"{base}/{{method}}", connect_handler(service))
