"""The Prime front's transport faults: the `[faults]` profile section acted out on the wire (aiohttp middleware).

`providers.sim.core.faults` decides which fault a request gets; this module maps the Prime front's routes onto
the injector's operations and does to the request what a hostile network or load balancer would:

| operation | routes |
|---|---|
| create | `POST /api/v1/sandbox` |
| status | `POST /api/v1/sandbox/status:batchGet`, `GET /api/v1/sandbox/{id}`, `.../error-context`, `POST .../auth` |
| exec | the gateway: REST `.../exec` and ConnectRPC `command_session.CommandSession/*` |
| terminate | `DELETE /api/v1/sandbox/{id}`, `DELETE /api/v1/sandbox` (bulk) |
| list | `GET /api/v1/sandbox` |
| logs | `GET /api/v1/sandbox/{id}/logs` |

The stub's own `/_stampede/*` and `/openapi.json` are never faulted. A faulted request never reaches the
vendor (reset, 5xx, throttle, hang, malformed: the proxy in front answered, so a terminate answered with
garbage did not terminate), except `slow` (the right answer, late) and `gateway_death` (the command runs, its
connection drops before the answer: the exec handlers act on `GATEWAY_DEATH` in `request`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Awaitable, Callable

from aiohttp import web

from providers.sim.core.faults import FaultInjector, FaultKind

FAULTS = web.AppKey("stampede_fault_injector", FaultInjector)
HANGS_RELEASED = web.AppKey("stampede_hangs_released", asyncio.Event)
GATEWAY_DEATH = web.RequestKey("stampede_gateway_death", bool)
"""Set in a request when its exec must run and then lose its connection (the exec handlers honour it)."""

_5XX = ((500, "Internal Server Error"), (502, "Bad Gateway"), (503, "Service Unavailable"))
_MALFORMED: tuple[tuple[bytes, str], ...] = (
    (b"\x00\x17garbage-not-json\xff", "application/json"),  # garbage under the promised content type
    (b'{"id": "sb-trunc', "application/json"),  # JSON cut short (the Content-Length promised more)
    (b"<html><body><h1>200 OK</h1>maintenance page</body></html>", "text/html"),  # the wrong content type
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def operation_of(request: web.Request) -> str | None:
    """The injector's operation for a request to the Prime front (None: never faulted)."""
    route = request.match_info.route
    resource = route.resource
    path = resource.canonical if resource is not None else ""
    method = request.method
    if path.startswith("/gateway/"):
        return "exec"
    if not path.startswith("/api/v1/sandbox"):
        return None
    if path == "/api/v1/sandbox":
        return {"POST": "create", "GET": "list", "DELETE": "terminate"}.get(method)
    if path == "/api/v1/sandbox/status:batchGet":
        return "status"
    if path.endswith("/logs"):
        return "logs"
    if path == "/api/v1/sandbox/{sandbox_id}" and method == "DELETE":
        return "terminate"
    return "status"


def reset(request: web.Request) -> None:
    """Drop the connection with a TCP reset (SO_LINGER 0), no answer."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def _dropped() -> web.Response:
    """What a handler returns after it dropped the connection (aiohttp writes nothing to a closed transport)."""
    return web.Response(status=204)


async def _malformed(request: web.Request, variant: int) -> web.StreamResponse:
    body, content_type = _MALFORMED[variant % len(_MALFORMED)]
    if variant % len(_MALFORMED) != 1:
        return web.Response(status=200, body=body, content_type=content_type)
    response = web.StreamResponse(status=200, headers={"Content-Type": content_type})
    response.content_length = len(body) + 64  # a body cut short: the connection closes before the rest
    await response.prepare(request)
    await response.write(body)
    reset(request)
    return response


@web.middleware
async def transport_faults(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outermost middleware: draw a fault for the request's operation and act it out."""
    injector = request.app.get(FAULTS)
    operation = operation_of(request) if injector is not None and injector.active else None
    fault = injector.draw(operation) if injector is not None and operation is not None else None
    if fault is None or injector is None or injector.faults is None:
        return await handler(request)
    faults = injector.faults
    if fault is FaultKind.RESET:
        reset(request)
        return _dropped()
    if fault is FaultKind.ERROR_5XX:
        status, text = _5XX[injector.malformed_variant()]
        return web.Response(status=status, text=f"{status} {text}", content_type="text/plain")
    if fault is FaultKind.THROTTLE:
        headers = {"Retry-After": f"{faults.retry_after_s:g}"} if faults.retry_after_s > 0 else {}
        if operation == "exec":  # the gateway's proxy answers in plain text, as load balancers do (not Connect)
            return web.Response(status=429, text="429 Too Many Requests", content_type="text/plain", headers=headers)
        return web.json_response({"detail": "Too Many Requests"}, status=429, headers=headers)
    if fault is FaultKind.HANG:
        with contextlib.suppress(TimeoutError):  # held until the hold ends or the front shuts down
            await asyncio.wait_for(request.app[HANGS_RELEASED].wait(), faults.hang_hold_s)
        reset(request)
        return _dropped()
    if fault is FaultKind.MALFORMED:
        return await _malformed(request, injector.malformed_variant())
    if fault is FaultKind.SLOW:
        await asyncio.sleep(faults.slow_delay_s)
        return await handler(request)
    request[GATEWAY_DEATH] = True  # FaultKind.GATEWAY_DEATH (drawn for exec only)
    return await handler(request)


def install(app: web.Application) -> None:
    """Prepare an app for `transport_faults` (in its middlewares): hung requests are let go when the app shuts
    down, so stopping the front never waits out a hang. Its injector is set in `FAULTS` at startup."""
    app[HANGS_RELEASED] = asyncio.Event()

    async def release_hangs(app: web.Application) -> None:
        app[HANGS_RELEASED].set()

    app.on_shutdown.append(release_hangs)
