"""Prime's gateway exec the way prime-sandboxes 0.5.x speaks it: ConnectRPC `command_session.CommandSession`.

Base URL `{gateway_url}/{user_ns}/{job_id}` (from `POST /api/v1/sandbox/{id}/auth` or the create response's
`gatewayAuth`), bearer gateway token, messages from the SDK's own `_proto/command_session` (protobuf).
`execute_command` calls only `Start` (server streaming); this front serves:

- `Start`: the command as a session. Events: `start{pid}` as soon as the sandbox accepted the command,
  `keepalive` every `KEEPALIVE_S` while it runs, then its output as `data{stdout}` / `data{stderr}`
  chunks of at most `CHUNK_BYTES`, then `end{exit_code, exited, status}`. The command comes from the
  simulator's exec (the tiny shell): `cmd="/bin/bash", args=["-c", C]` (what the SDK sends) runs C;
  (under the shell's bash semantics, e.g. for `echo`); any other argv runs as a shell-quoted command line.
- `List`: the sessions running in this sandbox (pid, session_uuid, command).
- `SendSignal`: SIGTERM/SIGKILL to a running session by pid or session_uuid: it ends with exit code
  128 + signal and status `signaled`.
- `SendInput`, `Connect`, `Update`, `StreamInput`: `unimplemented` (the simulator's commands take no
  stdin and are not re-attachable), as are `pty` sessions. `stdin: true` (what `open_process` sends) is accepted:
  the command runs with no input.

Errors (Connect codes, what the SDK makes of them): bad or expired gateway token -> `unauthenticated`
(re-auth once, then `APIError`); unknown sandbox, or one that ended or died during the command ->
`not_found` "Sandbox not found: ..." (`SandboxNotRunningError`, or `SandboxOOMError` etc. after its
error-context lookup); still starting -> `unavailable` "Sandbox is not running yet" (retried by
`wait_for_creation`'s reachability probe); the command outlived its timeout -> `deadline_exceeded`
(`CommandTimeoutError`); injected gateway failure -> `unavailable` "Gateway error: ..." (`APIError`).

Time: `connect-timeout-ms` is the client's real-time deadline; the command gets that many real seconds,
i.e. `timeout / time_scale` vendor seconds, so the stub's answer and the client's own deadline agree.
A modelled command's output is delivered when it finishes (the simulator runs those atomically), stdout before
stderr; a real command's (`sandbox.commands=real`) is sent as the command writes it, the rest at its end. A command whose client hung up is forgotten within `DISCONNECT_CHECK_S`.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import shlex
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from providers.sim.core.execution.commands import RunningCommands
from providers.sim.core.serving.connect import CallContext, Code, ConnectService, Procedure, RpcError
from providers.sim.core.simulator import (
    ExecError,
    ExecOutcome,
    ExecTimedOut,
    NotFound,
    NotRunning,
    SandboxDied,
    SandboxStatus,
    VendorSimulator,
)
from providers.sim.prime.gateway import GatewayTokens
from providers.sim.prime.wire_faults import GATEWAY_DEATH, reset

SERVICE = "command_session.CommandSession"
CHUNK_BYTES = 32 * 1024
KEEPALIVE_S = 15.0  # real seconds between keepalive events of a long command
DISCONNECT_CHECK_S = 1.0  # how soon the command of a client that hung up is forgotten
DEFAULT_TIMEOUT_S = 300.0  # vendor seconds, when a client sends no deadline (the SDK always does)
_SHELLS = frozenset({"bash", "sh", "dash"})
_SIGNALS = {15: "SIGTERM", 9: "SIGKILL"}


PB2_MODULE = "prime_sandboxes._proto.command_session.command_session_pb2"


def load_messages() -> Any:
    """The SDK's generated `command_session_pb2` (None when prime-sandboxes is not installed).

    Loaded from its file, without the SDK package around it, unless that is imported already: the package
    imports every pydantic model and HTTP client of the SDK (~0.3 s of the stub's startup, which is on the way
    to a run's first rollout); the message module needs only protobuf. It is registered under its own name, so
    a later import of the SDK in the same process finds it instead of registering the descriptors twice.
    """
    if "prime_sandboxes" in sys.modules or PB2_MODULE in sys.modules:
        try:
            return importlib.import_module(PB2_MODULE)
        except ImportError:
            return None
    package = importlib.util.find_spec("prime_sandboxes")
    if package is None or not package.submodule_search_locations:
        return None
    path = Path(next(iter(package.submodule_search_locations))) / "_proto" / "command_session"
    path = path / "command_session_pb2.py"
    spec = importlib.util.spec_from_file_location(PB2_MODULE, path)
    if spec is None or spec.loader is None or not path.is_file():
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[PB2_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[PB2_MODULE]
        raise
    return module


@dataclass(eq=False)
class Session:
    """A command running in a sandbox; `signal` ends it early."""

    pid: int
    session_uuid: str
    command: Any  # pb.CommandSpec
    ended: asyncio.Future[ExecOutcome | BaseException | int]


class SessionTable(RunningCommands[Session]):
    """Running sessions per sandbox (`RunningCommands`, by job id), opened and found the way Prime names them."""

    def open(self, job_id: str, session_uuid: str, command: Any, ended: asyncio.Future[Any]) -> Session:
        return self.add(job_id, Session(self.next_pid(), session_uuid, command, ended))

    def close(self, job_id: str, session: Session) -> None:
        self.remove(job_id, session)

    def find(self, job_id: str, selector: Any) -> Session | None:
        sessions = self.of(job_id)
        which = selector.WhichOneof("selector")
        if which == "pid":
            return sessions.get(int(selector.pid))
        if which == "session_uuid":
            return next((s for s in sessions.values() if s.session_uuid == selector.session_uuid), None)
        return None


def shell_command(spec: Any) -> str:
    """The command line the simulator's shell runs for a `CommandSpec`."""
    args = [str(arg) for arg in spec.args]
    if not spec.cmd:
        raise RpcError(Code.INVALID_ARGUMENT, "command.cmd must not be empty")
    shell = spec.cmd.rsplit("/", 1)[-1]
    if shell in _SHELLS and args[:1] == ["-c"] and len(args) >= 2:
        return args[1] if shell != "bash" and len(args) == 2 else shlex.join([shell, *args])
    return shlex.join([spec.cmd, *args])


def build_service(
    get_sim: Callable[[web.Request], VendorSimulator], get_tokens: Callable[[web.Request], GatewayTokens]
) -> ConnectService | None:
    """The CommandSession service over the simulator (None without the SDK's protobuf messages)."""
    pb = load_messages()
    if pb is None:
        return None
    sessions = SessionTable()

    def authorize(request: web.Request) -> None:
        match = request.match_info
        if not get_tokens(request).check(match["user_ns"], match["job_id"], request.headers.get("Authorization")):
            raise RpcError(Code.UNAUTHENTICATED, "Invalid or expired gateway token")

    async def start(req: Any, ctx: CallContext) -> AsyncIterator[Any]:
        if req.HasField("pty"):
            raise RpcError(Code.UNIMPLEMENTED, "pty sessions are not modelled by the simulator")
        job_id = ctx.request.match_info["job_id"]
        sim = get_sim(ctx.request)
        command = shell_command(req.command)
        scale = sim.clock.time_scale
        timeout_s = ctx.timeout_s / scale if ctx.timeout_s is not None else DEFAULT_TIMEOUT_S
        if not timeout_s > 0:
            raise RpcError(Code.DEADLINE_EXCEEDED, "the call's deadline expired")
        ended: asyncio.Future[ExecOutcome | BaseException | int] = asyncio.get_running_loop().create_future()

        def done(result: ExecOutcome | BaseException) -> None:
            if not ended.done():
                ended.set_result(result)

        grew = asyncio.Event()  # a real command wrote output: sent as it comes (`open_process` reads it live)
        pending: list[tuple[str, bytes]] = []
        sent = {"stdout": 0, "stderr": 0}

        def output(which: str) -> Callable[[bytes], None]:
            def took(data: bytes) -> None:
                pending.append((which, data))
                grew.set()

            return took

        try:
            ticket = sim.exec_start(
                job_id,
                command,
                timeout_s=timeout_s,
                on_done=done,
                env=dict(req.command.envs),
                cwd=req.command.cwd if req.command.HasField("cwd") else None,
                on_stdout=output("stdout"),
                on_stderr=output("stderr"),
            )
        except NotFound:
            raise RpcError(Code.NOT_FOUND, "Sandbox not found: unknown sandbox") from None
        except NotRunning as exc:
            if exc.status in (SandboxStatus.PENDING, SandboxStatus.PROVISIONING):
                raise RpcError(Code.UNAVAILABLE, "Sandbox is not running yet") from None
            raise RpcError(Code.NOT_FOUND, f"Sandbox not found: {exc.message or exc.status}") from None
        session_uuid = req.session_uuid if req.HasField("session_uuid") else str(uuid.uuid4())
        session = sessions.open(job_id, session_uuid, req.command, ended)
        try:
            yield pb.StartResponse(
                event=pb.CommandSessionEvent(start=pb.CommandSessionEvent.StartEvent(pid=session.pid))
            )
            if ctx.request.get(GATEWAY_DEATH):
                reset(ctx.request)  # an injected gateway death: the command started, its stream is cut
                return
            quiet_since = time.monotonic()
            while True:
                while pending:
                    which, data = pending.pop(0)
                    sent[which] += len(data)
                    for chunk in _chunks(data):
                        yield pb.StartResponse(event=pb.CommandSessionEvent(data=_data_event(pb, which, chunk)))
                if ended.done():
                    result = ended.result()
                    break
                grew.clear()
                waiter = asyncio.ensure_future(grew.wait())
                try:
                    await asyncio.wait(
                        (ended, waiter),
                        timeout=min(KEEPALIVE_S, DISCONNECT_CHECK_S),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    waiter.cancel()
                if not ended.done() and not pending:
                    transport = ctx.request.transport
                    if transport is None or transport.is_closing():
                        return  # the client hung up: forget the command (below), as for a cancelled call
                    if time.monotonic() - quiet_since >= KEEPALIVE_S:
                        quiet_since = time.monotonic()
                        keepalive = pb.CommandSessionEvent(keepalive=pb.CommandSessionEvent.KeepAlive())
                        yield pb.StartResponse(event=keepalive)
        finally:
            ticket.cancel()  # a no-op once resolved; forgets the command when the client went away
            sessions.close(job_id, session)
        for event in _outcome_events(pb, result, timeout_s, sent["stdout"], sent["stderr"]):
            yield pb.StartResponse(event=event)

    async def list_sessions(req: Any, ctx: CallContext) -> Any:
        running = sessions.of(ctx.request.match_info["job_id"])
        return pb.ListResponse(
            sessions=[
                pb.CommandSessionInfo(command=s.command, pid=s.pid, session_uuid=s.session_uuid)
                for s in running.values()
            ]
        )

    async def send_signal(req: Any, ctx: CallContext) -> Any:
        if req.signal not in _SIGNALS:
            raise RpcError(Code.INVALID_ARGUMENT, f"unsupported signal {req.signal}")
        session = sessions.find(ctx.request.match_info["job_id"], req.session)
        if session is None:
            raise RpcError(Code.NOT_FOUND, "no such command session")
        if not session.ended.done():
            session.ended.set_result(int(req.signal))
        return pb.SendSignalResponse()

    service = ConnectService(SERVICE, authorize=authorize)
    service.add(Procedure("Start", pb.StartRequest, pb.StartResponse, start, server_streaming=True))
    service.add(Procedure("List", pb.ListRequest, pb.ListResponse, list_sessions))
    service.add(Procedure("SendSignal", pb.SendSignalRequest, pb.SendSignalResponse, send_signal))
    return service


def _data_event(pb: Any, which: str, chunk: bytes) -> Any:
    data_event = pb.CommandSessionEvent.DataEvent
    return data_event(stdout=chunk) if which == "stdout" else data_event(stderr=chunk)


def _outcome_events(
    pb: Any, result: ExecOutcome | BaseException | int, timeout_s: float, sent_out: int = 0, sent_err: int = 0
) -> list[Any]:
    """What the end of a command looks like on the stream (or the error that ends the call); output already sent
    as it came (`sent_out`/`sent_err` bytes of each stream) is not sent again."""
    event = pb.CommandSessionEvent
    if isinstance(result, ExecOutcome):
        stdout, stderr = result.stdout.encode("utf-8")[sent_out:], result.stderr.encode("utf-8")[sent_err:]
        events = [event(data=event.DataEvent(stdout=chunk)) for chunk in _chunks(stdout)] + [
            event(data=event.DataEvent(stderr=chunk)) for chunk in _chunks(stderr)
        ]
        events.append(event(end=event.EndEvent(exit_code=result.exit_code, exited=True, status="exited")))
        return events
    if isinstance(result, int):  # a signal
        return [
            event(end=event.EndEvent(exit_code=128 + result, exited=False, status="signaled", error=_SIGNALS[result]))
        ]
    if isinstance(result, ExecTimedOut):
        raise RpcError(Code.DEADLINE_EXCEEDED, f"Command timed out after {timeout_s:g} seconds")
    if isinstance(result, SandboxDied):
        raise RpcError(Code.NOT_FOUND, f"Sandbox not found: {result.message}")
    if isinstance(result, ExecError):
        raise RpcError(Code.UNAVAILABLE, f"Gateway error: {result.message}")
    raise RpcError(Code.INTERNAL, f"unexpected exec outcome {type(result).__name__}")


def _chunks(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)]


def connect_handler(service: ConnectService | None) -> Callable[[web.Request], Any]:
    """The aiohttp handler of `POST /gateway/{user_ns}/{job_id}/command_session.CommandSession/{method}`."""

    async def handle(request: web.Request) -> web.StreamResponse:
        if service is None:
            return web.json_response(
                {"code": "unimplemented", "message": "install prime-sandboxes==0.5.1 for the ConnectRPC gateway"},
                status=501,
            )
        return await service.handle(request, request.match_info["method"])

    return handle
