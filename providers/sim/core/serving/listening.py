"""A simulated vendor's HTTP front listening on this loop: the record every aiohttp front returns, and how it starts.

The Prime-like, E2B and Daytona fronts are each one aiohttp application over one simulator; what they return once
listening is the same shape (`RunningApp`), so the `serve` commands (`serve_cli.ServeCommand`) and tests treat them
alike. A front keeps its simulator under `SIMULATOR` in its application, which is all the stampede-only truth and
stats endpoints (`stampede_truth`, `stampede_stats`) need; the local Modal (gRPC) has its own record with the same
`url`, `token`, `simulator`, `time_scale` and `close()`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from providers.sim.core.serving.bearer import bearer_matches
from providers.sim.core.simulator import VendorSimulator

SIMULATOR = web.AppKey("stampede_simulator", VendorSimulator)
"""Where a front's application keeps its simulator (set at the application's startup, on its loop)."""

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _not_found(request: web.Request) -> str:
    return "Not Found"


def vendor_middleware(
    answer: Callable[[web.Request, int, str], web.Response],
    authorize: Callable[[web.Request], web.Response | None],
    *,
    front: str,
    not_found: Callable[[web.Request], str] = _not_found,
    wrong_method_is_not_found: bool = False,
    bug: str = "Internal server error (simulator bug)",
) -> Any:
    """A front's one middleware: the vendor's own auth (`authorize` answers a refusal, None lets it through), then
    the vendor's error body (`answer`) for what no handler answers: an unknown path (404), a wrong method (405 with
    `Allow`, as RFC 9110 says, or the vendor's 404), and our own bug (500, logged, never a traceback on the wire)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        refused = authorize(request)
        if refused is not None:
            return refused
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return answer(request, 404, not_found(request))
        except web.HTTPMethodNotAllowed as exc:
            if wrong_method_is_not_found:
                return answer(request, 404, not_found(request))
            response = answer(request, 405, "Method Not Allowed")
            response.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
            return response
        except web.HTTPException:
            raise
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: unhandled error in %s %s", front, request.method, request.path)
            return answer(request, 500, bug)

    return middleware


def http_url(host: str, port: int) -> str:
    """`http://host:port`, an IPv6 host in brackets."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


async def listen(
    app: web.Application, host: str, port: int, shutdown_timeout_s: float = 60.0
) -> tuple[web.AppRunner, int]:
    """Serve `app` on host:port (0: a free port); return its runner and the bound port. Nothing is left running
    when the port cannot be bound (the caller's OSError is the command's one error line). `shutdown_timeout_s`
    bounds how long a stop waits for handlers still open (aiohttp's 60 s by default)."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=shutdown_timeout_s)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096, reuse_address=True)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1])


@dataclass
class RunningApp:
    """A front listening on a port of this loop. `close()` stops it (sandboxes are left as they are)."""

    url: str  # http://host:port
    port: int
    token: str
    app: web.Application
    runner: web.AppRunner

    @property
    def simulator(self) -> VendorSimulator:
        return self.app[SIMULATOR]

    @property
    def time_scale(self) -> float:
        """Real seconds per vendor second."""
        return self.simulator.clock.time_scale

    async def close(self) -> None:
        await self.runner.cleanup()


async def stampede_truth(request: web.Request) -> web.Response:
    """`GET …/_stampede/truth`: the simulator's own record of every sandbox, after the run's facts."""
    sim = request.app[SIMULATOR]
    return web.json_response({**sim.facts(), "sandboxes": sim.truth()})


async def stampede_stats(request: web.Request) -> web.Response:
    """`GET …/_stampede/stats`: the simulator's counters, after the run's facts."""
    sim = request.app[SIMULATOR]
    return web.json_response({**sim.facts(), "stats": sim.stats()})


def truth_app(token: str, truth: Callable[[], dict[str, Any]], stats: Callable[[], dict[str, Any]]) -> web.Application:
    """The truth and stats endpoints on an HTTP port of their own, for the gRPC fronts (Modal, CoreWeave) that have
    no aiohttp application to add them to: the front's token as a bearer, else 401 `{"detail": "Invalid API key"}`.
    `truth()` and `stats()` are the bodies, read at each request."""

    @web.middleware
    async def auth(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        if not bearer_matches(request.headers.get("Authorization"), token):
            return web.json_response({"detail": "Invalid API key"}, status=401)
        response: web.StreamResponse = await handler(request)
        return response

    async def truth_endpoint(request: web.Request) -> web.Response:
        return web.json_response(truth())

    async def stats_endpoint(request: web.Request) -> web.Response:
        return web.json_response(stats())

    app = web.Application(middlewares=[auth])
    app.router.add_get("/api/v1/_stampede/truth", truth_endpoint)
    app.router.add_get("/api/v1/_stampede/stats", stats_endpoint)
    return app
