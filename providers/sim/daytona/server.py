"""The local Daytona as one aiohttp application on one port: `/api` (REST and Socket.IO) and `/toolbox`.

Point daytona 0.226.1 at it the way a user points it anywhere: `DAYTONA_API_URL=http://127.0.0.1:PORT/api`,
`DAYTONA_API_KEY=<token>` (or `DaytonaConfig(api_url=..., api_key=...)`). Every sandbox body names
`toolboxProxyUrl = http://127.0.0.1:PORT/toolbox`, which is where the SDK then sends its commands (plain
http on loopback, the same API key). Requests without `Authorization: Bearer <token>` get the API's 401.

Time: durations the vendor enforces (TTLs, sleeps, the startup deadline) are vendor seconds at the
simulator's time scale; a command's `timeout` and `Retry-After-sandbox-create` are the client's real seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from providers.sim.core.clock import LoopClock
from providers.sim.core.serving.bearer import bearer_matches
from providers.sim.core.serving.listening import SIMULATOR, RunningApp, http_url, listen, vendor_middleware
from providers.sim.core.simulator import VendorSimulator
from providers.sim.core.vendor_settings import VendorSettings
from providers.sim.daytona import changes, files, interpreter, pty, rest, sessions, snapshots, toolbox
from providers.sim.daytona.events import SOCKETIO_PATH, EventGateway
from providers.sim.daytona.front import API_PREFIX, FRONT, TOOLBOX_PREFIX, Front, error

DEFAULT_PROFILE = "daytona-like"


@dataclass(frozen=True)
class DaytonaSettings(VendorSettings):
    """The local Daytona: which vendor behaviour, how fast, where, and the API key it accepts."""

    profile: Any = DEFAULT_PROFILE


def _authorize(request: web.Request) -> web.Response | None:
    """The API key on `/api` and `/toolbox` (Socket.IO authenticates in its own handshake)."""
    path = request.path
    guarded = path.startswith((API_PREFIX + "/", TOOLBOX_PREFIX + "/")) and not path.startswith(SOCKETIO_PATH + "/")
    if guarded and not bearer_matches(request.headers.get("Authorization"), request.app[FRONT].token):
        return error(request, 401, "Unauthorized")
    return None


# errors as Daytona's envelopes; NestJS answers an unknown path and a wrong method alike
_auth_and_errors = vendor_middleware(
    error,
    _authorize,
    front="local daytona",
    not_found=lambda request: f"Cannot {request.method} {request.path}",
    wrong_method_is_not_found=True,
    bug="An unexpected error occurred. (simulator bug)",
)


EVENTS_SHUTDOWN_S = 2.0
"""How long a stop waits for handlers still open (the events websocket) before closing them."""


def create_app(settings: DaytonaSettings) -> web.Application:
    """The application; the simulator is built on the app's loop at startup (profile problems raise here)."""
    profile = settings.resolved_profile()
    scale = settings.resolved_time_scale(profile)
    # a repository uploaded as one archive runs to tens of MB (swe-task: ~20 MB); 4 MiB refused it with a 413
    app = web.Application(middlewares=[_auth_and_errors], client_max_size=256 * 1024 * 1024)

    async def on_startup(app: web.Application) -> None:
        clock = LoopClock(scale)
        clock.start()
        sim = VendorSimulator(profile, seed=settings.seed, clock=clock)
        front = Front(sim=sim, token=settings.token)
        app[FRONT] = front
        app[SIMULATOR] = sim
        gateway.bind(front)
        front.on_change.append(forget_sessions)
        front.on_change.append(forget_ptys)
        front.on_change.append(forget_interpreters)
        sim.add_listener(front.changed)

    async def on_cleanup(app: web.Application) -> None:
        await gateway.close()
        if FRONT in app:
            app[FRONT].sim.close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    rest.add_routes(app, API_PREFIX)
    changes.add_routes(app, API_PREFIX)  # after rest: its last route answers every sandbox call not served
    snapshots.add_routes(app, API_PREFIX)
    toolbox.add_routes(app, TOOLBOX_PREFIX)
    forget_sessions = sessions.add_routes(app, TOOLBOX_PREFIX)
    forget_ptys = pty.add_routes(app, TOOLBOX_PREFIX)
    forget_interpreters = interpreter.add_routes(app, TOOLBOX_PREFIX)
    files.add_routes(app, TOOLBOX_PREFIX)
    toolbox.add_fallback(app, TOOLBOX_PREFIX)  # last: every toolbox call not served answers 501
    gateway = EventGateway(settings.token)
    gateway.attach(app)
    return app


@dataclass
class RunningDaytona(RunningApp):
    """A local Daytona listening on a port of this loop. `close()` stops it (sandboxes are not terminated)."""

    @property
    def api_url(self) -> str:
        """What `DAYTONA_API_URL` (or `DaytonaConfig.api_url`) must name."""
        return self.url + API_PREFIX

    @property
    def toolbox_url(self) -> str:
        return self.url + TOOLBOX_PREFIX


async def start_daytona(settings: DaytonaSettings | None = None) -> RunningDaytona:
    """Start it on the running loop (tests, `serve`); port 0 picks a free port."""
    settings = settings or DaytonaSettings()
    app = create_app(settings)
    # the SDK's socket.io events connection stays open while its client lives, and a socket.io close does not end
    # it: without a bound, a stop waited aiohttp's 60 s for that handler (48 s after a user's script, measured)
    runner, port = await listen(app, settings.host, settings.port, shutdown_timeout_s=EVENTS_SHUTDOWN_S)
    url = http_url(settings.host, port)
    app[FRONT].base_url = url
    return RunningDaytona(url=url, port=port, token=settings.token, app=app, runner=runner)
