"""The local Vercel Sandbox: the REST routes vercel-sandbox 0.10.0 calls, over the vendor simulator, on one server.

Vercel serves them under `https://vercel.com/api`; the SDK takes that base URL only as an option
(`SandboxServiceOptions(base_url=...)`, no environment variable), so a user's own script passes `{url}/api` there
and its credentials as `VERCEL_TOKEN`, `VERCEL_TEAM_ID`, `VERCEL_PROJECT_ID` (what `serve` prints). Every call
carries `Authorization: Bearer <token>` and `?teamId=`: a wrong token is 401 `{"error": {"code": "unauthorized"}}`,
another team 403 `forbidden`.

A named sandbox runs one session at a time; here a session is one simulated sandbox (its id the session id) and
the name its record (`Named`), kept until it is destroyed, its sessions stopped. Routes (`/api` + …):
- `POST /v3/sandboxes` creates and answers once the session runs (the SDK polls `GET /v2/sandboxes/{name}` every
  0.5 s while `pending`; answering at the boot's end saves the fleet those polls), `{sandbox, session, routes}`.
  Refusals: the create rate 429 `rate_limited` and the plan's vCPU allocation (profile `[vcpu_rate]`) 429
  `vcpu_allocation_limit_exceeded`, both with `Retry-After`; the concurrency cap 429
  `concurrent_sandboxes_limit_exceeded`; no room 503 `capacity_unavailable`; an injected fault 500; bad input 400;
  a name in use 409 `conflict`. A session that fails to start answers its `status` (`failed`; `aborted` when
  stopped while starting), which the SDK raises as `SandboxTerminalStateError`; one past the profile's startup
  deadline 504 `sandbox_start_timeout`. `source: {type: "snapshot", snapshotId}` starts from a snapshot's files.
- `GET /v2/sandboxes/{name}` (`?resume=true` on a stopped one starts a new session, as the SDK asks after a
  `410 sandbox_stopped`), `GET /v2/sandboxes?project=&tags=key:value&limit=&cursor=` (newest first),
  `DELETE /v2/sandboxes/{name}` (destroys: its session stops), `POST /v2/sandboxes/{name}/fork` (a new named
  sandbox starting from a copy of the source's files).
- `GET /v2/sandboxes/sessions/{id}`, `POST …/{id}/stop`, `POST …/{id}/extend-timeout`, `POST …/{id}/snapshot`
  (the session stops, as Vercel's snapshots do).
- `POST …/{id}/cmd` runs `command` + `args`: with `?wait=true&logs=true` (the SDK's `run_process`) the answer is
  NDJSON: `{"command": …}` at the start, `{"stream": "stdout"|"stderr", "data": …}` as output comes (real
  commands; a modelled one's output comes at its end), `{"command": …, exitCode}` at the end; a sandbox that
  ends mid-command `{"stream": "error", "data": {"code": "sandbox_stopped", …}}`. Without them, `{"command"}` at
  once, then `GET …/cmd/{cid}?wait=true` and `GET …/cmd/{cid}/logs` (NDJSON) follow it; `POST …/cmd/{cid}/kill`.
- `POST …/{id}/fs/write` (a gzip tar, paths relative to `x-cwd`), `POST …/{id}/fs/read` (`{path, cwd}`: the bytes,
  404 `file_not_found`), `POST …/{id}/fs/mkdir`.
- `GET /api/v1/_stampede/truth|stats`: the simulator's own record.

This module is the routing table, auth and settings; the handlers sit by what they act on (`sandboxes.py`,
`sessions.py`, `commands.py`, `files.py`), what they share in `state.py`, the wire bodies in `shapes.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from providers.sim.core.clock import LoopClock
from providers.sim.core.serving.bearer import tokens_equal
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
from providers.sim.vercel.commands import command_logs, get_command, kill_command, list_commands, run_command
from providers.sim.vercel.files import make_directory, read_file, write_files
from providers.sim.vercel.sandboxes import create_sandbox, destroy_sandbox, fork_sandbox, get_sandbox, list_sandboxes
from providers.sim.vercel.sessions import extend_timeout, get_session, snapshot_session, stop_session
from providers.sim.vercel.shapes import PREFIX, PROJECT_ID, TEAM_ID, bad_bodies, error
from providers.sim.vercel.state import STATE, State

DEFAULT_PROFILE = "vercel-like"
UPLOAD_MAX_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class VercelSettings(VendorSettings):
    """The local Vercel Sandbox: which vendor behaviour, how fast, where, and the token it accepts."""

    profile: Any = DEFAULT_PROFILE


def _authorize(request: web.Request) -> web.Response | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not tokens_equal(value.strip(), request.app[STATE].token):
        return error(401, "unauthorized", "The token provided is not valid")
    if request.path.startswith(f"{PREFIX}/v1/_stampede/"):
        return None
    if request.query.get("teamId", TEAM_ID) != TEAM_ID:
        return error(403, "forbidden", "You don't have permission to access this team")
    return None


def create_app(settings: VercelSettings) -> web.Application:
    """The local Vercel Sandbox as an aiohttp Application; the simulator is built on the app's loop at startup.
    Profile problems raise ProfileError here, before anything listens."""
    profile = settings.resolved_profile()
    scale = settings.resolved_time_scale(profile)
    middleware = vendor_middleware(
        lambda request, status, message: error(status, "not_found" if status == 404 else "error", message),
        _authorize,
        front="local vercel",
    )
    app = web.Application(middlewares=[middleware, bad_bodies], client_max_size=UPLOAD_MAX_BYTES)
    state = State(token=settings.token)
    app[STATE] = state

    async def on_startup(app: web.Application) -> None:
        clock = LoopClock(scale)
        clock.start()
        sim = VendorSimulator(profile, seed=settings.seed, clock=clock)
        sim.add_listener(state.changed)
        app[SIMULATOR] = sim

    async def on_cleanup(app: web.Application) -> None:
        if SIMULATOR in app:
            app[SIMULATOR].close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    r, p, s = app.router, PREFIX, f"{PREFIX}/v2/sandboxes/sessions/{{session_id}}"
    r.add_post(f"{p}/v3/sandboxes", create_sandbox)
    r.add_get(f"{p}/v2/sandboxes", list_sandboxes)
    r.add_get(s, get_session)
    r.add_post(f"{s}/stop", stop_session)
    r.add_post(f"{s}/extend-timeout", extend_timeout)
    r.add_post(f"{s}/snapshot", snapshot_session)
    r.add_post(f"{s}/cmd", run_command)
    r.add_get(f"{s}/cmd", list_commands)
    r.add_get(f"{s}/cmd/{{command_id}}", get_command)
    r.add_get(f"{s}/cmd/{{command_id}}/logs", command_logs)
    r.add_post(f"{s}/cmd/{{command_id}}/kill", kill_command)
    r.add_post(f"{s}/fs/write", write_files)
    r.add_post(f"{s}/fs/read", read_file)
    r.add_post(f"{s}/fs/mkdir", make_directory)
    r.add_get(f"{p}/v2/sandboxes/{{name}}", get_sandbox)
    r.add_delete(f"{p}/v2/sandboxes/{{name}}", destroy_sandbox)
    r.add_post(f"{p}/v2/sandboxes/{{name}}/fork", fork_sandbox)
    r.add_get(f"{p}/v1/_stampede/truth", stampede_truth)
    r.add_get(f"{p}/v1/_stampede/stats", stampede_stats)
    return app


@dataclass
class RunningVercel(RunningApp):
    """A local Vercel Sandbox listening on a port of this loop. `close()` stops it."""

    @property
    def base_url(self) -> str:
        """What `SandboxServiceOptions(base_url=...)` takes (Vercel's own is `https://vercel.com/api`)."""
        return self.url + PREFIX

    def sdk_environment(self) -> dict[str, str]:
        """The credentials a user's own script sets for the unmodified SDK (the base URL is an option, not an
        environment variable: `base_url`)."""
        return {"VERCEL_TOKEN": self.token, "VERCEL_TEAM_ID": TEAM_ID, "VERCEL_PROJECT_ID": PROJECT_ID}


async def start_vercel(settings: VercelSettings) -> RunningVercel:
    """Start the local Vercel Sandbox on the running loop (tests, `serve`); port 0 picks a free port."""
    app = create_app(settings)
    runner, port = await listen(app, settings.host, settings.port)
    return RunningVercel(url=http_url(settings.host, port), port=port, token=settings.token, app=app, runner=runner)
