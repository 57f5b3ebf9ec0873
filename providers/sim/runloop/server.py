"""The local Runloop: the REST API runloop-api-client 3.0.0 calls for a devbox's life, over the simulator.

Point the SDK at it the way a user points it anywhere: `RUNLOOP_BASE_URL=http://127.0.0.1:PORT`,
`RUNLOOP_API_KEY=<token>` (or `AsyncRunloop(base_url=..., bearer_token=...)`). Requests without
`Authorization: Bearer <token>` get 401.

Routes (the SDK's own paths): `POST /v1/devboxes` (and `/create_and_await_running`), `GET /v1/devboxes` (cursor
pages: `limit`, `starting_after`, `status`), `GET /v1/devboxes/{id}`, `POST /v1/devboxes/{id}/wait_for_status` (the
long poll `await_running` makes: held up to `timeout_seconds`, then 408, as the real server does),
`shutdown`, `suspend`, `resume`, `execute` (waits up to `optimistic_timeout`), `execute_async`, `execute_sync`,
`executions/{eid}` (get), `executions/{eid}/wait_for_status`, `executions/{eid}/kill`,
`executions/{eid}/stream_stdout_updates` and `stream_stderr_updates` (server-sent events), `upload_file`
(multipart), `download_file`, `read_file_contents`, `write_file_contents`, `snapshot_disk`; and the simulator's own
`GET /api/v1/_stampede/truth|stats`.

A create the simulator refuses is answered by status, which is how the SDK picks its exception class: the create
rate 429 (`Retry-After` in real seconds; the SDK retries it itself, `max_retries`), the account's concurrent devbox
limit 429 too with a message naming it (Runloop documents its limits as 429s), no capacity 503, an injected failure
500, a bad body 400. Time: vendor seconds at the profile's time scale for what the vendor enforces (keep-alive, boot,
suspend, snapshot); `timeout_seconds`, `optimistic_timeout` and `Retry-After` are the client's real seconds.

This module is the routing table; the handlers sit by what they act on (`devboxes.py`, `executions.py`,
`files.py`), what they share in `state.py`, the wire shapes in `shapes.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from providers.sim.core.clock import LoopClock
from providers.sim.core.serving.bearer import bearer_matches
from providers.sim.core.serving.listening import (
    SIMULATOR,
    RunningApp,
    http_url,
    listen,
    stampede_stats,
    stampede_truth,
    vendor_middleware,
)
from providers.sim.core.simulator import VendorSimulator
from providers.sim.core.vendor_settings import VendorSettings
from providers.sim.runloop.devboxes import (
    create_devbox,
    get_devbox,
    list_devboxes,
    resume_devbox,
    shutdown_devbox,
    snapshot_disk,
    suspend_devbox,
    wait_for_devbox,
)
from providers.sim.runloop.executions import (
    execute,
    execute_async,
    execute_sync,
    get_execution,
    kill_execution,
    stream_of,
    wait_for_execution,
)
from providers.sim.runloop.files import download_file, read_file_contents, upload_file, write_file_contents
from providers.sim.runloop.state import FRONT, Front, error

DEFAULT_PROFILE = "runloop-like"


def _authorize(request: web.Request) -> web.Response | None:
    if request.path.startswith("/v1/") or request.path.startswith("/api/"):
        if not bearer_matches(request.headers.get("Authorization"), request.app[FRONT].token):
            return error(request, 401, "Unauthorized: invalid or missing API key")
    return None


_middleware = vendor_middleware(error, _authorize, front="local runloop", bug="Internal server error (simulator bug)")


async def not_modelled(request: web.Request) -> web.Response:
    """A Runloop call the local plane does not serve (blueprints, tunnels, keep-alive, stdin, ...): 501 naming it,
    never a 404 a client would take for a devbox that is gone."""
    message = f"not modelled by the local Runloop: {request.method} {request.path}"
    return error(request, 501, message, headers={"x-should-retry": "false"})  # the SDK would retry a 5xx 5 times


def create_app(settings: RunloopSettings) -> web.Application:
    """The application; the simulator is built on the app's loop at startup (profile problems raise here)."""
    profile = settings.resolved_profile()
    scale = settings.resolved_time_scale(profile)
    app = web.Application(middlewares=[_middleware], client_max_size=64 * 1024 * 1024)

    async def on_startup(app: web.Application) -> None:
        clock = LoopClock(scale)
        clock.start()
        sim = VendorSimulator(profile, seed=settings.seed, clock=clock)
        front = Front(sim=sim, token=settings.token)
        sim.add_listener(front.notify)
        app[FRONT] = front
        app[SIMULATOR] = sim

    async def on_cleanup(app: web.Application) -> None:
        if FRONT in app:
            app[FRONT].sim.close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    devbox = "/v1/devboxes/{id}"
    execution = devbox + "/executions/{eid}"
    app.router.add_post("/v1/devboxes", create_devbox)
    app.router.add_post("/v1/devboxes/create_and_await_running", create_devbox)
    app.router.add_get("/v1/devboxes", list_devboxes)
    app.router.add_get(devbox, get_devbox)
    app.router.add_post(devbox + "/wait_for_status", wait_for_devbox)
    app.router.add_post(devbox + "/shutdown", shutdown_devbox)
    app.router.add_post(devbox + "/suspend", suspend_devbox)
    app.router.add_post(devbox + "/resume", resume_devbox)
    app.router.add_post(devbox + "/execute", execute)
    app.router.add_post(devbox + "/execute_async", execute_async)
    app.router.add_post(devbox + "/execute_sync", execute_sync)
    app.router.add_get(execution, get_execution)
    app.router.add_post(execution + "/wait_for_status", wait_for_execution)
    app.router.add_post(execution + "/kill", kill_execution)
    app.router.add_get(execution + "/stream_stdout_updates", stream_of("stdout"))
    app.router.add_get(execution + "/stream_stderr_updates", stream_of("stderr"))
    app.router.add_post(devbox + "/upload_file", upload_file)
    app.router.add_post(devbox + "/download_file", download_file)
    app.router.add_post(devbox + "/read_file_contents", read_file_contents)
    app.router.add_post(devbox + "/write_file_contents", write_file_contents)
    app.router.add_post(devbox + "/snapshot_disk", snapshot_disk)
    app.router.add_get("/api/v1/_stampede/truth", stampede_truth)
    app.router.add_get("/api/v1/_stampede/stats", stampede_stats)
    app.router.add_route("*", "/v1/{tail:.*}", not_modelled)  # last: every API call not served above
    return app


@dataclass(frozen=True)
class RunloopSettings(VendorSettings):
    """The local Runloop: which vendor behaviour, how fast, where, and the API key it accepts."""

    profile: Any = DEFAULT_PROFILE


@dataclass
class RunningRunloop(RunningApp):
    """A local Runloop listening on a port of this loop; `url` is what `RUNLOOP_BASE_URL` must name."""


async def start_runloop(settings: RunloopSettings | None = None) -> RunningRunloop:
    """Start it on the running loop (tests, `serve`); port 0 picks a free port."""
    settings = settings or RunloopSettings()
    app = create_app(settings)
    runner, port = await listen(app, settings.host, settings.port)
    return RunningRunloop(url=http_url(settings.host, port), port=port, token=settings.token, app=app, runner=runner)
