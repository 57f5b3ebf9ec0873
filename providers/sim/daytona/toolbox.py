"""Daytona's toolbox (the sandbox daemon behind the proxy) over the simulator: one-shot commands, code-run, info.

The SDK calls `{toolboxProxyUrl}/{sandboxId}/...` with the API key. Commands run as the profile says
(`[sandbox] commands`): modelled by the simulator's shell (`providers/sim/core/execution/shell.py`), or for real in the
sandbox's own tree (`isolated_shell.py`) as `daytona` in `/home/daytona`; either way under the sandbox's
vendor-time model (the profile's per-command overhead and drawn fates first):

- `POST /process/execute` `{"command", "cwd", "envs", "timeout"}` -> `{"exitCode", "result"}`: stdout and
  stderr in one stream, as the daemon gives them (a modelled command: stdout first, then stderr). `timeout` is
  the client's real seconds; past it the daemon kills the command and answers 408 `PROCESS_EXECUTION_TIMEOUT`
  (-> `DaytonaProcessExecutionTimeoutError`). No timeout: none.
- `POST /process/code-run` `{"code", "language", "argv", "envs", "timeout"}` -> `{"exitCode", "result",
  "artifacts"}`: `python3 -c CODE` (python, the default), `node -e` (javascript); no charts are extracted.
- `GET /user-home-dir`, `GET /work-dir` -> `{"dir"}`: the sandbox user's home (`/home/daytona`), also the work dir.
- sessions: `sessions.py`; terminals: `pty.py`; the code interpreter: `interpreter.py`; the file system:
  `files.py`. Every other toolbox call (git, LSP, computer use) answers 501 naming it: the sandbox is alive, so never
  a 404.

Errors: an unknown or destroyed sandbox -> 404 (proxy); one not started yet, or in error -> 409 (proxy); the
sandbox died under the command -> 502 (proxy; "OOM killed" when it ran out of memory); an injected transient
failure -> 502 "Command failed: ..."; an unknown session or command -> 404 (daemon).
"""

from __future__ import annotations

import functools
import math
import shlex
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web

from providers.sim.core.sandbox_state.sandbox_tree import SandboxUser
from providers.sim.core.simulator import (
    ErrorType,
    ExecError,
    ExecTimedOut,
    NotFound,
    NotRunning,
    SandboxDied,
    SimSandbox,
)
from providers.sim.daytona.front import Answer, Front, error, front_of, json_object, served_elsewhere, with_sandbox
from providers.sim.daytona.shapes import SANDBOX_USER, SOURCE_DAEMON, SOURCE_PROXY, state_of

SERVED = (
    "files",
    "user-home-dir",
    "work-dir",
    "version",
    "process/execute",
    "process/code-run",
    "process/session",
    "process/pty",
    "process/interpreter",
)
"""The toolbox calls served (here, files.py, sessions.py): another method on them is a wrong method."""
INTERPRETERS = {"python": ("python3", "-c"), "javascript": ("node", "-e"), "typescript": ("node", "-e")}


def running(request: web.Request) -> tuple[Front, SimSandbox | None, web.Response | None]:
    """The sandbox of the path, if a command may run in it now; else the proxy's answer."""
    front = front_of(request)
    try:
        sb = front.sim.get(request.match_info["sandbox_id"])
    except NotFound:
        return front, None, error(request, 404, "Sandbox not found", source=SOURCE_PROXY)
    state = state_of(sb, front.life.get(sb.id))
    if state == "started":
        return front, sb, None
    if state == "destroyed":
        return front, None, error(request, 404, "Sandbox not found", source=SOURCE_PROXY)
    reason = f": {sb.error_message}" if state == "error" and sb.error_message else ""
    return (
        front,
        None,
        error(request, 409, f"Sandbox {sb.id} is not started (state: {state}){reason}", source=SOURCE_PROXY),
    )


on_running = with_sandbox(running)
"""A toolbox handler that runs only on a started sandbox (`running`): else the proxy's refusal is answered as is, so
every daemon call refuses a missing or stopped sandbox in the same words."""


Found = TypeVar("Found")


def on_found(
    lookup: Callable[[web.Request], tuple[Found | None, web.Response | None]],
) -> Callable[
    [Callable[[web.Request, Found], Awaitable[Answer]]], Callable[[web.Request], Awaitable[Answer | web.Response]]
]:
    """A daemon handler on what `lookup` finds from the path (a session, a command, a terminal): when it finds
    nothing, its refusal (the daemon's 404) is the answer."""

    def decorate(
        handler: Callable[[web.Request, Found], Awaitable[Answer]],
    ) -> Callable[[web.Request], Awaitable[Answer | web.Response]]:
        @functools.wraps(handler)
        async def checked(request: web.Request) -> Answer | web.Response:
            found, missing = lookup(request)
            if missing is not None:
                return missing
            assert found is not None
            return await handler(request, found)

        return checked

    return decorate


def failure(request: web.Request, exc: BaseException, timeout_s: float | None) -> web.Response:
    """A command that did not complete, in the daemon's or the proxy's words."""
    if isinstance(exc, ExecTimedOut):
        seconds = f"{timeout_s:g}" if timeout_s is not None else "?"
        return error(
            request,
            408,
            f"Command execution timed out after {seconds} seconds. The timeout can be "
            "increased by adjusting the timeout parameter in the request.",
            code="PROCESS_EXECUTION_TIMEOUT",
            source=SOURCE_DAEMON,
        )
    if isinstance(exc, SandboxDied):
        if exc.error_type == ErrorType.OOM_KILLED:
            return error(request, 502, f"Sandbox {exc.sandbox_id} was OOM killed: {exc.message}", source=SOURCE_PROXY)
        return error(
            request, 502, f"Sandbox {exc.sandbox_id} stopped during the command: {exc.message}", source=SOURCE_PROXY
        )
    if isinstance(exc, ExecError):
        return error(request, 502, f"Command failed: {exc.message}", source=SOURCE_PROXY)
    if isinstance(exc, NotRunning):
        return error(request, 409, f"Sandbox {exc.sandbox_id} is not started", source=SOURCE_PROXY)
    if isinstance(exc, NotFound):
        return error(request, 404, "Sandbox not found", source=SOURCE_PROXY)
    raise exc


@on_running
async def execute(request: web.Request, front: Front, sb: SimSandbox) -> web.Response:
    body = await json_object(request)
    command = body.get("command") if body is not None else None
    if not isinstance(command, str) or not command.strip():
        return error(request, 400, "command is required", source=SOURCE_DAEMON)
    timeout = body.get("timeout") if body is not None else None
    envs = body.get("envs") if body is not None else None
    cwd = body.get("cwd") if body is not None else None
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or not 0 <= timeout < 2**32):
        return error(request, 400, "timeout must be a non-negative integer", source=SOURCE_DAEMON)
    if envs is not None and not (isinstance(envs, dict) and all(isinstance(v, str) for v in envs.values())):
        return error(request, 400, "envs must be an object of strings", source=SOURCE_DAEMON)
    if cwd is not None and not isinstance(cwd, str):
        return error(request, 400, "cwd must be a string", source=SOURCE_DAEMON)
    # `timeout` is what the client waits, in real seconds: the command gets that much vendor time scaled
    vendor_timeout = timeout / front.time_scale if timeout else math.inf
    try:
        outcome = await front.sim.exec(sb.id, command, timeout_s=vendor_timeout, env=envs, cwd=cwd)
    except (ExecTimedOut, SandboxDied, ExecError, NotRunning, NotFound) as exc:
        return failure(request, exc, timeout)
    return web.json_response({"exitCode": outcome.exit_code, "result": outcome.stdout + outcome.stderr})


@on_running
async def code_run(request: web.Request, front: Front, sb: SimSandbox) -> web.Response:
    """`process.code_run`: the daemon writes the code to a file and runs the language's interpreter on it."""
    body = await json_object(request)
    code = body.get("code") if body is not None else None
    if not isinstance(code, str):
        return error(request, 400, "code is required", source=SOURCE_DAEMON)
    language = (body.get("language") if body is not None else None) or "python"
    interpreter = INTERPRETERS.get(str(language).lower())
    if interpreter is None:
        return error(request, 400, f"unsupported language: {language}", source=SOURCE_DAEMON)
    argv = body.get("argv") if body is not None else None
    envs = body.get("envs") if body is not None else None
    timeout = body.get("timeout") if body is not None else None
    if argv is not None and not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        return error(request, 400, "argv must be a list of strings", source=SOURCE_DAEMON)
    if envs is not None and not (isinstance(envs, dict) and all(isinstance(v, str) for v in envs.values())):
        return error(request, 400, "envs must be an object of strings", source=SOURCE_DAEMON)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or not 0 <= timeout < 2**32):
        return error(request, 400, "timeout must be a non-negative integer", source=SOURCE_DAEMON)
    # the code travels in the command itself (a heredoc would clash with code that reads stdin)
    command = shlex.join([*interpreter, code, *(argv or [])])
    vendor_timeout = timeout / front.time_scale if timeout else math.inf
    try:
        outcome = await front.sim.exec(sb.id, command, timeout_s=vendor_timeout, env=envs)
    except (ExecTimedOut, SandboxDied, ExecError, NotRunning, NotFound) as exc:
        return failure(request, exc, timeout)
    return web.json_response(
        {"exitCode": outcome.exit_code, "result": outcome.stdout + outcome.stderr, "artifacts": {"charts": []}}
    )


@on_running
async def user_home_dir(request: web.Request, _front: Front, sb: SimSandbox) -> web.Response:
    return web.json_response({"dir": _user(sb).home})


async def work_dir(request: web.Request) -> web.Response:
    return await user_home_dir(request)  # the default snapshot sets no other WORKDIR


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": "stampede-sim"})


def _user(sb: SimSandbox) -> SandboxUser:
    return sb.user or SANDBOX_USER


@on_running
async def unsupported(request: web.Request, _front: Front, _sb: SimSandbox) -> web.Response:
    """A toolbox call not modelled here (git, LSP, computer use...): 501 naming it."""
    what = request.match_info["rest"]
    wrong = served_elsewhere(request, what, SERVED)
    if wrong is not None:
        return wrong
    return error(
        request,
        501,
        f"{request.method} /{what}: '{what.split('/')[0]}' is not modelled by the local Daytona (stampede's simulator)",
        code="NOT_IMPLEMENTED",
        source=SOURCE_DAEMON,
    )


def add_routes(app: web.Application, prefix: str) -> None:
    """One-shot commands, code-run and the info calls under `prefix/{sandbox_id}`."""
    r = app.router
    r.add_post(f"{prefix}/{{sandbox_id}}/process/execute", execute)
    r.add_post(f"{prefix}/{{sandbox_id}}/process/code-run", code_run)
    r.add_get(f"{prefix}/{{sandbox_id}}/user-home-dir", user_home_dir)
    r.add_get(f"{prefix}/{{sandbox_id}}/work-dir", work_dir)
    r.add_get(f"{prefix}/{{sandbox_id}}/version", version)


def add_fallback(app: web.Application, prefix: str) -> None:
    """Register last: every other toolbox call of a sandbox answers 501, not a 404 the SDK reads as "not found"."""
    app.router.add_route("*", f"{prefix}/{{sandbox_id}}/{{rest:.+}}", unsupported)
