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
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import BodyPartReader, web

from providers.sim.core.clock import LoopClock
from providers.sim.core.records import (
    CreateRequest,
    ExecError,
    ExecOutcome,
    ExecTimedOut,
    NotFound,
    NotRunning,
    Rejected,
    RejectReason,
    SandboxDied,
    SandboxStatus,
    SimSandbox,
)
from providers.sim.core.sandbox_state.sandbox_tree import SandboxPathError
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
from providers.sim.runloop.shapes import (
    DEFAULT_IMAGE,
    DEVBOX_USER,
    STATUSES,
    devbox_view,
    error_body,
    metadata_labels,
    snapshot_view,
)

DEFAULT_PROFILE = "runloop-like"
STATUS_HOLD_MAX_S = 30.0  # the server's longest hold of a devbox wait_for_status (the SDK's own constant)
EXEC_HOLD_MAX_S = 25.0  # an execution's wait_for_status and execute's optimistic wait
COMMAND_LIMIT_S = 86400.0  # Runloop has no per-command timeout: a command runs until it ends or the devbox does
MAX_PAGE = 5000
DEFAULT_PAGE = 20


def error(request: web.Request, status: int, message: str, *, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(error_body(status, message), status=status, headers=headers)


@dataclass(eq=False)
class Execution:
    """One command: `queued`/`running` until the simulator reports it, then `completed` with its outcome."""

    id: str
    devbox_id: str
    status: str = "running"
    exit_status: int | None = None
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    failed: str | None = None  # the exec path failed (ExecError): answered as a 500
    ticket: Any = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def view(self) -> dict[str, Any]:
        done = self.status == "completed"
        return {
            "devbox_id": self.devbox_id,
            "execution_id": self.id,
            "status": self.status,
            "exit_status": self.exit_status if done else None,
            "stdout": self.stdout.decode(errors="replace") if done else None,
            "stderr": self.stderr.decode(errors="replace") if done else None,
            "stdout_truncated": False if done else None,
            "stderr_truncated": False if done else None,
        }

    def wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


@dataclass
class Front:
    """One simulated Runloop account: its simulator, token, and what the API adds to the simulator's records."""

    sim: VendorSimulator
    token: str
    executions: dict[str, Execution] = field(default_factory=dict)
    changed: dict[str, asyncio.Event] = field(default_factory=dict)  # devbox id -> set at its next change
    suspending: set[str] = field(default_factory=set)
    resuming: set[str] = field(default_factory=set)
    snapshot_meta: dict[str, tuple[dict[str, str], str | None]] = field(default_factory=dict)

    def view(self, sb: SimSandbox) -> dict[str, Any]:
        if sb.status is SandboxStatus.RUNNING:
            self.resuming.discard(sb.id)
        return devbox_view(
            sb, self.sim.clock.wall, suspending=sb.id in self.suspending, resuming=sb.id in self.resuming
        )

    def notify(self, sb: SimSandbox) -> None:
        event = self.changed.pop(sb.id, None)
        if event is not None:
            event.set()
        if not sb.active:
            for execution in [e for e in self.executions.values() if e.devbox_id == sb.id]:
                if execution.status != "completed":
                    continue
                self.executions.pop(execution.id, None)  # an ended devbox's finished commands are forgotten

    def next_change(self, devbox_id: str) -> asyncio.Event:
        event = self.changed.get(devbox_id)
        if event is None:
            event = self.changed[devbox_id] = asyncio.Event()
        return event

    def find(self, request: web.Request) -> SimSandbox:
        return self.sim.get(request.match_info["id"])


FRONT = web.AppKey("stampede_runloop_front", Front)


def _front(request: web.Request) -> Front:
    return request.app[FRONT]


def _authorize(request: web.Request) -> web.Response | None:
    if request.path.startswith("/v1/") or request.path.startswith("/api/"):
        if not bearer_matches(request.headers.get("Authorization"), request.app[FRONT].token):
            return error(request, 401, "Unauthorized: invalid or missing API key")
    return None


_middleware = vendor_middleware(error, _authorize, front="local runloop", bug="Internal server error (simulator bug)")


async def _json(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(text="body must be JSON") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="body must be a JSON object")
    return body


def _rejection(request: web.Request, front: Front, exc: Rejected) -> web.Response:
    if exc.reason is RejectReason.RATE_LIMITED:
        clock = front.sim.clock
        now = clock.now()  # the real seconds until a token, through the clock as it plays now (a burst's 1:1 wave too)
        wait = max(0.001, clock.wall(now + (exc.retry_after or 0.0)) - clock.wall(now))
        headers = {"Retry-After": str(max(1, math.ceil(wait))), "retry-after-ms": str(math.ceil(wait * 1000))}
        return error(request, 429, "Too many requests: devbox create rate limit exceeded", headers=headers)
    if exc.reason is RejectReason.QUOTA_EXHAUSTED:
        limit = front.sim.profile.quota.max_active
        return error(request, 429, f"Concurrent devbox limit reached: at most {limit:g} running devboxes per account")
    if exc.reason is RejectReason.CAPACITY:
        return error(request, 503, "No capacity available to schedule devbox")
    if exc.reason is RejectReason.INVALID:
        return error(request, 400, exc.message)
    return error(request, 500, "Internal server error")


def _sizes(launch: dict[str, Any]) -> tuple[float, int]:
    sizes = {
        "X_SMALL": (0.5, 1),
        "SMALL": (1, 2),
        "MEDIUM": (2, 4),
        "LARGE": (2, 8),
        "X_LARGE": (4, 16),
        "XX_LARGE": (8, 32),
    }
    cpu, gib = sizes.get(str(launch.get("resource_size_request") or "SMALL"), (1, 2))
    cpu = float(launch.get("custom_cpu_cores") or cpu)
    gib = int(launch.get("custom_gb_memory") or gib)
    return cpu, gib * 1024


async def create_devbox(request: web.Request) -> web.Response:
    front = _front(request)
    body = await _json(request)
    metadata = body.get("metadata") or {}
    launch = body.get("launch_parameters") or {}
    env = body.get("environment_variables") or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        return error(request, 400, "metadata must be an object of strings")
    if not isinstance(launch, dict) or not isinstance(env, dict):
        return error(request, 400, "launch_parameters and environment_variables must be objects")
    sources = [k for k in ("blueprint_id", "blueprint_name", "snapshot_id") if body.get(k)]
    if len(sources) > 1:
        return error(request, 400, "Only one of (Snapshot ID, Blueprint ID, Blueprint name) should be specified")
    keep_alive = launch.get("keep_alive_time_seconds")
    lifetime = float(keep_alive) if keep_alive else 3600.0
    cpu, memory_mb = _sizes(launch)
    snapshot_id = body.get("snapshot_id")
    req = CreateRequest(
        image=str(body.get("blueprint_id") or body.get("blueprint_name") or DEFAULT_IMAGE),
        labels=metadata_labels(metadata),
        cpu=cpu,
        memory_mb=memory_mb,
        lifetime_s=lifetime,
        name=str(body.get("name") or ""),
        idempotency_key=request.headers.get("x-request-id"),
        env={str(k): str(v) for k, v in env.items()},
        meta={
            "metadata": metadata,
            "launch_parameters": launch,
            "blueprint_id": body.get("blueprint_id"),
            "snapshot_id": snapshot_id,
        },
        user=DEVBOX_USER,
        from_snapshot=str(snapshot_id) if snapshot_id else None,
    )
    try:
        sb = front.sim.create(req)
    except Rejected as exc:
        return _rejection(request, front, exc)
    except NotFound:
        return error(request, 404, f"Snapshot {snapshot_id} not found")
    return web.json_response(front.view(sb))


async def get_devbox(request: web.Request) -> web.Response:
    front = _front(request)
    try:
        sb = front.find(request)
    except NotFound:
        return error(request, 404, f"Devbox {request.match_info['id']} not found")
    return web.json_response(front.view(sb))


async def list_devboxes(request: web.Request) -> web.Response:
    front = _front(request)
    query = request.query
    try:
        limit = int(query.get("limit", DEFAULT_PAGE))
    except ValueError:
        return error(request, 400, "limit must be an integer")
    if not 0 < limit <= MAX_PAGE:
        return error(request, 400, f"limit must be between 1 and {MAX_PAGE}")
    status = query.get("status")
    if status is not None and status not in STATUSES:
        return error(request, 400, f"unknown status {status!r}")
    views = [front.view(sb) for sb in reversed(front.sim.list())]  # newest first
    if status is not None:
        views = [v for v in views if v["status"] == status]
    after = query.get("starting_after")
    if after:
        ids = [v["id"] for v in views]
        views = views[ids.index(after) + 1 :] if after in ids else []
    page = views[:limit]
    return web.json_response({"devboxes": page, "has_more": len(views) > limit, "total_count": len(views)})


async def wait_for_devbox(request: web.Request) -> web.Response:
    """The long poll behind `await_running` / `await_suspended`: answer once the status is one asked for."""
    front = _front(request)
    body = await _json(request)
    wanted = set(body.get("statuses") or ())
    hold = min(float(body.get("timeout_seconds") or STATUS_HOLD_MAX_S), STATUS_HOLD_MAX_S)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, hold)
    while True:
        try:
            sb = front.find(request)
        except NotFound:
            return error(request, 404, f"Devbox {request.match_info['id']} not found")
        view = front.view(sb)
        if view["status"] in wanted:
            return web.json_response(view)
        remaining = deadline - loop.time()
        if remaining <= 0:
            return error(request, 408, "Timed out waiting for devbox status")
        try:
            await asyncio.wait_for(front.next_change(sb.id).wait(), remaining)
        except TimeoutError:
            pass


async def shutdown_devbox(request: web.Request) -> web.Response:
    front = _front(request)
    try:
        sb = front.sim.terminate(request.match_info["id"])
    except NotFound:
        return error(request, 404, f"Devbox {request.match_info['id']} not found")
    front.suspending.discard(sb.id)
    return web.json_response(front.view(sb))


async def suspend_devbox(request: web.Request) -> web.Response:
    front = _front(request)
    devbox_id = request.match_info["id"]
    try:
        seconds = front.sim.pause(devbox_id)
    except NotFound:
        return error(request, 404, f"Devbox {devbox_id} not found")
    except NotRunning as exc:
        return error(request, 400, f"Devbox {devbox_id} is not running ({exc.status})")
    front.suspending.add(devbox_id)
    sb = front.sim.get(devbox_id)

    def saved() -> None:
        front.suspending.discard(devbox_id)
        front.notify(sb)

    asyncio.get_running_loop().call_later(seconds * front.sim.clock.time_scale, saved)
    return web.json_response(front.view(sb))


async def resume_devbox(request: web.Request) -> web.Response:
    front = _front(request)
    devbox_id = request.match_info["id"]
    if devbox_id in front.suspending:
        return error(request, 400, f"Devbox {devbox_id} is still suspending")
    try:
        sb = front.sim.resume(devbox_id)
    except NotFound:
        return error(request, 404, f"Devbox {devbox_id} not found")
    except NotRunning as exc:
        return error(request, 400, f"Devbox {devbox_id} is not suspended ({exc.status})")
    except Rejected as exc:
        return _rejection(request, front, exc)
    front.resuming.add(devbox_id)
    return web.json_response(front.view(sb))


# --- commands -------------------------------------------------------------------------------------------------


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


async def execute(request: web.Request) -> web.Response:
    """`execute`: start, wait up to `optimistic_timeout` (25 s at most), answer completed or still running."""
    front = _front(request)
    body = await _json(request)
    command = body.get("command")
    if not isinstance(command, str) or not command:
        return error(request, 400, "command is required")
    try:
        execution = _start(front, request.match_info["id"], command)
    except (NotFound, NotRunning) as exc:
        return _exec_refusal(request, exc)
    hold = min(float(body.get("optimistic_timeout") or EXEC_HOLD_MAX_S), EXEC_HOLD_MAX_S)
    await _until(execution, {"completed"}, hold)
    return _answer(request, execution)


async def execute_async(request: web.Request) -> web.Response:
    front = _front(request)
    body = await _json(request)
    command = body.get("command")
    if not isinstance(command, str) or not command:
        return error(request, 400, "command is required")
    try:
        execution = _start(front, request.match_info["id"], command)
    except (NotFound, NotRunning) as exc:
        return _exec_refusal(request, exc)
    return web.json_response(execution.view())


async def execute_sync(request: web.Request) -> web.Response:
    """The deprecated `execute_sync`: the whole command, however long, in one answer (`DevboxExecutionDetailView`)."""
    front = _front(request)
    body = await _json(request)
    command = body.get("command")
    if not isinstance(command, str) or not command:
        return error(request, 400, "command is required")
    try:
        execution = _start(front, request.match_info["id"], command)
    except (NotFound, NotRunning) as exc:
        return _exec_refusal(request, exc)
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
    execution = _front(request).executions.get(request.match_info["eid"])
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
    body = await _json(request)
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


def _stream_of(which: str) -> Callable[[web.Request], Any]:
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


# --- files and snapshots ---------------------------------------------------------------------------------------


def _tree_path(front: Front, request: web.Request, path: str, *, write: bool) -> Any:
    tree = front.sim.tree(request.match_info["id"])
    return tree.writable(path) if write else tree.host_path(path)


async def _files_call(request: web.Request, act: Callable[[Front], Any]) -> web.Response:
    front = _front(request)
    try:
        return await act(front)
    except NotFound:
        return error(request, 404, f"Devbox {request.match_info['id']} not found")
    except NotRunning as exc:
        return error(request, 400, f"Devbox {exc.sandbox_id} is not running (status: {exc.status})")
    except SandboxPathError as exc:
        return error(request, 400, str(exc))
    except FileNotFoundError:
        return error(request, 404, "File not found")
    except IsADirectoryError:
        return error(request, 400, "Path is a directory")


async def upload_file(request: web.Request) -> web.Response:
    fields: dict[str, Any] = {}
    reader = await request.multipart()
    async for part in reader:
        if not isinstance(part, BodyPartReader):
            continue
        if part.name == "file":
            fields["file"] = await part.read()
        elif part.name == "path":
            fields["path"] = await part.text()
    if "path" not in fields or "file" not in fields:
        return error(request, 400, "path and file are required")

    async def act(front: Front) -> web.Response:
        target = _tree_path(front, request, fields["path"], write=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(bytes(fields["file"]))
        return web.json_response({})

    return await _files_call(request, act)


async def write_file_contents(request: web.Request) -> web.Response:
    body = await _json(request)
    path, contents = body.get("file_path"), body.get("contents")
    if not isinstance(path, str) or not isinstance(contents, str):
        return error(request, 400, "file_path and contents are required")

    async def act(front: Front) -> web.Response:
        target = _tree_path(front, request, path, write=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(contents)
        return web.json_response({"devbox_id": request.match_info["id"], "exit_status": 0, "stdout": "", "stderr": ""})

    return await _files_call(request, act)


async def download_file(request: web.Request) -> web.Response:
    body = await _json(request)
    path = body.get("path")
    if not isinstance(path, str):
        return error(request, 400, "path is required")

    async def act(front: Front) -> web.Response:
        data = _tree_path(front, request, path, write=False).read_bytes()
        return web.Response(body=data, content_type="application/octet-stream")

    return await _files_call(request, act)


async def read_file_contents(request: web.Request) -> web.Response:
    body = await _json(request)
    path = body.get("file_path")
    if not isinstance(path, str):
        return error(request, 400, "file_path is required")

    async def act(front: Front) -> web.Response:
        text = _tree_path(front, request, path, write=False).read_text(errors="replace")
        return web.Response(text=text, content_type="text/plain")

    return await _files_call(request, act)


async def snapshot_disk(request: web.Request) -> web.Response:
    front = _front(request)
    body = await _json(request)
    metadata = body.get("metadata") or {}
    try:
        snap = front.sim.snapshot(request.match_info["id"], body.get("name"))
    except NotFound:
        return error(request, 404, f"Devbox {request.match_info['id']} not found")
    except NotRunning as exc:
        return error(request, 400, f"Devbox {exc.sandbox_id} is not running (status: {exc.status})")
    await asyncio.sleep(snap.duration_s * front.sim.clock.time_scale)
    front.snapshot_meta[snap.id] = (dict(metadata), body.get("commit_message"))
    return web.json_response(snapshot_view(snap, front.sim.clock.wall, metadata, body.get("commit_message")))


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
    app.router.add_get(execution + "/stream_stdout_updates", _stream_of("stdout"))
    app.router.add_get(execution + "/stream_stderr_updates", _stream_of("stderr"))
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
