"""Daytona's toolbox (the sandbox daemon behind the proxy) over the simulator: one-shot commands and sessions.

The SDK calls `{toolboxProxyUrl}/{sandboxId}/process/...` with the API key. Commands run in the simulator's
tiny shell (`providers/sim/core/shell.py`), under the sandbox's vendor-time model:

- `POST /process/execute` `{"command", "cwd", "envs", "timeout"}` -> `{"exitCode", "result"}`: stdout and
  stderr in one stream, as the daemon gives them (here stdout first, then stderr: the shell does not
  interleave). `timeout` is the client's real seconds; past it the daemon kills the command and answers
  408 `PROCESS_EXECUTION_TIMEOUT` (-> `DaytonaProcessExecutionTimeoutError`). No timeout: none.
- sessions: `POST /process/session` `{"sessionId"}`, `GET|DELETE /process/session/{id}`, `GET /process/session`,
  `POST /process/session/{id}/exec` `{"command", "runAsync"}` -> `{"cmdId", "output", "stdout", "stderr",
  "exitCode"}` (202 `{"cmdId"}` when `runAsync`), `GET .../command/{cmdId}` and `.../command/{cmdId}/logs`.
  Session commands have no server-side timeout (the SDK's `timeout` is its own HTTP deadline). Divergence:
  each command starts afresh (a `cd` or `export` does not carry over to the next command of the session).

Errors: an unknown or destroyed sandbox -> 404 (proxy); one not started yet, or in error -> 409 (proxy); the
sandbox died under the command -> 502 (proxy; "OOM killed" when it ran out of memory); an injected transient
failure -> 502 "Command failed: ..."; an unknown session or command -> 404 (daemon).
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from providers.sim.core.simulator import (
    ErrorType,
    ExecError,
    ExecOutcome,
    ExecTimedOut,
    NotFound,
    NotRunning,
    SandboxDied,
    SimSandbox,
)
from providers.sim.daytona.front import Front, error, front_of
from providers.sim.daytona.shapes import SOURCE_DAEMON, SOURCE_PROXY, state_of


@dataclass(slots=True)
class SessionCommand:
    id: str
    command: str
    outcome: ExecOutcome | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "command": self.command,
            "exitCode": None if self.outcome is None else self.outcome.exit_code,
        }


@dataclass(slots=True)
class Sessions:
    """Sessions per sandbox (forgotten when the sandbox ends)."""

    by_sandbox: dict[str, dict[str, dict[str, SessionCommand]]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def of(self, sandbox_id: str) -> dict[str, dict[str, SessionCommand]]:
        return self.by_sandbox.setdefault(sandbox_id, {})

    def new_command_id(self) -> str:
        return f"cmd-{next(self._ids)}-{uuid.uuid4().hex[:8]}"

    def forget(self, sb: SimSandbox, *_: Any) -> None:
        if not sb.active:
            self.by_sandbox.pop(sb.id, None)


SESSIONS = web.AppKey("stampede_daytona_sessions", Sessions)


def _running(request: web.Request) -> tuple[Front, SimSandbox | None, web.Response | None]:
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


def _failure(request: web.Request, exc: BaseException, timeout_s: float | None) -> web.Response:
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


async def _json_object(request: web.Request) -> dict[str, Any] | None:
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


async def execute(request: web.Request) -> web.Response:
    front, sb, refused = _running(request)
    if refused is not None:
        return refused
    assert sb is not None
    body = await _json_object(request)
    command = body.get("command") if body is not None else None
    if not isinstance(command, str) or not command.strip():
        return error(request, 400, "command is required", source=SOURCE_DAEMON)
    timeout = body.get("timeout") if body is not None else None
    envs = body.get("envs") if body is not None else None
    cwd = body.get("cwd") if body is not None else None
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0):
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
        return _failure(request, exc, timeout)
    return web.json_response({"exitCode": outcome.exit_code, "result": outcome.stdout + outcome.stderr})


async def create_session(request: web.Request) -> web.Response:
    _, sb, refused = _running(request)
    if refused is not None:
        return refused
    assert sb is not None
    body = await _json_object(request)
    session_id = body.get("sessionId") if body is not None else None
    if not isinstance(session_id, str) or not session_id:
        return error(request, 400, "sessionId is required", source=SOURCE_DAEMON)
    sessions = request.app[SESSIONS].of(sb.id)
    if session_id in sessions:
        return error(request, 409, f"session {session_id} already exists", source=SOURCE_DAEMON)
    sessions[session_id] = {}
    return web.Response(status=201)


def _session(request: web.Request) -> tuple[dict[str, SessionCommand] | None, web.Response | None]:
    sessions = request.app[SESSIONS].of(request.match_info["sandbox_id"])
    found = sessions.get(request.match_info["session_id"])
    if found is None:
        return None, error(request, 404, "session not found", source=SOURCE_DAEMON)
    return found, None


def _session_body(session_id: str, commands: dict[str, SessionCommand]) -> dict[str, Any]:
    return {"sessionId": session_id, "commands": [c.as_dict() for c in commands.values()]}


async def list_sessions(request: web.Request) -> web.Response:
    _, sb, refused = _running(request)
    if refused is not None:
        return refused
    assert sb is not None
    sessions = request.app[SESSIONS].of(sb.id)
    return web.json_response([_session_body(sid, commands) for sid, commands in sessions.items()])


async def get_session(request: web.Request) -> web.Response:
    commands, missing = _session(request)
    if missing is not None:
        return missing
    assert commands is not None
    return web.json_response(_session_body(request.match_info["session_id"], commands))


async def delete_session(request: web.Request) -> web.Response:
    _commands, missing = _session(request)
    if missing is not None:
        return missing
    request.app[SESSIONS].of(request.match_info["sandbox_id"]).pop(request.match_info["session_id"], None)
    return web.Response(status=204)


async def session_exec(request: web.Request) -> web.Response:
    front, sb, refused = _running(request)
    if refused is not None:
        return refused
    assert sb is not None
    commands, missing = _session(request)
    if missing is not None:
        return missing
    assert commands is not None
    body = await _json_object(request)
    command = body.get("command") if body is not None else None
    if not isinstance(command, str) or not command.strip():
        return error(request, 400, "command is required", source=SOURCE_DAEMON)
    record = SessionCommand(request.app[SESSIONS].new_command_id(), command)
    commands[record.id] = record
    run_async = bool(body.get("runAsync") or body.get("async")) if body is not None else False
    if run_async:

        def done(result: ExecOutcome | BaseException) -> None:
            if isinstance(result, ExecOutcome):
                record.outcome = result

        try:
            front.sim.exec_start(sb.id, command, timeout_s=math.inf, on_done=done)
        except (NotRunning, NotFound) as exc:
            return _failure(request, exc, None)
        return web.json_response({"cmdId": record.id}, status=202)
    try:
        outcome = await front.sim.exec(sb.id, command, timeout_s=math.inf)
    except (ExecTimedOut, SandboxDied, ExecError, NotRunning, NotFound) as exc:
        return _failure(request, exc, None)
    record.outcome = outcome
    return web.json_response(
        {
            "cmdId": record.id,
            "output": outcome.stdout + outcome.stderr,
            "stdout": outcome.stdout,
            "stderr": outcome.stderr,
            "exitCode": outcome.exit_code,
        }
    )


def _command(request: web.Request) -> tuple[SessionCommand | None, web.Response | None]:
    commands, missing = _session(request)
    if missing is not None:
        return None, missing
    assert commands is not None
    found = commands.get(request.match_info["command_id"])
    if found is None:
        return None, error(request, 404, "command not found", source=SOURCE_DAEMON)
    return found, None


async def get_command(request: web.Request) -> web.Response:
    found, missing = _command(request)
    if missing is not None:
        return missing
    assert found is not None
    return web.json_response(found.as_dict())


async def command_logs(request: web.Request) -> web.Response:
    found, missing = _command(request)
    if missing is not None:
        return missing
    assert found is not None
    out = found.outcome
    stdout, stderr = (out.stdout, out.stderr) if out is not None else ("", "")
    return web.json_response({"output": stdout + stderr, "stdout": stdout, "stderr": stderr})


def add_routes(app: web.Application, prefix: str) -> Callable[[SimSandbox, Any], None]:
    """The toolbox under `prefix/{sandbox_id}`; returns the callback that forgets an ended sandbox's sessions."""
    sessions = Sessions()
    app[SESSIONS] = sessions
    base = f"{prefix}/{{sandbox_id}}/process"
    r = app.router
    r.add_post(f"{base}/execute", execute)
    r.add_post(f"{base}/session", create_session)
    r.add_get(f"{base}/session", list_sessions)
    r.add_get(f"{base}/session/{{session_id}}", get_session)
    r.add_delete(f"{base}/session/{{session_id}}", delete_session)
    r.add_post(f"{base}/session/{{session_id}}/exec", session_exec)
    r.add_get(f"{base}/session/{{session_id}}/command/{{command_id}}", get_command)
    r.add_get(f"{base}/session/{{session_id}}/command/{{command_id}}/logs", command_logs)
    return sessions.forget
