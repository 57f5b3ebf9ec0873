"""Daytona's toolbox PTY sessions (`process.create_pty_session`, `connect_pty_session`, list, info, resize, kill).

Under `{toolboxProxyUrl}/{sandboxId}/process/pty`: `POST` (PtyCreateRequest -> 201 `{"sessionId"}`), `GET` (`{"sessions":
[PtySessionInfo]}`), `GET|DELETE /{id}`, `POST /{id}/resize` `{"cols", "rows"}`, and two WebSockets:
`GET /create-connect?id&cols&rows&cwd` (create and attach in one round trip, envs in a subprotocol token
`X-Daytona-Pty-Envs~<base64url JSON>`) and `GET /{id}/connect`. On the socket, as the daemon speaks it: a text
control message `{"type": "control", "status": "connected"}` first, the terminal's output as binary messages,
the client's binary (or text) messages as the terminal's input, and when the shell exits `{"type": "control",
"status": "exited", "exitCode": N}` then a close 1000 whose reason is `{"exitCode": N}`. A session outlives its
clients (output while none is attached is dropped) until its shell exits or it is deleted.

The terminal is an interactive bash on a real pty in the sandbox's own tree (`isolated_shell.py`), as one simulated
command of unbounded time: it needs `[sandbox] commands = "real"`; with modelled commands the calls answer 501.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from providers.sim.core.simulator import ExecOutcome, ExecTicket, NotFound, NotRunning, SimSandbox
from providers.sim.daytona.front import Front, error, json_object
from providers.sim.daytona.shapes import SOURCE_DAEMON
from providers.sim.daytona.toolbox import failure, on_found, on_running

EXIT_CONTROL = "X-Daytona-Pty-Exit-Control"
ENVS_PREFIX = "X-Daytona-Pty-Envs~"
SHELL = "exec bash -i"
MAX_SIZE = 1000


@dataclass(eq=False)
class PtySession:
    """One terminal: its shell's ticket, its size, the queues of the clients attached to it, its exit."""

    id: str
    cols: int
    rows: int
    cwd: str
    envs: dict[str, str]
    created_at: str
    ticket: ExecTicket | None = None
    exit_code: int | None = None
    clients: set[asyncio.Queue[bytes | None]] = field(default_factory=set)

    def info(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "active": self.exit_code is None,
            "cols": self.cols,
            "rows": self.rows,
            "cwd": self.cwd,
            "envs": self.envs,
            "createdAt": self.created_at,
            "lazyStart": False,
        }

    def output(self, data: bytes) -> None:
        for queue in self.clients:
            queue.put_nowait(data)

    def ended(self, result: ExecOutcome | BaseException) -> None:
        self.exit_code = result.exit_code if isinstance(result, ExecOutcome) else 137
        for queue in self.clients:
            queue.put_nowait(None)


@dataclass
class PtySessions:
    """Terminals per sandbox (forgotten, their shells killed, when the sandbox ends)."""

    by_sandbox: dict[str, dict[str, PtySession]] = field(default_factory=dict)

    def of(self, sandbox_id: str) -> dict[str, PtySession]:
        return self.by_sandbox.setdefault(sandbox_id, {})

    def forget(self, sb: SimSandbox, *_: Any) -> None:
        if not sb.active:
            self.by_sandbox.pop(sb.id, None)


PTYS = web.AppKey("stampede_daytona_ptys", PtySessions)


def _size(raw: Any, default: int) -> int | None:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return None
    return value if 1 <= value <= MAX_SIZE else None


def _start(
    request: web.Request, front: Front, sb: SimSandbox, spec: dict[str, Any]
) -> tuple[PtySession | None, web.Response | None]:
    """A new terminal from a PtyCreateRequest-shaped dict, or the daemon's refusal."""
    if front.sim.profile.sandbox.commands != "real":
        return None, error(
            request,
            501,
            "PTY sessions need real commands: serve with --commands real",
            code="NOT_IMPLEMENTED",
            source=SOURCE_DAEMON,
        )
    session_id, cwd, envs = spec.get("id"), spec.get("cwd"), spec.get("envs") or {}
    cols, rows = _size(spec.get("cols"), 80), _size(spec.get("rows"), 24)
    if not isinstance(session_id, str) or not session_id:
        return None, error(request, 400, "id is required", source=SOURCE_DAEMON)
    if cols is None or rows is None:
        return None, error(request, 400, f"cols and rows must be 1..{MAX_SIZE}", source=SOURCE_DAEMON)
    if cwd is not None and not isinstance(cwd, str):
        return None, error(request, 400, "cwd must be a string", source=SOURCE_DAEMON)
    if not isinstance(envs, dict) or not all(isinstance(v, str) for v in envs.values()):
        return None, error(request, 400, "envs must be an object of strings", source=SOURCE_DAEMON)
    sessions = request.app[PTYS].of(sb.id)
    if session_id in sessions:
        return None, error(request, 409, f"PTY session {session_id} already exists", source=SOURCE_DAEMON)
    home = sb.user.home if sb.user is not None else "/root"
    created = datetime.now(tz=UTC).isoformat().replace("+00:00", "Z")
    session = PtySession(session_id, cols, rows, cwd or home, dict(envs), created)
    try:
        session.ticket = front.sim.exec_start(
            sb.id,
            SHELL,
            timeout_s=math.inf,
            on_done=session.ended,
            env={"TERM": "xterm-256color", **envs},
            cwd=cwd or None,
            on_stdout=session.output,
            on_stderr=session.output,
            stdin=True,
            pty=(cols, rows),
        )
    except (NotFound, NotRunning) as exc:
        return None, failure(request, exc, None)
    sessions[session_id] = session
    return session, None


def _found(request: web.Request) -> tuple[PtySession | None, web.Response | None]:
    found = request.app[PTYS].of(request.match_info["sandbox_id"]).get(request.match_info["pty_id"])
    if found is None:
        return None, error(request, 404, "PTY session not found", source=SOURCE_DAEMON)
    return found, None


@on_running
async def create(request: web.Request, front: Front, sb: SimSandbox) -> web.Response:
    body = await json_object(request)
    if body is None:
        return error(request, 400, "the body must be a JSON object", source=SOURCE_DAEMON)
    session, problem = _start(request, front, sb, body)
    if problem is not None:
        return problem
    assert session is not None
    return web.json_response({"sessionId": session.id}, status=201)


@on_running
async def list_all(request: web.Request, _front: Front, sb: SimSandbox) -> web.Response:
    return web.json_response({"sessions": [s.info() for s in request.app[PTYS].of(sb.id).values()]})


@on_found(_found)
async def get_one(request: web.Request, found: PtySession) -> web.Response:
    return web.json_response(found.info())


@on_found(_found)
async def resize(request: web.Request, found: PtySession) -> web.Response:
    body = await json_object(request) or {}
    cols, rows = _size(body.get("cols"), 0), _size(body.get("rows"), 0)
    if not cols or not rows:
        return error(request, 400, f"cols and rows must be 1..{MAX_SIZE}", source=SOURCE_DAEMON)
    if found.exit_code is not None:
        return error(request, 410, "PTY session has exited", source=SOURCE_DAEMON)
    found.cols, found.rows = cols, rows
    if found.ticket is not None and found.ticket.process is not None:
        found.ticket.process.resize(cols, rows)
    return web.json_response(found.info())


@on_found(_found)
async def delete(request: web.Request, found: PtySession) -> web.Response:
    if found.ticket is not None and found.exit_code is None:
        found.ticket.resolve(ExecOutcome(137, "", "", 0.0))  # kills the shell and tells its clients
    request.app[PTYS].of(request.match_info["sandbox_id"]).pop(found.id, None)
    return web.json_response({"message": f"PTY session {found.id} deleted"})


@on_running
async def create_connect(request: web.Request, front: Front, sb: SimSandbox) -> web.StreamResponse:
    spec: dict[str, Any] = {k: request.query.get(k) for k in ("id", "cols", "rows", "cwd")}
    for token in request.headers.get("Sec-WebSocket-Protocol", "").split(","):
        token = token.strip()
        if token.startswith(ENVS_PREFIX):
            encoded = token[len(ENVS_PREFIX) :]
            try:
                spec["envs"] = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
            except (binascii.Error, ValueError):
                return error(request, 400, "the envs token is not base64url JSON", source=SOURCE_DAEMON)
    session, problem = _start(request, front, sb, spec)
    if problem is not None:
        return problem
    assert session is not None
    return await _attach(request, session)


@on_running
async def connect(request: web.Request, _front: Front, _sb: SimSandbox) -> web.StreamResponse:
    found, missing = _found(request)
    if missing is not None:
        return missing
    assert found is not None
    if found.exit_code is not None:
        return error(request, 410, "PTY session has exited", source=SOURCE_DAEMON)
    return await _attach(request, found)


async def _attach(request: web.Request, session: PtySession) -> web.StreamResponse:
    """One client on a terminal until it leaves or the shell exits."""
    ws = web.WebSocketResponse(protocols=(EXIT_CONTROL,))
    if not ws.can_prepare(request).ok:
        return error(request, 400, "a PTY connection is a WebSocket upgrade", source=SOURCE_DAEMON)
    await ws.prepare(request)
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()
    session.clients.add(queue)
    await ws.send_str(json.dumps({"type": "control", "status": "connected"}))

    async def forward() -> None:
        while (data := await queue.get()) is not None:
            await ws.send_bytes(data)
        exited = {"exitCode": session.exit_code}
        await ws.send_str(json.dumps({"type": "control", "status": "exited", **exited}))
        await ws.close(code=WSCloseCode.OK, message=json.dumps(exited).encode())

    sender = asyncio.create_task(forward())
    if session.exit_code is not None:
        queue.put_nowait(None)
    try:
        async for message in ws:
            process = session.ticket.process if session.ticket is not None else None
            if process is None or session.exit_code is not None:
                continue
            if message.type is WSMsgType.BINARY:
                process.write_stdin(message.data)
            elif message.type is WSMsgType.TEXT:
                process.write_stdin(message.data.encode())
    finally:
        session.clients.discard(queue)
        if not sender.done():
            sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await sender
    return ws


def add_routes(app: web.Application, prefix: str) -> Callable[[SimSandbox, Any], None]:
    """The PTY routes under `prefix/{sandbox_id}`; returns the callback that forgets an ended sandbox's terminals."""
    ptys = PtySessions()
    app[PTYS] = ptys
    base = f"{prefix}/{{sandbox_id}}/process/pty"
    r = app.router
    r.add_post(base, create)
    r.add_get(base, list_all)
    r.add_get(f"{base}/create-connect", create_connect)
    r.add_get(f"{base}/{{pty_id}}", get_one)
    r.add_delete(f"{base}/{{pty_id}}", delete)
    r.add_post(f"{base}/{{pty_id}}/resize", resize)
    r.add_get(f"{base}/{{pty_id}}/connect", connect)
    return ptys.forget
