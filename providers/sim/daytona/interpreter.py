"""Daytona's stateful code interpreter (`sandbox.code_interpreter` of daytona 0.226.1) on a real python3.

Under `{toolboxProxyUrl}/{sandboxId}/process/interpreter`: `POST /context` `{"cwd", "language"}` ->
`InterpreterContext` (`{id, cwd, language, active, createdAt}`), `GET /context` (`{"contexts"}`), `DELETE
/context/{id}`, and the WebSocket `GET /execute`: the client sends one JSON request `{"code", "contextId", "envs",
"timeout"}`, the daemon answers JSON messages `{"type": "stdout"|"stderr", "text"}` and `{"type": "error", "name",
"value", "traceback"}` as the code runs, then closes with 1000; past `timeout` (real seconds) it interrupts the
code and closes with 4008 (the SDK's timeout). Without a `contextId` the sandbox's default context is used.

A context is one long-lived `python3` in the sandbox's own tree (a simulated command of unbounded time: the
profile's per-command overhead is paid once, when the context starts), running DRIVER: it reads one request per
line on stdin and runs the code in the context's own globals, so a variable set by one `run_code` is there for the
next; the value of a last bare expression is printed, as a notebook cell shows it. Needs `[sandbox] commands =
"real"`; with modelled commands the calls answer 501.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import signal
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web

from providers.sim.core.simulator import ExecOutcome, ExecTicket, NotFound, NotRunning, SimSandbox
from providers.sim.daytona.front import Answer, Front, error, json_object
from providers.sim.daytona.shapes import SOURCE_DAEMON
from providers.sim.daytona.toolbox import on_running

TIMEOUT_CLOSE = 4008  # the daemon's close code for a run past its timeout
DEFAULT_CONTEXT = "default"
DRIVER = r"""
import ast, json, os, sys, traceback
out = os.fdopen(os.dup(1), "w", buffering=1)
def send(**message):
    out.write(json.dumps(message) + "\n")
class Stream:
    def __init__(self, kind): self.kind = kind
    def write(self, text):
        if text: send(type=self.kind, text=text)
        return len(text)
    def flush(self): pass
    def isatty(self): return False
sys.stdout, sys.stderr = Stream("stdout"), Stream("stderr")
space = {"__name__": "__main__"}
for line in sys.stdin:
    request = json.loads(line)
    saved = dict(os.environ)
    os.environ.update(request.get("envs") or {})
    try:
        tree = ast.parse(request["code"], "<cell>", "exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, "<cell>", "exec"), space)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), space)
            if value is not None:
                print(repr(value))
    except BaseException as exc:
        send(type="error", name=type(exc).__name__, value=str(exc), traceback=traceback.format_exc())
    finally:
        os.environ.clear()
        os.environ.update(saved)
        send(type="done")
"""


@dataclass(eq=False)
class Context:
    """One interpreter: its python3's ticket, the run in progress (one at a time) and its messages."""

    id: str
    cwd: str
    language: str
    created_at: str
    ticket: ExecTicket | None = None
    ended: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    messages: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)
    _partial: bytes = b""

    def info(self) -> dict[str, Any]:
        active = not self.ended
        return {
            "id": self.id,
            "cwd": self.cwd,
            "language": self.language,
            "active": active,
            "createdAt": self.created_at,
        }

    def output(self, data: bytes) -> None:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            with contextlib.suppress(ValueError):
                self.messages.put_nowait(json.loads(line))

    def stderr(self, data: bytes) -> None:  # the driver's own failures (its code's stderr comes as messages)
        self.messages.put_nowait({"type": "stderr", "text": data.decode(errors="replace")})

    def finished(self, result: ExecOutcome | BaseException) -> None:
        self.ended = True
        self.messages.put_nowait(None)


@dataclass
class Interpreters:
    """Contexts per sandbox (forgotten, their interpreters killed, when the sandbox ends)."""

    by_sandbox: dict[str, dict[str, Context]] = field(default_factory=dict)

    def of(self, sandbox_id: str) -> dict[str, Context]:
        return self.by_sandbox.setdefault(sandbox_id, {})

    def forget(self, sb: SimSandbox, *_: Any) -> None:
        if not sb.active:
            self.by_sandbox.pop(sb.id, None)


INTERPRETERS = web.AppKey("stampede_daytona_interpreters", Interpreters)


def _unmodelled(request: web.Request) -> web.Response:
    return error(
        request,
        501,
        "the code interpreter needs real commands: serve with --commands real",
        code="NOT_IMPLEMENTED",
        source=SOURCE_DAEMON,
    )


def _start(front: Front, sb: SimSandbox, contexts: dict[str, Context], context_id: str, cwd: str | None) -> Context:
    """A new context's python3 (NotFound / NotRunning when the sandbox cannot run it)."""
    home = sb.user.home if sb.user is not None else "/root"
    created = datetime.now(tz=UTC).isoformat().replace("+00:00", "Z")
    context = Context(context_id, cwd or home, "python", created)
    context.ticket = front.sim.exec_start(
        sb.id,
        "exec python3 -u -c " + _quoted(DRIVER),
        timeout_s=math.inf,
        on_done=context.finished,
        cwd=cwd or None,
        on_stdout=context.output,
        on_stderr=context.stderr,
        stdin=True,
    )
    contexts[context_id] = context
    return context


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _on_real_commands(
    handler: Callable[[web.Request, Front, SimSandbox], Awaitable[Answer]],
) -> Callable[[web.Request], Awaitable[Answer | web.Response]]:
    """A handler on the path's running sandbox when commands run for real (the interpreter is a real python3); else
    the proxy's or the daemon's answer."""

    @functools.wraps(handler)
    async def checked(request: web.Request, front: Front, sb: SimSandbox) -> Answer | web.Response:
        if front.sim.profile.sandbox.commands != "real":
            return _unmodelled(request)
        return await handler(request, front, sb)

    return on_running(checked)


@_on_real_commands
async def create_context(request: web.Request, front: Front, sb: SimSandbox) -> web.Response:
    body = await json_object(request) or {}
    cwd, language = body.get("cwd"), body.get("language") or "python"
    if cwd is not None and not isinstance(cwd, str):
        return error(request, 400, "cwd must be a string", source=SOURCE_DAEMON)
    if language != "python":
        return error(request, 400, f"unsupported language: {language}", source=SOURCE_DAEMON)
    contexts = request.app[INTERPRETERS].of(sb.id)
    try:
        context = _start(front, sb, contexts, uuid.uuid4().hex, cwd)
    except (NotFound, NotRunning):
        return error(request, 409, f"Sandbox {sb.id} is not started", source="DAYTONA_PROXY")
    return web.json_response(context.info())


@on_running
async def list_contexts(request: web.Request, _front: Front, sb: SimSandbox) -> web.Response:
    contexts = request.app[INTERPRETERS].of(sb.id).values()
    return web.json_response({"contexts": [c.info() for c in contexts if c.id != DEFAULT_CONTEXT]})


@on_running
async def delete_context(request: web.Request, _front: Front, sb: SimSandbox) -> web.Response:
    context = request.app[INTERPRETERS].of(sb.id).pop(request.match_info["context_id"], None)
    if context is None:
        return error(request, 404, "context not found", source=SOURCE_DAEMON)
    if context.ticket is not None and not context.ended:
        context.ticket.resolve(ExecOutcome(137, "", "", 0.0))  # kills its python3
    return web.json_response({"message": f"context {context.id} deleted"})


@_on_real_commands
async def execute(request: web.Request, front: Front, sb: SimSandbox) -> web.StreamResponse:
    ws = web.WebSocketResponse()
    if not ws.can_prepare(request).ok:
        return error(request, 400, "code runs over a WebSocket upgrade", source=SOURCE_DAEMON)
    await ws.prepare(request)
    first = await ws.receive()
    try:
        run = json.loads(first.data) if first.type in (WSMsgType.TEXT, WSMsgType.BINARY) else None
    except ValueError:
        run = None
    if not isinstance(run, dict) or not isinstance(run.get("code"), str):
        await ws.close(code=1003, message=b"expected a JSON request with code")
        return ws
    contexts = request.app[INTERPRETERS].of(sb.id)
    context_id = run.get("contextId") or DEFAULT_CONTEXT
    context = contexts.get(context_id)
    if context is None or context.ended:
        if context_id != DEFAULT_CONTEXT and context is None:
            await ws.close(code=1008, message=b"context not found")
            return ws
        try:
            context = _start(front, sb, contexts, context_id, None)
        except (NotFound, NotRunning):
            await ws.close(code=1011, message=b"sandbox is not started")
            return ws
    timeout = run.get("timeout")
    code = await _run(ws, context, run, timeout if isinstance(timeout, int) and timeout > 0 else None)
    await ws.close(code=code)
    return ws


async def _run(ws: web.WebSocketResponse, context: Context, run: dict[str, Any], timeout: int | None) -> int:
    """Send the code to the context's python3 and relay its messages until it is done: the close code."""
    async with context.lock:
        process = context.ticket.process if context.ticket is not None else None
        if process is None or context.ended:
            await ws.send_str(json.dumps({"type": "error", "name": "ContextEnded", "value": "interpreter ended"}))
            return 1000
        envs = run.get("envs") if isinstance(run.get("envs"), dict) else None
        process.write_stdin((json.dumps({"code": run["code"], "envs": envs}) + "\n").encode())
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            wait = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                message = await asyncio.wait_for(context.messages.get(), wait)
            except TimeoutError:
                process.signal(signal.SIGINT)  # KeyboardInterrupt in the cell; the context lives on
                await _drain_until_done(context)
                return TIMEOUT_CLOSE
            if message is None or message.get("type") == "done":
                return 1000
            await ws.send_str(json.dumps(message))


async def _drain_until_done(context: Context) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(5):
            while (message := await context.messages.get()) is not None and message.get("type") != "done":
                pass


def add_routes(app: web.Application, prefix: str) -> Callable[[SimSandbox, Any], None]:
    """The interpreter routes under `prefix/{sandbox_id}`; returns the callback that forgets an ended sandbox's."""
    interpreters = Interpreters()
    app[INTERPRETERS] = interpreters
    base = f"{prefix}/{{sandbox_id}}/process/interpreter"
    r = app.router
    r.add_post(f"{base}/context", create_context)
    r.add_get(f"{base}/context", list_contexts)
    r.add_delete(f"{base}/context/{{context_id}}", delete_context)
    r.add_get(f"{base}/execute", execute)
    return interpreters.forget
