"""envd, the daemon inside an E2B sandbox, as e2b 2.56.0 reaches it through E2B's sandbox proxy: `GET /health` and
the Connect RPC services `process.Process` and `filesystem.Filesystem` (envd_files.py), and `/files` (JSON codec:
the SDK's envd client speaks nothing else).

One host serves every sandbox, as E2B's shared proxy does: the SDK names the sandbox in `E2b-Sandbox-Id` and
sends the create answer's `envdAccessToken` as `X-Access-Token`.

The proxy's answers: no `E2b-Sandbox-Id`, 400; a sandbox that never existed or has ended, 502 `{"code": 502,
"message": "The sandbox <id> was not found"}` (the SDK raises `SandboxNotRunningException`); one still starting,
502 "... port 49983 is not open" (`SandboxUnreachableException`). envd's: a wrong access token on an RPC, 401
plain text (`AuthenticationException`); `GET /health`, 204.

`process.Process/Start` (server stream): `start{pid}`; `keepalive` every `Keepalive-Ping-Interval` real seconds
while the command runs; its output as `data{stdout}` / `data{stderr}` (`data{pty}` with a PTY) chunks (base64, at
most 32 KiB each); then `end{exitCode, exited, status "exit status N"}`, with `error` set when N is not 0, as envd
does. With real commands (`serve --commands real`: a shell in the sandbox's own tree, as `user` in /home/user)
output streams as it comes, and `stdin: true` / `pty{size}` are served: `SendInput` (stdin or pty bytes),
`CloseStdin`, `Update` (pty resize), `Connect` (a second stream on a running command, from now on). Modelled
commands (the load path) run atomically, stdout then stderr at the end, and refuse stdin and PTYs
(`unimplemented`, naming `--commands real`). `/bin/bash -l -c C` (what the SDK sends) runs `bash -c C`; any other
argv runs as one shell-quoted line. The deadline is the call's `connect-timeout-ms` (real seconds; the command
gets that many over the time scale in vendor seconds); past it, `deadline_exceeded`. A sandbox that ends under a
command ends the stream `unavailable` "the connection to sandbox <id> ended before the stream completed" (the SDK
then asks /health, finds the sandbox gone: `SandboxNotRunningException`); an injected exec failure is `internal`.
`List` and `SendSignal` (SIGKILL/SIGTERM: `end{exitCode -1, exited false, status "signal: killed"}`) are served;
`StreamInput` (client streaming, which the SDK does not use) answers `unimplemented`. Files: envd_files.py.
"""

from __future__ import annotations

import asyncio
import base64
import math
import shlex
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from providers.sim.core.execution.commands import RunningCommands
from providers.sim.core.execution.isolated_shell import RealProcess
from providers.sim.core.serving.bearer import tokens_equal
from providers.sim.core.serving.connect import JSON_OBJECT, CallContext, Code, ConnectService, Procedure, RpcError
from providers.sim.core.simulator import (
    ExecError,
    ExecOutcome,
    ExecTicket,
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
_SIGNAL_NUMBERS = {"killed": 9, "terminated": 15}


@dataclass(eq=False)
class Process:
    """A command running in a sandbox: `signal` ends it early; every stream on it (its Start, each Connect)
    gets its output as it comes and its end."""

    pid: int
    config: dict[str, Any]
    tag: str | None
    ended: asyncio.Future[ExecOutcome | BaseException | str]
    pty: bool = False
    ticket: ExecTicket | None = None
    streams: list[asyncio.Queue[dict[str, Any]]] = field(default_factory=list)

    def emit(self, stream: str, data: bytes) -> None:
        for event in _output(stream, data):
            for queue in self.streams:
                queue.put_nowait(event)

    @property
    def real(self) -> RealProcess | None:
        return self.ticket.process if self.ticket is not None else None


class ProcessTable(RunningCommands[Process]):
    """Running processes per sandbox (`RunningCommands`), opened and found the way envd names them."""

    def open(self, sandbox_id: str, config: dict[str, Any], tag: str | None, pty: bool = False) -> Process:
        ended: asyncio.Future[ExecOutcome | BaseException | str] = asyncio.get_running_loop().create_future()
        return self.add(sandbox_id, Process(self.next_pid(), config, tag, ended, pty))

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
    if not sb.active or sb.status is SandboxStatus.PAUSED:  # a paused sandbox's envd is not there either
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


def _end_events(
    sandbox_id: str, result: ExecOutcome | BaseException | str, streamed: bool = False
) -> list[dict[str, Any]]:
    """What the end of a command looks like on the stream (or the error that ends the call); a real command's
    output was `streamed` as it came, a modelled one's comes here, all at once."""
    if isinstance(result, ExecOutcome):
        status = f"exit status {result.exit_code}"
        end: dict[str, Any] = {"exitCode": result.exit_code, "exited": True, "status": status}
        if result.exit_code != 0:
            end["error"] = status
        if streamed:
            return [_event(end=end)]
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


def _pty_size(value: Any) -> tuple[int, int] | None:
    """`PTY{size{cols, rows}}` as (cols, rows)."""
    if not isinstance(value, dict):
        return None
    size: dict[str, Any] = value["size"] if isinstance(value.get("size"), dict) else {}
    cols, rows = _int(size.get("cols", 80)), _int(size.get("rows", 24))
    if not (0 < cols <= 10000 and 0 < rows <= 10000):
        raise RpcError(Code.INVALID_ARGUMENT, f"invalid pty size {cols}x{rows}")
    return cols, rows


async def _follow(
    process: Process, queue: asyncio.Queue[dict[str, Any]], request: web.Request
) -> AsyncIterator[dict[str, Any] | None]:
    """A stream's events until the command ends: output as it comes, None when a keepalive is due; returns
    early when the client hung up."""
    keepalive_s = _keepalive_interval(request)
    quiet_since = time.monotonic()
    while not process.ended.done():
        if process.real is None:  # modelled (the load path): no output before the end, so no queue to watch
            try:
                await asyncio.wait_for(asyncio.shield(process.ended), DISCONNECT_CHECK_S)
                break
            except TimeoutError:
                pass
        else:
            getter: asyncio.Future[Any] = asyncio.ensure_future(queue.get())
            waited: set[asyncio.Future[Any]] = {getter, process.ended}
            done, _ = await asyncio.wait(waited, timeout=DISCONNECT_CHECK_S, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                yield getter.result()
                continue
            getter.cancel()
            if process.ended.done():
                break
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        if keepalive_s is not None and time.monotonic() - quiet_since >= keepalive_s:
            quiet_since = time.monotonic()
            yield None
    await asyncio.sleep(0)  # output callbacks queued with the end
    while not queue.empty():
        yield queue.get_nowait()


def build_service(processes: ProcessTable) -> ConnectService:
    """`process.Process` over the simulator, messages as protobuf's JSON mapping."""

    async def start(req: dict[str, Any], ctx: CallContext) -> AsyncIterator[dict[str, Any]]:
        config = req.get("process")
        if not isinstance(config, dict):
            raise RpcError(Code.INVALID_ARGUMENT, "process is required")
        command = shell_command(config)
        env = _strings(config.get("envs"), "process.envs")
        cwd = config.get("cwd") if isinstance(config.get("cwd"), str) and config.get("cwd") else None  # "": home
        pty = _pty_size(req.get("pty"))
        stdin = req.get("stdin") is True
        request = ctx.request
        sim: VendorSimulator = request.app[SIM]
        if (pty is not None or stdin) and sim.profile.sandbox.commands != "real":
            what = "PTYs" if pty is not None else "stdin"
            raise RpcError(Code.UNIMPLEMENTED, f"{what} need real commands: serve the local E2B with --commands real")
        sandbox_id = request.headers[SANDBOX_HEADER]
        timeout_s = ctx.timeout_s / sim.clock.time_scale if ctx.timeout_s is not None else math.inf
        tag = req.get("tag") if isinstance(req.get("tag"), str) else None
        process = processes.open(sandbox_id, config, tag, pty is not None)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        process.streams.append(queue)
        out = "pty" if pty is not None else "stdout"

        def done(result: ExecOutcome | BaseException) -> None:
            if not process.ended.done():
                process.ended.set_result(result)

        try:
            process.ticket = sim.exec_start(
                sandbox_id,
                command,
                timeout_s=timeout_s,
                on_done=done,
                env=env,
                cwd=cwd,
                on_stdout=lambda data: process.emit(out, data),
                on_stderr=lambda data: process.emit("stderr", data),
                stdin=stdin,
                pty=pty,
            )
        except (NotFound, NotRunning):  # ended between the proxy's look and now
            processes.close(sandbox_id, process)
            raise RpcError(Code.UNAVAILABLE, f"The sandbox {sandbox_id} was not found") from None
        try:
            yield _event(start={"pid": process.pid})
            async for event in _follow(process, queue, request):
                yield _event(keepalive={}) if event is None else event
        finally:
            process.streams.remove(queue)
            if not process.ended.done() and process.real is not None:
                # the client went away: a real command runs on, as envd's do (Connect follows it again), until it
                # ends or its deadline kills it
                process.ended.add_done_callback(lambda _: processes.close(sandbox_id, process))
            else:
                process.ticket.cancel()  # a no-op once resolved; forgets a modelled command whose client went away
                processes.close(sandbox_id, process)
        if not process.ended.done():
            return
        for event in _end_events(sandbox_id, process.ended.result(), streamed=process.real is not None):
            yield event

    async def connect(req: dict[str, Any], ctx: CallContext) -> AsyncIterator[dict[str, Any]]:
        """Follow a running command from now on: its start (pid), its output from here, its end."""
        sandbox_id = ctx.request.headers[SANDBOX_HEADER]
        process = processes.find(sandbox_id, req.get("process"))
        if process is None:
            raise RpcError(Code.NOT_FOUND, f"process with {_selector_text(req.get('process'))} not found")
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        process.streams.append(queue)
        try:
            yield _event(start={"pid": process.pid})
            async for event in _follow(process, queue, ctx.request):
                yield _event(keepalive={}) if event is None else event
            if not process.ended.done():
                return
        finally:
            process.streams.remove(queue)
        for event in _end_events(sandbox_id, process.ended.result(), streamed=process.real is not None):
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

    def found(ctx: CallContext, selector: Any) -> Process:
        process = processes.find(ctx.request.headers[SANDBOX_HEADER], selector)
        if process is None:
            raise RpcError(Code.NOT_FOUND, f"process with {_selector_text(selector)} not found")
        return process

    def real(process: Process) -> RealProcess:
        if process.real is None:
            raise RpcError(
                Code.FAILED_PRECONDITION,
                "a modelled command takes no input: serve the local E2B with --commands real",
            )
        return process.real

    async def send_signal(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        wanted = req.get("signal")
        signal = _SIGNALS.get(wanted) if isinstance(wanted, (str, int)) else None
        if signal is None:
            raise RpcError(Code.INVALID_ARGUMENT, f"unsupported signal {req.get('signal')!r}")
        process = found(ctx, req.get("process"))
        if process.real is not None:
            process.real.signal(_SIGNAL_NUMBERS[signal])
        if not process.ended.done():
            process.ended.set_result(signal)
        return {}

    async def send_input(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        process = found(ctx, req.get("process"))
        given: dict[str, Any] = req["input"] if isinstance(req.get("input"), dict) else {}
        text = given.get("pty", given.get("stdin", ""))
        try:
            data = base64.b64decode(text or "", validate=True)
        except (ValueError, TypeError):
            raise RpcError(Code.INVALID_ARGUMENT, "input must be base64") from None
        real(process).write_stdin(data)
        return {}

    async def close_stdin(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        real(found(ctx, req.get("process"))).close_stdin()
        return {}

    async def update(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        process = found(ctx, req.get("process"))
        size = _pty_size(req.get("pty"))
        if size is not None:
            if not process.pty:
                raise RpcError(Code.FAILED_PRECONDITION, "the process has no pty to resize")
            real(process).resize(*size)
        return {}

    async def stream_input(req: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        raise RpcError(
            Code.UNIMPLEMENTED,
            "StreamInput (client streaming) is not served by the stampede simulator; SendInput is (e2b's SDK uses it)",
        )

    service = ConnectService(SERVICE)
    service.add(Procedure("Start", JSON_OBJECT, JSON_OBJECT, start, server_streaming=True))
    service.add(Procedure("Connect", JSON_OBJECT, JSON_OBJECT, connect, server_streaming=True))
    service.add(Procedure("List", JSON_OBJECT, JSON_OBJECT, list_processes))
    service.add(Procedure("SendSignal", JSON_OBJECT, JSON_OBJECT, send_signal))
    service.add(Procedure("SendInput", JSON_OBJECT, JSON_OBJECT, send_input))
    service.add(Procedure("CloseStdin", JSON_OBJECT, JSON_OBJECT, close_stdin))
    service.add(Procedure("Update", JSON_OBJECT, JSON_OBJECT, update))
    service.add(Procedure("StreamInput", JSON_OBJECT, JSON_OBJECT, stream_input))
    return service


def _selector_text(selector: Any) -> str:
    if isinstance(selector, dict) and "pid" in selector:
        return f"pid {selector['pid']}"
    if isinstance(selector, dict) and "tag" in selector:
        return f"tag {selector['tag']}"
    return "no selector"


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
