"""Daytona's toolbox sessions (`process.create_session`, `execute_session_command`, logs) that keep shell state.

Under `{toolboxProxyUrl}/{sandboxId}/process/session`: `POST` `{"sessionId"}` (201; 409 if it exists), `GET`
(list), `GET|DELETE /{id}`, `POST /{id}/exec` `{"command", "runAsync"}` -> `{"cmdId", "output", "stdout",
"stderr", "exitCode"}` (202 `{"cmdId"}` when `runAsync`), `GET /{id}/command/{cmdId}`, `GET
/{id}/command/{cmdId}/logs` (JSON `{output, stdout, stderr}`; with `follow=true` over a WebSocket, the daemon's
framing: `\\x01\\x01\\x01` before stdout, `\\x02\\x02\\x02` before stderr, closed with 1000 when the command ends),
`POST /{id}/command/{cmdId}/input` `{"data"}` (stdin of a command run async). Session commands have no server-side
timeout (the SDK's `timeout` is its own HTTP deadline).

State. A Daytona session is one long-lived shell: a `cd`, an `export`, a variable or a function defined by one
command is there for the next. With real commands (profile `[sandbox] commands = "real"`) each session command
is still its own simulated command (the profile's overhead and drawn fates apply per command, as the load path
counts them), wrapped so the shell's state is replayed around it: before the command the session's state file is
sourced and its directory entered; an EXIT trap saves `pwd`, the variables (`declare -p` minus bash's own and
read-only ones), the functions (`declare -f`) and the aliases, under `/run/stampede-sessions/<id>` in the
sandbox's own tree. Chosen over one shell fed through stdin because a user's command may read stdin itself and
because a per-command process keeps each command's exit code, output and fate apart without markers in the
stream. What it does not carry: background jobs stay running but leave the session's job table, and shell
options (`set -e`) do not carry over. With modelled commands each command starts afresh (a divergence: the
modelled shell has no state to save).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import shlex
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSCloseCode, web

from providers.sim.core.simulator import (
    ExecError,
    ExecOutcome,
    ExecTicket,
    ExecTimedOut,
    NotFound,
    NotRunning,
    SandboxDied,
    SimSandbox,
)
from providers.sim.daytona.front import Front, error, front_of, json_object
from providers.sim.daytona.shapes import SOURCE_DAEMON
from providers.sim.daytona.toolbox import failure, on_found, on_running

STATE_DIR = "/run/stampede-sessions"
STDOUT_PREFIX = b"\x01\x01\x01"
STDERR_PREFIX = b"\x02\x02\x02"
INPUT_WAIT_S = 5.0  # real seconds a send_input waits for a command still in its overhead to start
_BASH_OWN = (
    "BASH|BASHOPTS|BASHPID|BASH_[A-Z_]+|SHELLOPTS|PPID|UID|EUID|GROUPS|FUNCNAME|PIPESTATUS|RANDOM|SRANDOM|SECONDS"
    "|LINENO|HISTCMD|DIRSTACK|EPOCHREALTIME|EPOCHSECONDS|SHLVL|PWD|OLDPWD|_|COMP_WORDBREAKS|__rc|__s"
)


def stateful(command: str, state_dir: str) -> str:
    """`command` wrapped so the session's cwd, variables, functions and aliases come before it and are saved after."""
    save = (
        f'__rc=$?; {{ pwd > "$__s/cwd"; declare -p 2>/dev/null | grep -Ev "^declare -[^ ]*r|^declare -[^ ]* '
        f'({_BASH_OWN})(=|$)"; declare -f; alias -p; }} > "$__s/state.tmp" 2>/dev/null; '
        f'mv -f "$__s/state.tmp" "$__s/state"; exit $__rc'
    )
    return (
        f"__s={shlex.quote(state_dir)}\n"
        'if [ -f "$__s/state" ]; then . "$__s/state"; fi 2>/dev/null\n'
        'if [ -f "$__s/cwd" ]; then cd "$(cat "$__s/cwd")" 2>/dev/null; fi\n'
        "shopt -s expand_aliases\n"
        f"trap {shlex.quote(save)} EXIT\n"
        f"{command}\n"
    )


@dataclass(slots=True, eq=False)
class SessionCommand:
    """One command of a session: its output as it arrives (for logs and follow), then its outcome."""

    id: str
    command: str
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    exit_code: int | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    chunks: list[tuple[bytes, bytes]] = field(default_factory=list)  # (prefix, data) in arrival order
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    ticket: ExecTicket | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "command": self.command, "exitCode": self.exit_code}

    def out(self, data: bytes) -> None:
        self.stdout += data
        self.chunks.append((STDOUT_PREFIX, data))
        self.changed.set()

    def err(self, data: bytes) -> None:
        self.stderr += data
        self.chunks.append((STDERR_PREFIX, data))
        self.changed.set()

    def finish(self, result: ExecOutcome | BaseException) -> None:
        if isinstance(result, ExecOutcome):
            if not self.stdout and not self.stderr:  # a modelled command: its output comes with its outcome
                self.out(result.stdout.encode())
                self.err(result.stderr.encode())
            self.exit_code = result.exit_code
        elif self.exit_code is None:
            self.exit_code = -1
        self.ended.set()
        self.changed.set()

    def logs(self) -> dict[str, str]:
        out, err = self.stdout.decode(errors="replace"), self.stderr.decode(errors="replace")
        return {"output": out + err, "stdout": out, "stderr": err}


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


def _real(front: Front) -> bool:
    return front.sim.profile.sandbox.commands == "real"


def _state_dir(session_id: str) -> str:
    return f"{STATE_DIR}/{session_id.replace('/', '_')}"


def _prepare_state(front: Front, sb: SimSandbox, session_id: str) -> None:
    """The session's state folder in the sandbox's tree (removed with the session)."""
    host = front.sim.tree(sb.id).host_path(_state_dir(session_id))
    host.mkdir(parents=True, exist_ok=True)


def _drop_state(front: Front, sandbox_id: str, session_id: str) -> None:
    try:
        host = front.sim.tree(sandbox_id).host_path(_state_dir(session_id))
    except (NotFound, NotRunning):
        return
    for name in ("cwd", "state", "state.tmp"):
        (host / name).unlink(missing_ok=True)
    if host.is_dir():
        host.rmdir()


@on_running
async def create_session(request: web.Request, front: Front, sb: SimSandbox) -> web.Response:
    body = await json_object(request)
    session_id = body.get("sessionId") if body is not None else None
    if not isinstance(session_id, str) or not session_id or session_id in (".", ".."):
        return error(request, 400, "sessionId is required", source=SOURCE_DAEMON)
    sessions = request.app[SESSIONS].of(sb.id)
    if session_id in sessions:
        return error(request, 409, f"session {session_id} already exists", source=SOURCE_DAEMON)
    if _real(front):
        _prepare_state(front, sb, session_id)
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


@on_running
async def list_sessions(request: web.Request, _front: Front, sb: SimSandbox) -> web.Response:
    sessions = request.app[SESSIONS].of(sb.id)
    return web.json_response([_session_body(sid, commands) for sid, commands in sessions.items()])


@on_found(_session)
async def get_session(request: web.Request, commands: dict[str, SessionCommand]) -> web.Response:
    return web.json_response(_session_body(request.match_info["session_id"], commands))


@on_found(_session)
async def delete_session(request: web.Request, commands: dict[str, SessionCommand]) -> web.Response:
    sandbox_id, session_id = request.match_info["sandbox_id"], request.match_info["session_id"]
    for record in commands.values():
        if record.ticket is not None and not record.ended.is_set():
            record.ticket.resolve(ExecError(sandbox_id, "session deleted"))  # kills a real command
    request.app[SESSIONS].of(sandbox_id).pop(session_id, None)
    _drop_state(front_of(request), sandbox_id, session_id)
    return web.Response(status=204)


@on_running
async def session_exec(request: web.Request, front: Front, sb: SimSandbox) -> web.Response:
    commands, missing = _session(request)
    if missing is not None:
        return missing
    assert commands is not None
    body = await json_object(request)
    command = body.get("command") if body is not None else None
    if not isinstance(command, str) or not command.strip():
        return error(request, 400, "command is required", source=SOURCE_DAEMON)
    record = SessionCommand(request.app[SESSIONS].new_command_id(), command)
    run_async = bool(body.get("runAsync") or body.get("async")) if body is not None else False
    real = _real(front)
    wrapped = stateful(command, _state_dir(request.match_info["session_id"])) if real else command
    result: asyncio.Future[ExecOutcome | BaseException] = asyncio.get_running_loop().create_future()

    def done(outcome: ExecOutcome | BaseException) -> None:
        record.finish(outcome)
        if not result.done():
            result.set_result(outcome)

    try:
        record.ticket = front.sim.exec_start(
            sb.id,
            wrapped,
            timeout_s=math.inf,
            on_done=done,
            on_stdout=record.out if real else None,
            on_stderr=record.err if real else None,
            stdin=run_async and real,
        )
    except (NotRunning, NotFound) as exc:
        return failure(request, exc, None)
    commands[record.id] = record
    if run_async:
        return web.json_response({"cmdId": record.id}, status=202)
    try:
        outcome = await result
    except asyncio.CancelledError:
        record.ticket.cancel()
        raise
    if isinstance(outcome, (ExecTimedOut, SandboxDied, ExecError, NotRunning, NotFound)):
        return failure(request, outcome, None)
    if isinstance(outcome, BaseException):
        raise outcome
    return web.json_response({"cmdId": record.id, **record.logs(), "exitCode": record.exit_code})


def _command(request: web.Request) -> tuple[SessionCommand | None, web.Response | None]:
    commands, missing = _session(request)
    if missing is not None:
        return None, missing
    assert commands is not None
    found = commands.get(request.match_info["command_id"])
    if found is None:
        return None, error(request, 404, "command not found", source=SOURCE_DAEMON)
    return found, None


@on_found(_command)
async def get_command(request: web.Request, found: SessionCommand) -> web.Response:
    return web.json_response(found.as_dict())


@on_found(_command)
async def command_logs(request: web.Request, found: SessionCommand) -> web.StreamResponse:
    if request.query.get("follow", "").lower() != "true":
        return web.json_response(found.logs())
    ws = web.WebSocketResponse()
    if not ws.can_prepare(request).ok:
        return error(request, 400, "follow=true needs a WebSocket upgrade", source=SOURCE_DAEMON)
    await ws.prepare(request)
    sent = 0
    while True:
        found.changed.clear()
        while sent < len(found.chunks):
            prefix, data = found.chunks[sent]
            sent += 1
            if data:
                await ws.send_bytes(prefix + data)
        if found.ended.is_set() and sent >= len(found.chunks):
            break
        await found.changed.wait()
    await ws.close(code=WSCloseCode.OK)
    return ws


@on_found(_command)
async def send_input(request: web.Request, found: SessionCommand) -> web.Response:
    body = await json_object(request)
    data = body.get("data") if body is not None else None
    if not isinstance(data, str):
        return error(request, 400, "data must be a string", source=SOURCE_DAEMON)
    waited = 0.0
    while found.ticket is not None and found.ticket.process is None and not found.ended.is_set():
        if waited >= INPUT_WAIT_S:
            break
        await asyncio.sleep(0.01)
        waited += 0.01
    process = found.ticket.process if found.ticket is not None else None
    if found.ended.is_set() or process is None:
        return error(request, 410, "command is not running (or takes no input)", source=SOURCE_DAEMON)
    process.write_stdin(data.encode())
    return web.Response(status=204)


def add_routes(app: web.Application, prefix: str) -> Callable[[SimSandbox, Any], None]:
    """The session routes under `prefix/{sandbox_id}`; returns the callback that forgets an ended sandbox's."""
    sessions = Sessions()
    app[SESSIONS] = sessions
    base = f"{prefix}/{{sandbox_id}}/process/session"
    r = app.router
    r.add_post(base, create_session)
    r.add_get(base, list_sessions)
    r.add_get(f"{base}/{{session_id}}", get_session)
    r.add_delete(f"{base}/{{session_id}}", delete_session)
    r.add_post(f"{base}/{{session_id}}/exec", session_exec)
    r.add_get(f"{base}/{{session_id}}/command/{{command_id}}", get_command)
    r.add_get(f"{base}/{{session_id}}/command/{{command_id}}/logs", command_logs)
    r.add_post(f"{base}/{{session_id}}/command/{{command_id}}/input", send_input)
    return sessions.forget
