"""The local task command router: `modal.task_command_router.TaskCommandRouter` over the simulator.

Since SDK 1.2.3 `Sandbox.exec` talks to a router on the worker, not to the control plane: it connects
with the URL and per-task JWT the control plane handed out, then `TaskExecStart`, reads stdout and stderr
with `TaskExecStdioRead` (server streams, resumable at a byte offset), and `TaskExecWait` (or
`TaskExecPoll`). `Sandbox.wait_until_ready` is `SandboxWaitUntilReady` here too. Those five RPCs are
implemented; the rest answer UNIMPLEMENTED. The SDK only allows a plain-http router when its control
plane is on localhost, which is how this runs.

Commands run in the simulator's shell (`shell.py`): `argv` is joined into one shell word list, so
`["sh", "-c", "echo hi; exit 3"]` behaves as on a real worker, with exit codes and both streams.
Behaviour:
- `TaskExecStart` on a sandbox still starting waits until it runs (a V2 sandbox gets its task id before
  its container is up); on an ended one it answers NOT_FOUND with the reason;
- `timeout_secs` (vendor seconds) kills the command: `TaskExecWait` then reports signal 9;
- the sandbox dying under a command (OOM, crash, lifetime, terminate) fails the reads and the wait with
  NOT_FOUND naming why; an injected transient exec failure answers ABORTED.
- `SandboxWaitUntilReady` returns when the sandbox is RUNNING (the probe is not run: a RUNNING simulated
  sandbox passes any probe), DEADLINE_EXCEEDED past its `timeout` (real seconds), NOT_FOUND if it ended.
"""

from __future__ import annotations

import asyncio
import math
import shlex
from dataclasses import dataclass, field
from typing import Any

from grpclib import GRPCError, Status
from modal_proto import task_command_router_grpc
from modal_proto import task_command_router_pb2 as sr_pb2

from providers.sim.core.simulator import (
    ExecError,
    ExecOutcome,
    ExecTimedOut,
    NotRunning,
    SandboxDied,
    SandboxStatus,
    SimSandbox,
)
from providers.sim.modal.errors import task_gone_error
from providers.sim.modal.grpc_plumbing import with_unimplemented
from providers.sim.modal.registry import ModalRegistry, ModalSandbox, is_usable_or_ended
from providers.sim.modal.tokens import JwtSigner

STDIO_CHUNK_BYTES = 64 * 1024
EXEC_RETENTION_S = 60.0  # real seconds a finished sandbox's commands stay readable
_KILLED_SIGNAL = 9


@dataclass(slots=True, eq=False)
class _Exec:
    """One command: started once per exec id, readable and waitable any number of times."""

    exec_id: str
    task_id: str
    done: asyncio.Future[None]
    stdout: bytes = b""
    stderr: bytes = b""
    code: int | None = None
    signal: int | None = None
    error: GRPCError | None = None
    ticket: Any = field(default=None, repr=False)


class ModalCommandRouter(with_unimplemented(task_command_router_grpc.TaskCommandRouterBase)):  # type: ignore[misc]
    """Runs sandbox commands for tasks whose JWT the control plane signed."""

    def __init__(self, registry: ModalRegistry, signer: JwtSigner) -> None:
        self.registry = registry
        self.sim = registry.sim
        self.signer = signer
        self._execs: dict[str, dict[str, _Exec]] = {}
        self.sim.add_listener(self._changed)

    # --- lookup and auth ------------------------------------------------------------------------------

    def _task(self, stream: Any, task_id: str) -> ModalSandbox:
        header = stream.metadata.get("authorization") or ""
        scheme, _, token = header.partition(" ")
        claims = self.signer.verify(token.strip()) if scheme.lower() == "bearer" else None
        if claims is None:
            raise GRPCError(Status.UNAUTHENTICATED, "Missing, invalid or expired command router token")
        if claims.get("task_id") != task_id:
            raise GRPCError(Status.PERMISSION_DENIED, f"This token does not grant access to task {task_id}")
        record = self.registry.by_task.get(task_id)
        if record is None:
            raise GRPCError(Status.NOT_FOUND, f"Task {task_id} not found")
        return record

    def _exec(self, stream: Any, task_id: str, exec_id: str) -> _Exec:
        record = self._task(stream, task_id)
        found = self._execs.get(task_id, {}).get(exec_id)
        if found is None:
            if not record.sim.active:
                raise task_gone_error(task_id, record.sim)
            raise GRPCError(Status.NOT_FOUND, f"Exec {exec_id} not found in task {task_id}")
        return found

    def _changed(self, sb: SimSandbox) -> None:
        if sb.active:
            return
        record = self.registry.by_sim.get(sb.id)
        if record is not None and record.task_id in self._execs:
            loop = asyncio.get_running_loop()
            loop.call_later(EXEC_RETENTION_S, self._execs.pop, record.task_id, None)

    # --- RPCs -----------------------------------------------------------------------------------------

    async def TaskExecStart(self, stream: Any) -> None:
        request: sr_pb2.TaskExecStartRequest = await stream.recv_message()
        record = self._task(stream, request.task_id)
        execs = self._execs.setdefault(request.task_id, {})
        if request.exec_id not in execs:  # a retried start with the same exec id is the same command
            await self.registry.wait_for(record, is_usable_or_ended, None)
            if not record.sim.active:
                raise task_gone_error(request.task_id, record.sim)
            execs[request.exec_id] = self._start(record, request)
        await stream.send_message(sr_pb2.TaskExecStartResponse())

    def _start(self, record: ModalSandbox, request: sr_pb2.TaskExecStartRequest) -> _Exec:
        loop = asyncio.get_running_loop()
        ex = _Exec(exec_id=request.exec_id, task_id=request.task_id, done=loop.create_future())
        timeout_s = (
            float(request.timeout_secs) if request.HasField("timeout_secs") and request.timeout_secs else math.inf
        )
        workdir = request.workdir if request.HasField("workdir") and request.workdir else record.workdir
        env = {**dict(request.env), **self.registry.environment(request.secret_ids, request.secret_sources)}

        def finished(result: ExecOutcome | BaseException) -> None:
            if isinstance(result, ExecOutcome):
                ex.code = result.exit_code
                ex.stdout = result.stdout.encode()
                ex.stderr = result.stderr.encode()
            elif isinstance(result, ExecTimedOut):
                ex.signal = _KILLED_SIGNAL
            elif isinstance(result, SandboxDied):
                ex.error = task_gone_error(request.task_id, record.sim)
            elif isinstance(result, ExecError):
                ex.error = GRPCError(Status.ABORTED, f"Exec {request.exec_id} failed: {result.message}")
            else:
                ex.error = GRPCError(Status.INTERNAL, f"Exec {request.exec_id} failed: {result}")
            if not ex.done.done():
                ex.done.set_result(None)

        try:
            ex.ticket = self.sim.exec_start(
                record.sim.id,
                shlex.join(request.command_args),
                timeout_s=timeout_s,
                on_done=finished,
                env=env or None,
                cwd=workdir,
            )
        except NotRunning:
            raise task_gone_error(request.task_id, record.sim) from None
        return ex

    async def TaskExecStdioRead(self, stream: Any) -> None:
        request: sr_pb2.TaskExecStdioReadRequest = await stream.recv_message()
        ex = self._exec(stream, request.task_id, request.exec_id)
        await asyncio.shield(ex.done)
        if ex.error is not None:
            raise ex.error
        if request.file_descriptor == sr_pb2.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR:
            data = ex.stderr
        else:
            data = ex.stdout
        for start in range(max(0, int(request.offset)), len(data), STDIO_CHUNK_BYTES):
            await stream.send_message(sr_pb2.TaskExecStdioReadResponse(data=data[start : start + STDIO_CHUNK_BYTES]))

    async def TaskExecWait(self, stream: Any) -> None:
        request: sr_pb2.TaskExecWaitRequest = await stream.recv_message()
        ex = self._exec(stream, request.task_id, request.exec_id)
        await asyncio.shield(ex.done)
        if ex.error is not None:
            raise ex.error
        if ex.signal is not None:
            await stream.send_message(sr_pb2.TaskExecWaitResponse(signal=ex.signal))
        else:
            await stream.send_message(sr_pb2.TaskExecWaitResponse(code=ex.code or 0))

    async def TaskExecPoll(self, stream: Any) -> None:
        request: sr_pb2.TaskExecPollRequest = await stream.recv_message()
        ex = self._exec(stream, request.task_id, request.exec_id)
        if not ex.done.done():
            await stream.send_message(sr_pb2.TaskExecPollResponse())
        elif ex.error is not None:
            raise ex.error
        elif ex.signal is not None:
            await stream.send_message(sr_pb2.TaskExecPollResponse(signal=ex.signal))
        else:
            await stream.send_message(sr_pb2.TaskExecPollResponse(code=ex.code or 0))

    async def SandboxWaitUntilReady(self, stream: Any) -> None:
        request: sr_pb2.SandboxWaitUntilReadyTcrRequest = await stream.recv_message()
        record = self._task(stream, request.task_id)
        if not record.has_readiness_probe:
            raise GRPCError(Status.FAILED_PRECONDITION, "Sandbox has no readiness probe configured")
        timeout = float(request.timeout) if request.timeout > 0 else None
        deadline = getattr(stream, "deadline", None)
        if deadline is not None:
            left = max(0.0, deadline.time_remaining() - 0.05)
            timeout = left if timeout is None else min(timeout, left)
        if not await self.registry.wait_for(record, is_usable_or_ended, timeout):
            raise GRPCError(Status.DEADLINE_EXCEEDED, f"Sandbox did not become ready within {request.timeout:g}s")
        sb = record.sim
        if sb.status is not SandboxStatus.RUNNING:
            raise task_gone_error(request.task_id, sb)
        ready_at = self.sim.clock.wall(sb.running_at or 0.0)
        await stream.send_message(sr_pb2.SandboxWaitUntilReadyTcrResponse(ready_at=ready_at))
