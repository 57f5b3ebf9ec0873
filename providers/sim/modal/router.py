"""The local task command router: `modal.task_command_router.TaskCommandRouter` over the simulator.

Since SDK 1.2.3 `Sandbox.exec` talks to a router on the worker, not to the control plane: it connects
with the URL and per-task JWT the control plane handed out, then `TaskExecStart`, reads stdout and stderr
with `TaskExecStdioRead` (server streams, resumable at a byte offset), and `TaskExecWait` (or
`TaskExecPoll`). `Sandbox.wait_until_ready` is `SandboxWaitUntilReady` here too. Those five RPCs are
implemented, and for `Sandbox.filesystem` (an exec of Modal's filesystem tool, played on the sandbox's tree by
`fs_tools.py`, after the profile's per-command cost) the tool's stdin (`TaskExecStdinWriteStream`,
`TaskExecStdinWrite`, `TaskExecStdinStatus`; a watch's events stream on `TaskExecStdioRead` as they come), and
`TaskSnapshotFilesystem` (`snapshot_filesystem`); the rest answer UNIMPLEMENTED (stdin to an ordinary command too,
naming it). The SDK only allows a plain-http router when its control
plane is on localhost, which is how this runs.

Commands run in the simulator's shell (`shell.py`): `argv` is joined into one shell word list, so
`["sh", "-c", "echo hi; exit 3"]` behaves as on a real worker, with exit codes and both streams. A real command's
output (`sandbox.commands=real`) streams on `TaskExecStdioRead` as the command writes it (what a streamed exec's
first byte measures); a modelled command's comes whole at its end.
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
    NotFound,
    NotRunning,
    SandboxDied,
    SandboxStatus,
    SimSandbox,
    TransferRefused,
)
from providers.sim.modal import fs_tools
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
    tool: fs_tools.ToolCall | None = None  # the filesystem tool, played here (`fs_tools.py`)
    stdin: bytearray = field(default_factory=bytearray)
    stdin_closed: asyncio.Future[None] | None = None
    changed: asyncio.Future[None] | None = None  # output that streams while it runs (a command, a watch): set on growth


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
            tool = fs_tools.parse(list(request.command_args))
            execs[request.exec_id] = self._start(record, request) if tool is None else self._tool(record, request, tool)
        await stream.send_message(sr_pb2.TaskExecStartResponse())

    def _start(self, record: ModalSandbox, request: sr_pb2.TaskExecStartRequest) -> _Exec:
        loop = asyncio.get_running_loop()
        ex = _Exec(exec_id=request.exec_id, task_id=request.task_id, done=loop.create_future())
        timeout_s = (
            float(request.timeout_secs) if request.HasField("timeout_secs") and request.timeout_secs else math.inf
        )
        workdir = request.workdir if request.HasField("workdir") and request.workdir else record.workdir
        env = {**dict(request.env), **self.registry.environment(request.secret_ids, request.secret_sources)}

        ex.changed = loop.create_future()  # a real command's output streams on TaskExecStdioRead as it grows

        def grew(stderr: bool, data: bytes) -> None:
            if stderr:
                ex.stderr += data
            else:
                ex.stdout += data
            assert ex.changed is not None
            if not ex.changed.done():
                ex.changed.set_result(None)
            ex.changed = loop.create_future()

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
                on_stdout=lambda data: grew(False, data),
                on_stderr=lambda data: grew(True, data),
            )
        except NotRunning:
            raise task_gone_error(request.task_id, record.sim) from None
        return ex

    def _tool(self, record: ModalSandbox, request: sr_pb2.TaskExecStartRequest, tool: fs_tools.ToolCall) -> _Exec:
        """The filesystem tool: the vendor's per-command cost first (a drawn `true`), then the operation on
        the sandbox's tree, once its stdin is closed when it reads one (`WriteFile`)."""
        loop = asyncio.get_running_loop()
        ex = _Exec(exec_id=request.exec_id, task_id=request.task_id, done=loop.create_future(), tool=tool)
        if tool.reads_stdin or tool.operation == "Watch":  # a watch ends when the SDK closes its stdin
            ex.stdin_closed = loop.create_future()
        if tool.operation == "Watch":
            ex.changed = loop.create_future()
        ex.ticket = loop.create_task(self._run_tool(record, ex, tool))
        return ex

    async def _run_tool(self, record: ModalSandbox, ex: _Exec, tool: fs_tools.ToolCall) -> None:
        try:
            await self.sim.exec(record.sim.id, "true", timeout_s=math.inf)
            if tool.operation == "Watch":
                await self._watch(record, ex, tool)
                return
            if ex.stdin_closed is not None:
                await ex.stdin_closed
            result = await self._moved(record, tool, bytes(ex.stdin))
            ex.code, ex.stdout, ex.stderr = result.code, result.stdout, result.stderr
        except (SandboxDied, NotFound, NotRunning):
            ex.error = task_gone_error(ex.task_id, record.sim)
        except ExecError as exc:
            ex.error = GRPCError(Status.ABORTED, f"Exec {ex.exec_id} failed: {exc.message}")
        except Exception as exc:  # our bug: the client gets an error, never a silent exit 0
            ex.error = GRPCError(Status.INTERNAL, f"Exec {ex.exec_id} failed: {type(exc).__name__}: {exc}")
        finally:
            if not ex.done.done():
                ex.done.set_result(None)

    async def _moved(self, record: ModalSandbox, tool: fs_tools.ToolCall, stdin: bytes) -> fs_tools.ToolResult:
        """The tool's operation, a file's bytes moving over the profile's bandwidth (`VendorSimulator.transfer`):
        a WriteFile's stdin before it lands, a ReadFile's file before it is answered; a refused file is the tool's
        `FileTooLarge` (the SDK's SandboxFilesystemFileTooLargeError on a read), `ResourceExhausted` or, for a file the
        vendor failed part-way, `Internal` error (the SDK's plain SandboxFilesystemError for both)."""
        try:
            if tool.operation == "WriteFile":
                await self.sim.transfer(record.sim.id, "upload", len(stdin))
            result = fs_tools.run(self.sim.tree(record.sim.id), tool, stdin)
            if tool.operation == "ReadFile" and result.code == 0:
                await self.sim.transfer(record.sim.id, "download", len(result.stdout))
        except TransferRefused as exc:
            kinds = {"file_too_large": "FileTooLarge", "transfer_failed": "Internal"}
            kind = kinds.get(exc.reason, "ResourceExhausted")
            return fs_tools.refused(kind, exc.message)
        return result

    async def _watch(self, record: ModalSandbox, ex: _Exec, tool: fs_tools.ToolCall) -> None:
        """Look for changes until the watch's timeout (vendor seconds), its stdin closing, or the sandbox ending."""
        try:
            watcher = fs_tools.Watcher(self.sim.tree(record.sim.id), tool)
        except OSError as exc:
            result = fs_tools.failure(exc)
            ex.code, ex.stderr = result.code, result.stderr
            return
        loop = asyncio.get_running_loop()
        timeout = tool.args.get("timeout_secs")
        until = loop.time() + float(timeout) * self.sim.clock.time_scale if timeout else math.inf
        assert ex.stdin_closed is not None
        while not ex.stdin_closed.done() and record.sim.active and loop.time() < until:
            await asyncio.wait([ex.stdin_closed], timeout=min(fs_tools.WATCH_POLL_S, until - loop.time()))
            lines = watcher.poll() if record.sim.active else b""
            if lines:
                ex.stdout += lines
                assert ex.changed is not None
                ex.changed.set_result(None)
                ex.changed = loop.create_future()
        if not record.sim.active:
            ex.error = task_gone_error(ex.task_id, record.sim)
            return
        ex.code = 0

    def _stdin_target(self, stream: Any, task_id: str, exec_id: str) -> _Exec:
        ex = self._exec(stream, task_id, exec_id)
        if ex.stdin_closed is None:
            raise GRPCError(
                Status.UNIMPLEMENTED, "Writing to a command's stdin is not supported by the local Modal plane"
            )
        return ex

    @staticmethod
    def _take_stdin(ex: _Exec, offset: int, data: bytes, eof: bool) -> None:
        """Bytes at `offset` of the stream (a resumed write repeats some: they are kept once)."""
        assert ex.stdin_closed is not None
        if ex.stdin_closed.done():
            if data:
                raise GRPCError(Status.FAILED_PRECONDITION, f"Exec {ex.exec_id}: stdin is already closed")
            return
        if offset > len(ex.stdin):
            raise GRPCError(Status.OUT_OF_RANGE, f"Exec {ex.exec_id}: stdin offset {offset} is past {len(ex.stdin)}")
        ex.stdin[offset:] = data
        if eof:
            ex.stdin_closed.set_result(None)

    async def TaskExecStdinWrite(self, stream: Any) -> None:
        request: sr_pb2.TaskExecStdinWriteRequest = await stream.recv_message()
        ex = self._stdin_target(stream, request.task_id, request.exec_id)
        self._take_stdin(ex, int(request.offset), bytes(request.data), bool(request.eof))
        await stream.send_message(sr_pb2.TaskExecStdinWriteResponse())

    async def TaskExecStdinWriteStream(self, stream: Any) -> None:
        first: sr_pb2.TaskExecStdinWriteStreamRequest | None = await stream.recv_message()
        if first is None or first.WhichOneof("payload") != "start":
            raise GRPCError(Status.INVALID_ARGUMENT, "The stdin stream must begin with a start message")
        ex = self._stdin_target(stream, first.start.task_id, first.start.exec_id)
        offset = int(first.start.offset)
        async for message in stream:
            kind = message.WhichOneof("payload")
            if kind == "data":
                self._take_stdin(ex, offset, bytes(message.data), False)
                offset += len(message.data)
            elif kind == "end":
                self._take_stdin(ex, offset, b"", True)
        await stream.send_message(sr_pb2.TaskExecStdinWriteStreamResponse())

    async def TaskExecStdinStatus(self, stream: Any) -> None:
        request: sr_pb2.TaskExecStdinStatusRequest = await stream.recv_message()
        ex = self._stdin_target(stream, request.task_id, request.exec_id)
        closed = ex.stdin_closed is not None and ex.stdin_closed.done()
        await stream.send_message(sr_pb2.TaskExecStdinStatusResponse(num_bytes_written=len(ex.stdin), closed=closed))

    async def TaskExecStdioRead(self, stream: Any) -> None:
        request: sr_pb2.TaskExecStdioReadRequest = await stream.recv_message()
        ex = self._exec(stream, request.task_id, request.exec_id)
        if ex.changed is not None:
            await self._stream_output(stream, ex, request)
            return
        await asyncio.shield(ex.done)
        if ex.error is not None:
            raise ex.error
        if request.file_descriptor == sr_pb2.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR:
            data = ex.stderr
        else:
            data = ex.stdout
        for start in range(max(0, int(request.offset)), len(data), STDIO_CHUNK_BYTES):
            await stream.send_message(sr_pb2.TaskExecStdioReadResponse(data=data[start : start + STDIO_CHUNK_BYTES]))

    async def _stream_output(self, stream: Any, ex: _Exec, request: sr_pb2.TaskExecStdioReadRequest) -> None:
        """Output sent as it grows (a watch's events), to the end once the command finished."""
        stderr = request.file_descriptor == sr_pb2.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR
        offset = max(0, int(request.offset))
        while True:
            finished, changed = ex.done.done(), ex.changed
            data = ex.stderr if stderr else ex.stdout
            for start in range(offset, len(data), STDIO_CHUNK_BYTES):
                await stream.send_message(
                    sr_pb2.TaskExecStdioReadResponse(data=data[start : start + STDIO_CHUNK_BYTES])
                )
            offset = max(offset, len(data))
            if finished:
                if ex.error is not None:
                    raise ex.error
                return
            assert changed is not None
            await asyncio.wait([changed, ex.done], return_when=asyncio.FIRST_COMPLETED)

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

    async def TaskSnapshotFilesystem(self, stream: Any) -> None:
        request: sr_pb2.TaskSnapshotFilesystemRequest = await stream.recv_message()
        record = self._task(stream, request.task_id)
        image_id = await self.registry.snapshot_image(record)
        await stream.send_message(sr_pb2.TaskSnapshotFilesystemResponse(image_id=image_id))

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
