"""envd, the daemon inside an E2B sandbox, as e2b 2.56.0 reaches it through E2B's sandbox proxy: `GET /health` and
the Connect RPC service `process.Process` (JSON codec: the SDK's envd client speaks nothing else).

One host serves every sandbox, as E2B's shared proxy does: the SDK names the sandbox in `E2b-Sandbox-Id` and
sends the create answer's `envdAccessToken` as `X-Access-Token`.

The proxy's answers: no `E2b-Sandbox-Id`, 400; a sandbox that never existed or has ended, 502 `{"code": 502,
"message": "The sandbox <id> was not found"}` (the SDK raises `SandboxNotRunningException`); one still starting,
502 "... port 49983 is not open" (`SandboxUnreachableException`). envd's: a wrong access token on an RPC, 401
plain text (`AuthenticationException`); `GET /health`, 204.

`process.Process/Start` (server stream): `start{pid}`; `keepalive` every `Keepalive-Ping-Interval` real seconds
while the command runs; then its output as `data{stdout}` / `data{stderr}` chunks (base64, at most 32 KiB each,
stdout first: the simulator runs a command atomically); then `end{exitCode, exited, status "exit status N"}`,
with `error` set when N is not 0, as envd does. The command is the simulator's shell: `/bin/bash -l -c C` (what
the SDK sends) runs `bash -c C` (there are no login profiles to read); any other argv runs as one shell-quoted
line. Its deadline is the call's `connect-timeout-ms` (real seconds; the command gets that many over the time
scale in vendor seconds); past it, `deadline_exceeded`. A sandbox that ends under a command ends the stream
`unavailable` "the connection to sandbox <id> ended before the stream completed" (the SDK then asks /health,
finds the sandbox gone: `SandboxNotRunningException`); an injected exec failure is `internal`. `List` and
`SendSignal` (SIGKILL/SIGTERM: `end{exitCode -1, exited false, status "signal: killed"}`) are served; stdin,
PTYs and the other methods answer `unimplemented`.
"""

from __future__ import annotations

import asyncio
import base64
import math
import shlex
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from providers.sim.core.commands import RunningCommands
from providers.sim.core.serving.bearer import tokens_equal
from providers.sim.core.serving.connect import JSON_OBJECT, CallContext, Code, ConnectService, Procedure, RpcError
from providers.sim.core.simulator import (
    ExecError,
    ExecOutcome,
    ExecTimedOut,
    NotFound,
    NotRunning,
    SandboxDied,
    SandboxStatus,
    SimSandbox,
    VendorSimulator,
)
from providers.sim.e2b import envd_files
from providers.sim.e2b.app_state import SIM, simulator
from providers.sim.e2b.envd_watch import Watchers
from providers.sim.e2b.shapes import META_ENVD_TOKEN, error_body

SERVICE = "process.Process"
ENVD_PORT = 49983
SANDBOX_HEADER = "E2b-Sandbox-Id"
CHUNK_BYTES = 32 * 1024
DISCONNECT_CHECK_S = 1.0  # how soon the command of a client that hung up is forgotten
MIN_KEEPALIVE_S = 1.0
_SHELLS = frozenset({"bash", "sh", "dash"})
_LOGIN_FLAGS = frozenset({"-l", "--login"})
_SIGNALS = {"SIGNAL_SIGKILL": "killed", "SIGNAL_SIGTERM": "terminated", 9: "killed", 15: "terminated"}


@dataclass(eq=False)
class Process:
    """A command running in a sandbox; `signal` ends it early."""

    pid: int
    config: dict[str, Any]
    tag: str | None
    ended: asyncio.Future[ExecOutcome | BaseException | str]


class ProcessTable(RunningCommands[Process]):
    """Running processes per sandbox (`RunningCommands`), opened and found the way envd names them."""

    def open(self, sandbox_id: str, config: dict[str, Any], tag: str | None) -> Process:
        ended: asyncio.Future[ExecOutcome | BaseException | str] = asyncio.get_running_loop().create_future()
        return self.add(sandbox_id, Process(self.next_pid(), config, tag, ended))

    def close(self, sandbox_id: str, process: Process) -> None:
        self.remove(sandbox_id, process)

    def find(self, sandbox_id: str, selector: Any) -> Process | None:
        running = self.of(sandbox_id)
        if not isinstance(selector, dict):
            return None
        if "pid" in selector:
            return running.get(_int(selector["pid"]))
        if "tag" in selector:
            return next((p for p in running.values() if p.tag == selector["tag"]), None)
        return None


PROCESSES = web.AppKey("e2b_processes", ProcessTable)
WATCHERS = web.AppKey("e2b_watchers", Watchers)


# --- the proxy in front of envd ----------------------------------------------------------------


def _proxy_error(message: str, status: int = 502) -> web.Response:
    return web.json_response(error_body(status, message), status=status)


def routed_sandbox(request: web.Request) -> SimSandbox | web.Response:
    """The running sandbox a request names, or the proxy's answer when there is none."""
    sandbox_id = request.headers.get(SANDBOX_HEADER)
    if not sandbox_id:
        return _proxy_error(f"missing {SANDBOX_HEADER} header", 400)
    try:
        sb = simulator(request).get(sandbox_id)
    except NotFound:
        return _proxy_error(f"The sandbox {sandbox_id} was not found")
    if not sb.active:
        return _proxy_error(f"The sandbox {sandbox_id} was not found")
    if sb.status is not SandboxStatus.RUNNING:
        return _proxy_error(f"The sandbox {sandbox_id} is running but port {ENVD_PORT} is not open")
    return sb


async def health(request: web.Request) -> web.StreamResponse:
    found = routed_sandbox(request)
    return found if isinstance(found, web.Response) else web.Response(status=204)


# --- process.Process -----------------------------------------------------------------------------


def shell_command(config: dict[str, Any]) -> str:
    """The command line the simulator's shell runs for a `ProcessConfig`."""
    cmd = config.get("cmd")
    raw_args = config.get("args") or []
    if not isinstance(raw_args, list):  # once a 500 ("'int' object is not iterable"), or a string's characters
        raise RpcError(Code.INVALID_ARGUMENT, "process.args must be a list of strings")
    args = [str(arg) for arg in raw_args]
    if not isinstance(cmd, str) or not cmd:
        raise RpcError(Code.INVALID_ARGUMENT, "process.cmd must not be empty")
    shell = cmd.rsplit("/", 1)[-1]
    if shell in _SHELLS:
        while args[:1] and args[0] in _LOGIN_FLAGS:
            args = args[1:]
        if args[:1] == ["-c"] and len(args) >= 2:
            return args[1] if shell != "bash" and len(args) == 2 else shlex.join([shell, *args])
    return shlex.join([cmd, *args])


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: JSON's 1e400 is an infinite float (once a 500)
        raise RpcError(Code.INVALID_ARGUMENT, f"not an integer: {value!r}") from None


def _strings(value: Any, name: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise RpcError(Code.INVALID_ARGUMENT, f"{name} must be a map of strings")
    return dict(value)


def _event(**payload: Any) -> dict[str, Any]:
    return {"event": payload}


def _output(stream: str, data: bytes) -> list[dict[str, Any]]:
    return [
        _event(data={stream: base64.b64encode(data[i : i + CHUNK_BYTES]).decode("ascii")})
        for i in range(0, len(data), CHUNK_BYTES)
    ]


def _end_events(sandbox_id: str, result: ExecOutcome | BaseException | str) -> list[dict[str, Any]]:
    """What the end of a command looks like on the stream (or the error that ends the call)."""
    if isinstance(result, ExecOutcome):
        status = f"exit status {result.exit_code}"
        end: dict[str, Any] = {"exitCode": result.exit_code, "exited": True, "status": status}
        if result.exit_code != 0:
            end["error"] = status
        return _output("stdout", result.stdout.encode()) + _output("stderr", result.stderr.encode()) + [_event(end=end)]
    if isinstance(result, str):  # ended by a signal
        status = f"signal: {result}"
        return [_event(end={"exitCode": -1, "exited": False, "status": status, "error": status})]
    if isinstance(result, ExecTimedOut):
        raise RpcError(Code.DEADLINE_EXCEEDED, "context deadline exceeded")
    if isinstance(result, SandboxDied):
        raise RpcError(Code.UNAVAILABLE, f"the connection to sandbox {sandbox_id} ended before the stream completed")
    if isinstance(result, ExecError):
        raise RpcError(Code.INTERNAL, f"error running the process: {result.message}")
    raise RpcError(Code.INTERNAL, f"unexpected exec outcome {type(result).__name__}")


def build_service(processes: ProcessTable) -> ConnectService:
    """`process.Process` over the simulator, messages as protobuf's JSON mapping."""

    async def start(req: dict[str, Any], ctx: CallContext) -> AsyncIterator[dict[str, Any]]:
        if req.get("pty"):
            raise RpcError(Code.UNIMPLEMENTED, "PTYs are not modelled by the stampede simulator")
        if req.get("stdin") is True:
            raise RpcError(Code.UNIMPLEMENTED, "stdin is not modelled by the stampede simulator")
        config = req.get("process")
        if not isinstance(config, dict):
            raise RpcError(Code.INVALID_ARGUMENT, "process is required")
        command = shell_command(config)
        env = _strings(config.get("envs"), "process.envs")
        cwd = config.get("cwd") if isinstance(config.get("cwd"), str) else None
        request = ctx.request
        sim: VendorSimulator = request.app[SIM]
        sandbox_id = request.headers[SANDBOX_HEADER]
        timeout_s = ctx.timeout_s / sim.clock.time_scale if ctx.timeout_s is not None else math.inf
        process = processes.open(sandbox_id, config, req.get("tag") if isinstance(req.get("tag"), str) else None)

        def done(result: ExecOutcome | BaseException) -> None:
            if not process.ended.done():
                process.ended.set_result(result)

        try:
            try:
                ticket = sim.exec_start(sandbox_id, command, timeout_s=timeout_s, on_done=done, env=env, cwd=cwd)
            except (NotFound, NotRunning):  # ended between the proxy's look and now
                raise RpcError(Code.UNAVAILABLE, f"The sandbox {sandbox_id} was not found") from None
            try:
                yield _event(start={"pid": process.pid})
                keepalive_s = _keepalive_interval(request)
                quiet_since = time.monotonic()
                while True:
                    try:
                        result = await asyncio.wait_for(asyncio.shield(process.ended), DISCONNECT_CHECK_S)
                        break
                    except TimeoutError:
                        transport = request.transport
                        if transport is None or transport.is_closing():
                            return  # the client hung up: forget the command (below)
                        if keepalive_s is not None and time.monotonic() - quiet_since >= keepalive_s:
                            quiet_since = time.monotonic()
                            yield _event(keepalive={})
            finally:
                ticket.cancel()  # a no-op once resolved; forgets the command when the client went away
        finally:
            processes.close(sandbox_id, process)
        for event in _end_events(sandbox_id, result):
            yield event

    async def list_processes(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        running = processes.of(ctx.request.headers[SANDBOX_HEADER])
        infos = []
        for process in running.values():
            info: dict[str, Any] = {"config": process.config, "pid": process.pid}
            if process.tag is not None:
                info["tag"] = process.tag
            infos.append(info)
        return {"processes": infos}

    async def send_signal(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        wanted = req.get("signal")
        signal = _SIGNALS.get(wanted) if isinstance(wanted, (str, int)) else None
        if signal is None:
            raise RpcError(Code.INVALID_ARGUMENT, f"unsupported signal {req.get('signal')!r}")
        process = processes.find(ctx.request.headers[SANDBOX_HEADER], req.get("process"))
        if process is None:
            raise RpcError(Code.NOT_FOUND, "process not found")
        if not process.ended.done():
            process.ended.set_result(signal)
        return {}

    service = ConnectService(SERVICE)
    service.add(Procedure("Start", JSON_OBJECT, JSON_OBJECT, start, server_streaming=True))
    service.add(Procedure("List", JSON_OBJECT, JSON_OBJECT, list_processes))
    service.add(Procedure("SendSignal", JSON_OBJECT, JSON_OBJECT, send_signal))
    return service


def _keepalive_interval(request: web.Request) -> float | None:
    text = request.headers.get("Keepalive-Ping-Interval")
    try:
        seconds = float(text) if text else None
    except ValueError:
        return None
    return None if seconds is None or not math.isfinite(seconds) else max(MIN_KEEPALIVE_S, seconds)


def process_handler(service: ConnectService) -> Any:
    """`POST /process.Process/{method}`: through the proxy, past envd's access-token check, into the service."""

    async def handle(request: web.Request) -> web.StreamResponse:
        found = routed_sandbox(request)
        if isinstance(found, web.Response):
            return found
        presented = request.headers.get("X-Access-Token") or ""
        expected = str(found.meta.get(META_ENVD_TOKEN, ""))
        if not tokens_equal(presented, expected):
            return web.Response(status=401, text="unauthorized access, please provide a valid access token")
        return await service.handle(request, request.match_info["method"])

    return handle


def add_routes(app: web.Application) -> None:
    """envd's routes: /health, `process.Process`, `filesystem.Filesystem` and the HTTP `/files`."""
    processes = ProcessTable()
    app[PROCESSES] = processes
    watchers = Watchers(envd_files.entry_info)
    app[WATCHERS] = watchers
    app.router.add_get("/health", health)
    app.router.add_post(f"/{SERVICE}/{{method}}", process_handler(build_service(processes)))
    app.router.add_post(f"/{envd_files.SERVICE}/{{method}}", process_handler(envd_files.build_service(watchers)))
    app.router.add_get(envd_files.FILES_ROUTE, envd_files.files_handler("read", routed_sandbox))
    app.router.add_post(envd_files.FILES_ROUTE, envd_files.files_handler("write", routed_sandbox))

    async def on_startup(app: web.Application) -> None:
        def ended(sb: SimSandbox) -> None:
            if not sb.active:
                watchers.forget(sb.id)  # its tree is gone: so are the watches on it

        app[SIM].add_listener(ended)

    async def on_cleanup(app: web.Application) -> None:
        watchers.close_all()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
