"""The local E2B as one aiohttp server: the control plane (control_plane.py) and the sandbox proxy with envd
(envd.py) on one port, over one simulator.

E2B splits them (`https://api.e2b.app`, `https://sandbox.e2b.app`); a user points the real SDK here with
`E2B_API_URL` and `E2B_SANDBOX_URL` both set to this server's URL (or the `api_url` / `sandbox_url` arguments),
plus `E2B_API_KEY` = the token. The SDK speaks plain HTTP/1.1 to an `http://` URL.

Auth: the control plane wants the token in `X-API-KEY` (401 `{"code": 401, "message": "Invalid API key"}`);
the stampede-only `/api/v1/_stampede/*` wants it as `Authorization: Bearer` (what the harness sends); envd
checks each sandbox's own access token (envd.py). Unknown routes answer 404 and the front's own bugs 500, as JSON
`Error` bodies, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from providers.sim.core.clock import LoopClock
from providers.sim.core.serving.bearer import tokens_equal
from providers.sim.core.serving.listening import RunningApp, http_url, listen, vendor_middleware
from providers.sim.core.simulator import VendorSimulator
from providers.sim.core.vendor_settings import VendorSettings
from providers.sim.e2b import control_plane, envd, envd_files, saved_state
from providers.sim.e2b.app_state import API_KEY, SIM
from providers.sim.e2b.shapes import error_body

DEFAULT_PROFILE = "e2b-like"
STAMPEDE_PREFIX = "/api/v1/_stampede/"
UPLOAD_MAX_BYTES = 256 * 1024 * 1024  # an octet-stream upload to /files is read whole
# the proxy and envd (each sandbox's own token, not the API key), and the API's own description
_OPEN_PATHS = ("/health", f"/{envd.SERVICE}/", f"/{envd_files.SERVICE}/", envd_files.FILES_ROUTE, "/openapi.json")


@dataclass(frozen=True)
class E2BSettings(VendorSettings):
    """The local E2B: which vendor behaviour, how fast, where, and the API key it accepts."""

    profile: Any = DEFAULT_PROFILE


def _error(status: int, message: str) -> web.Response:
    return web.json_response(error_body(status, message), status=status)


def _presented(header: str | None, scheme: str | None = None) -> str:
    if header is None:
        return ""
    if scheme is None:
        return header.strip()
    given, _, value = header.partition(" ")
    return value.strip() if given.lower() == scheme else ""


def _authorize(request: web.Request) -> web.Response | None:
    """The API key as E2B takes it (`X-API-KEY`), or as Bearer on the stampede-only paths; envd's own are open."""
    path = request.path
    if path.startswith(_OPEN_PATHS):
        return None
    stampede = path.startswith(STAMPEDE_PREFIX)
    presented = (
        _presented(request.headers.get("Authorization"), "bearer")
        if stampede
        else _presented(request.headers.get("X-API-KEY"))
    )
    return None if tokens_equal(presented, request.app[API_KEY]) else _error(401, "Invalid API key")


def create_app(settings: E2BSettings) -> web.Application:
    """The local E2B as an aiohttp Application; the simulator is built on the app's loop at startup. Profile
    problems raise ProfileError here, before anything listens."""
    profile = settings.resolved_profile()
    scale = settings.resolved_time_scale(profile)
    middleware = vendor_middleware(
        lambda request, status, message: _error(status, message), _authorize, front="local e2b"
    )
    app = web.Application(middlewares=[middleware], client_max_size=UPLOAD_MAX_BYTES)
    app[API_KEY] = settings.token

    async def on_startup(app: web.Application) -> None:
        clock = LoopClock(scale)
        clock.start()
        sim = VendorSimulator(profile, seed=settings.seed, clock=clock)
        app[SIM] = sim

    async def on_cleanup(app: web.Application) -> None:
        if SIM in app:
            app[SIM].close()

    app.on_startup.append(on_startup)  # first: the routes' own startups need the simulator
    app.on_cleanup.append(on_cleanup)
    control_plane.add_routes(app)
    saved_state.add_routes(app)
    envd.add_routes(app)
    return app


@dataclass
class RunningE2B(RunningApp):
    """A local E2B listening on a port of this loop. `close()` stops it (sandboxes are not killed)."""

    def sdk_environment(self) -> dict[str, str]:
        """The environment a user's own script sets so the unmodified e2b SDK talks to this server."""
        return {"E2B_API_KEY": self.token, "E2B_API_URL": self.url, "E2B_SANDBOX_URL": self.url}


async def start_e2b(settings: E2BSettings) -> RunningE2B:
    """Start the local E2B on the running loop (tests, `serve`); port 0 picks a free port."""
    app = create_app(settings)
    runner, port = await listen(app, settings.host, settings.port)
    return RunningE2B(url=http_url(settings.host, port), port=port, token=settings.token, app=app, runner=runner)
