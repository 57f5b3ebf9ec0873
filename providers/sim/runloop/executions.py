"""Commands on the local Runloop: `execute` (an optimistic wait), `execute_async`, `execute_sync`, an execution's
get, `wait_for_status` and `kill`, and its stdout and stderr as server-sent events."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from providers.sim.core.records import ExecError, ExecOutcome, ExecTimedOut, NotFound, NotRunning, SandboxDied
from providers.sim.runloop.shapes import DEVBOX_USER
from providers.sim.runloop.state import Execution, Front, error, front_of, read_json

EXEC_HOLD_MAX_S = 25.0  # an execution's wait_for_status and execute's optimistic wait
COMMAND_LIMIT_S = 86400.0  # Runloop has no per-command timeout: a command runs until it ends or the devbox does


def _start(front: Front, devbox_id: str, command: str) -> Execution:
    """Start `command` in the devbox (NotFound, NotRunning raise at once)."""
    execution = Execution(id=f"exe_{uuid.uuid4().hex[:20]}", devbox_id=devbox_id)

    def out(data: bytes) -> None:
        execution.stdout += data
        execution.wake()

    def err(data: bytes) -> None:
        execution.stderr += data
        execution.wake()

    def done(result: ExecOutcome | BaseException) -> None:
        execution.status = "completed"
        if isinstance(result, ExecOutcome):
            if not execution.stdout and result.stdout:
                execution.stdout += result.stdout.encode()
            if not execution.stderr and result.stderr:
                execution.stderr += result.stderr.encode()
            execution.exit_status = result.exit_code
        elif isinstance(result, ExecError):
            execution.failed = result.message
        elif isinstance(result, ExecTimedOut):
            execution.exit_status = 124
        elif isinstance(result, SandboxDied):
            execution.exit_status = 137 if result.error_type == "OOM_KILLED" else None
            execution.failed = None
        else:
            execution.failed = str(result)
        execution.ticket = None
        execution.wake()

    execution.ticket = front.sim.exec_start(
        devbox_id, command, timeout_s=COMMAND_LIMIT_S, on_done=done, cwd=DEVBOX_USER.home, on_stdout=out, on_stderr=err
    )
    front.executions[execution.id] = execution
    return execution


def _exec_refusal(request: web.Request, exc: Exception) -> web.Response:
    if isinstance(exc, NotFound):
        return error(request, 404, f"Devbox {request.match_info['id']} not found")
    assert isinstance(exc, NotRunning)
    return error(request, 400, f"Devbox {exc.sandbox_id} is not running (status: {exc.status})")


async def _until(execution: Execution, statuses: set[str], hold_s: float) -> bool:
    """Wait until the execution's status is one of `statuses`, at most `hold_s` real seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, hold_s)
    while execution.status not in statuses:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        try:
            await asyncio.wait_for(execution.changed.wait(), remaining)
        except TimeoutError:
            return execution.status in statuses
    return True


def _answer(request: web.Request, execution: Execution) -> web.Response:
    if execution.failed is not None:
        return error(request, 500, f"Execution failed: {execution.failed}")
    return web.json_response(execution.view())


async def _started(request: web.Request) -> tuple[Execution, dict[str, Any]] | web.Response:
    """The body's `command` started in the devbox, with the body; or the answer refusing it (what every
    `execute*` call does first)."""
    body = await read_json(request)
    command = body.get("command")
    if not isinstance(command, str) or not command:
        return error(request, 400, "command is required")
    try:
        return _start(front_of(request), request.match_info["id"], command), body
    except (NotFound, NotRunning) as exc:
        return _exec_refusal(request, exc)


async def execute(request: web.Request) -> web.Response:
    """`execute`: start, wait up to `optimistic_timeout` (25 s at most), answer completed or still running."""
    started = await _started(request)
    if isinstance(started, web.Response):
        return started
    execution, body = started
    hold = min(float(body.get("optimistic_timeout") or EXEC_HOLD_MAX_S), EXEC_HOLD_MAX_S)
    await _until(execution, {"completed"}, hold)
    return _answer(request, execution)


async def execute_async(request: web.Request) -> web.Response:
    started = await _started(request)
    if isinstance(started, web.Response):
        return started
    execution, _ = started
    return web.json_response(execution.view())


async def execute_sync(request: web.Request) -> web.Response:
    """The deprecated `execute_sync`: the whole command, however long, in one answer (`DevboxExecutionDetailView`)."""
    started = await _started(request)
    if isinstance(started, web.Response):
        return started
    execution, _ = started
    await _until(execution, {"completed"}, COMMAND_LIMIT_S)
    if execution.failed is not None:
        return error(request, 500, f"Execution failed: {execution.failed}")
    view = execution.view()
    return web.json_response(
        {
            "devbox_id": execution.devbox_id,
            "exit_status": view["exit_status"] if view["exit_status"] is not None else -1,
            "stdout": view["stdout"],
            "stderr": view["stderr"],
        }
    )


def _execution(request: web.Request) -> Execution | None:
    execution = front_of(request).executions.get(request.match_info["eid"])
    if execution is None or execution.devbox_id != request.match_info["id"]:
        return None
    return execution


async def get_execution(request: web.Request) -> web.Response:
    execution = _execution(request)
    if execution is None:
        return error(request, 404, f"Execution {request.match_info['eid']} not found")
    return _answer(request, execution)


async def wait_for_execution(request: web.Request) -> web.Response:
    execution = _execution(request)
    if execution is None:
        return error(request, 404, f"Execution {request.match_info['eid']} not found")
    body = await read_json(request)
    wanted = set(body.get("statuses") or ("completed",))
    hold = min(float(body.get("timeout_seconds") or EXEC_HOLD_MAX_S), EXEC_HOLD_MAX_S)
    if not await _until(execution, wanted, hold):
        return error(request, 408, "Timed out waiting for execution status")
    return _answer(request, execution)


async def kill_execution(request: web.Request) -> web.Response:
    execution = _execution(request)
    if execution is None:
        return error(request, 404, f"Execution {request.match_info['eid']} not found")
    ticket = execution.ticket
    if ticket is not None and execution.status != "completed":
        ticket.cancel()  # a real command's process is killed with it
        execution.status = "completed"
        execution.exit_status = 143
        execution.ticket = None
        execution.wake()
    return web.json_response(execution.view())


def stream_of(which: str) -> Callable[[web.Request], Any]:
    async def stream(request: web.Request) -> web.StreamResponse:
        """Server-sent events: `{"output", "offset"}` chunks from `offset`, until the command completes."""
        execution = _execution(request)
        if execution is None:
            return error(request, 404, f"Execution {request.match_info['eid']} not found")
        try:
            offset = int(request.query.get("offset") or 0)
        except ValueError:
            return error(request, 400, "offset must be an integer")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            await _follow(response, execution, which, offset)
        except ConnectionResetError:
            pass  # the client stopped reading (it had what it wanted): the command runs on
        return response

    return stream


async def _follow(response: web.StreamResponse, execution: Execution, which: str, offset: int) -> None:
    """Write the stream's chunks from `offset` as they come, until the command completes."""
    while True:
        buffer = execution.stdout if which == "stdout" else execution.stderr
        finished = execution.status == "completed"
        waiter = execution.changed
        if len(buffer) > offset:
            chunk = bytes(buffer[offset:])
            payload = {"output": chunk.decode(errors="replace"), "offset": offset}
            offset = len(buffer)
            await response.write(f"data: {json.dumps(payload)}\n\n".encode())
        if finished:
            break
        await waiter.wait()
    await response.write_eof()
