"""CoreWeave Sandbox's gRPC `coreweave.sandbox.v1.SandboxService`, served over the vendor simulator.

The wire is the SDK's own (`cwsandbox._proto.sandbox_pb2_grpc`, cwsandbox 1.22.0): the SDK creates with
`CreateSandbox`, polls `GetSandbox` until `STATE_RUNNING`, runs commands over the bidirectional `StreamExec`
(init -> ready -> output chunks -> exit), stops with `DeleteSandbox` and then polls to a terminal state, finds
sandboxes with `ListSandboxes` (tags, all of them), and moves files with `WriteFile` / `ReadFile`. The SDK asks
`ConnectSandbox` for a direct mTLS data plane first (its default `data_plane_mode=auto`); this plane has none and
answers UNIMPLEMENTED, which the SDK takes as "use the API gateway" (all data goes through this service).

States: the simulator's PENDING -> PROVISIONING -> RUNNING map onto CoreWeave's PENDING -> CREATING -> RUNNING; a
stopped sandbox answers COMPLETED (the SDK's TERMINATING -> COMPLETED flow, with TERMINATING skipped: the simulator
ends a sandbox at once), one whose lifetime ran out TERMINATED, one that failed FAILED with the simulator's error as
`state_reason`. Errors carry AIP-193 details (`grpc-status-details-bin`: `ErrorInfo` in the `cwsandbox.com` domain,
`RetryInfo`) as the SDK parses them; refusals: see `_REJECTIONS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import shlex
from collections.abc import AsyncIterator, Iterable
from typing import Any

import grpc
import grpc.aio
from cwsandbox._proto import sandbox_pb2, sandbox_pb2_grpc
from google.protobuf import duration_pb2, timestamp_pb2
from google.rpc import error_details_pb2, status_pb2

from providers.sim.core.execution.isolated_shell import RealProcess
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
from providers.sim.core.serving.bearer import bearer_matches
from providers.sim.core.simulator import TransferRefused, VendorSimulator

DOMAIN = "cwsandbox.com"
DEFAULT_IMAGE = "python:3.11"
DEFAULT_LIFETIME_S = 3600.0  # the backend's default lifetime is not published; the simulator's own default
LIST_PAGE_MAX = 1000
RUNNER_ID = "local-runner"
_STATES = {
    SandboxStatus.PENDING: sandbox_pb2.STATE_PENDING,
    SandboxStatus.PROVISIONING: sandbox_pb2.STATE_CREATING,
    SandboxStatus.RUNNING: sandbox_pb2.STATE_RUNNING,
    SandboxStatus.PAUSED: sandbox_pb2.STATE_PAUSED,
    SandboxStatus.TERMINATED: sandbox_pb2.STATE_COMPLETED,
    SandboxStatus.TIMEOUT: sandbox_pb2.STATE_TERMINATED,
    SandboxStatus.ERROR: sandbox_pb2.STATE_FAILED,
}
# a refused create: (gRPC code, AIP-193 reason or None). Rate and concurrency refusals have no reason in the
# SDK's catalog: RESOURCE_EXHAUSTED with the wording the adapter reads (`CONCURRENCY_TEXT`), a rate refusal with
# RetryInfo. No room on the runners is the catalog's CWSANDBOX_RUNNER_CAPACITY_EXHAUSTED.
_REJECTIONS: dict[RejectReason, tuple[grpc.StatusCode, str | None]] = {
    RejectReason.RATE_LIMITED: (grpc.StatusCode.RESOURCE_EXHAUSTED, None),
    RejectReason.QUOTA_EXHAUSTED: (grpc.StatusCode.RESOURCE_EXHAUSTED, None),
    RejectReason.CAPACITY: (grpc.StatusCode.RESOURCE_EXHAUSTED, "CWSANDBOX_RUNNER_CAPACITY_EXHAUSTED"),
    RejectReason.TRANSIENT: (grpc.StatusCode.UNAVAILABLE, "CWSANDBOX_BACKEND_UNAVAILABLE"),
    RejectReason.INVALID: (grpc.StatusCode.INVALID_ARGUMENT, "CWSANDBOX_INVALID_REQUEST"),
}
CONCURRENCY_TEXT = "concurrent sandbox limit"
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")
_MEMORY_UNITS = {"": 1 / 2**20, "Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 2**20, "K": 1e3 / 2**20, "M": 1e6 / 2**20}
_MEMORY_UNITS["G"] = 1e9 / 2**20


def cpu_cores(text: str, default: float) -> float:
    """A Kubernetes CPU quantity (`"2"`, `"500m"`) in cores; `default` when empty or unreadable."""
    match = _QUANTITY.match(text or "")
    if match is None:
        return default
    value, unit = float(match.group(1)), match.group(2)
    return value / 1000 if unit == "m" else value if unit == "" else default


def memory_mb(text: str, default: int) -> int:
    """A Kubernetes memory quantity (`"1Gi"`, `"512Mi"`, bytes) in MiB; `default` when empty or unreadable."""
    match = _QUANTITY.match(text or "")
    if match is None or match.group(2) not in _MEMORY_UNITS:
        return default
    return max(1, math.ceil(float(match.group(1)) * _MEMORY_UNITS[match.group(2)]))


def _quantity(container: sandbox_pb2.Container, name: str) -> str:
    """A container's cpu or memory as the SDK sends it: `resource_requirements` (limits, else requests; what
    `ResourceOptions` builds), else the older `resources`."""
    wanted = container.resource_requirements
    for resources in (wanted.limits, wanted.requests, container.resources):
        value = str(getattr(resources, name))
        if value:
            return value
    return ""


def _timestamp(epoch_s: float | None) -> timestamp_pb2.Timestamp | None:
    if epoch_s is None:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(epoch_s * 1e9))
    return stamp


class Abort(Exception):
    """An RPC's answer as a gRPC error with AIP-193 details (raised inside a handler, sent by `_answer`)."""

    def __init__(
        self, code: grpc.StatusCode, message: str, reason: str | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.retry_after_s = retry_after_s

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        status = status_pb2.Status(code=self.code.value[0], message=self.message)
        if self.reason is not None:
            status.details.add().Pack(error_details_pb2.ErrorInfo(reason=self.reason, domain=DOMAIN))
        if self.retry_after_s is not None:
            delay = duration_pb2.Duration()
            delay.FromNanoseconds(int(self.retry_after_s * 1e9))
            status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        if not status.details:
            return ()
        return (("grpc-status-details-bin", status.SerializeToString()),)


def _not_found(sandbox_id: str) -> Abort:
    return Abort(grpc.StatusCode.NOT_FOUND, f"sandbox {sandbox_id} not found", "CWSANDBOX_SANDBOX_NOT_FOUND")


def _not_running(exc: NotRunning) -> Abort:
    return Abort(grpc.StatusCode.FAILED_PRECONDITION, f"sandbox {exc.sandbox_id} is not running ({exc.status})")


class CoreWeaveSandboxService(sandbox_pb2_grpc.SandboxServiceServicer):
    """The SandboxService RPCs the SDK's lifecycle uses; every other one answers UNIMPLEMENTED (the generated
    servicer's default), so a new SDK call shows up as a gRPC status, never a crash."""

    def __init__(self, sim: VendorSimulator, token: str) -> None:
        self.sim = sim
        self.token = token

    # --- plumbing -------------------------------------------------------------------------------------

    def _authorize(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        headers = dict(context.invocation_metadata() or ())
        if not bearer_matches(str(headers.get("authorization", "")), self.token):
            raise Abort(grpc.StatusCode.UNAUTHENTICATED, "invalid or missing API key")

    async def _answer(self, context: grpc.aio.ServicerContext[Any, Any], exc: Abort) -> None:
        context.set_trailing_metadata(exc.trailing_metadata())
        await context.abort(exc.code, exc.message)

    def _get(self, sandbox_id: str) -> SimSandbox:
        try:
            return self.sim.get(sandbox_id)
        except NotFound:
            raise _not_found(sandbox_id) from None

    def sandbox_message(self, sb: SimSandbox) -> sandbox_pb2.Sandbox:
        """A simulator record as the wire's `Sandbox` (times are real epoch seconds, the clock's `wall`)."""
        wall = self.sim.clock.wall
        status = sandbox_pb2.SandboxStatus(
            state=_STATES.get(sb.status, sandbox_pb2.STATE_UNSPECIFIED),
            state_reason=f"{sb.error_type}: {sb.error_message}" if sb.error_type else "",
            create_time=_timestamp(wall(sb.created_at)),
            start_time=_timestamp(None if sb.running_at is None else wall(sb.running_at)),
            end_time=_timestamp(None if sb.ended_at is None else wall(sb.ended_at)),
            runner_id=RUNNER_ID if sb.node is not None else "",
            effective_max_lifetime_seconds=0 if math.isinf(sb.lifetime_s) else int(sb.lifetime_s),
        )
        container = sandbox_pb2.Container(
            image=sb.image,
            command=sb.start_command[0] if sb.start_command else "",
            args=list(sb.start_command[1:]),
            environment_variables=dict(sb.env),
            resources=sandbox_pb2.Resources(cpu=f"{sb.cpu:g}", memory=f"{sb.memory_mb}Mi"),
        )
        spec = sandbox_pb2.SandboxSpec(containers=[container], tags=list(sb.labels))
        return sandbox_pb2.Sandbox(sandbox_id=sb.id, spec=spec, status=status, display_name=sb.name)

    # --- lifecycle ------------------------------------------------------------------------------------

    async def CreateSandbox(
        self, request: sandbox_pb2.CreateSandboxRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> sandbox_pb2.Sandbox:
        try:
            self._authorize(context)
            return self.sandbox_message(self.sim.create(self._create_request(request)))
        except Rejected as exc:
            await self._answer(context, self._refusal(exc))
        except Abort as exc:
            await self._answer(context, exc)
        raise AssertionError("unreachable: abort raises")

    def _create_request(self, request: sandbox_pb2.CreateSandboxRequest) -> CreateRequest:
        spec = request.sandbox.spec
        if len(spec.containers) > 1:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "the local plane runs one container per sandbox")
        container = spec.containers[0] if spec.containers else sandbox_pb2.Container()
        command = (container.command, *container.args) if container.command else tuple(container.args)
        lifetime = float(spec.max_lifetime_seconds) if spec.max_lifetime_seconds > 0 else DEFAULT_LIFETIME_S
        return CreateRequest(
            image=container.image or DEFAULT_IMAGE,
            labels=tuple(spec.tags),
            cpu=cpu_cores(_quantity(container, "cpu"), 1.0),
            memory_mb=memory_mb(_quantity(container, "memory"), 1024),
            lifetime_s=lifetime,
            name=request.sandbox.display_name,
            idempotency_key=request.request_id or None,
            env=dict(container.environment_variables),
            start_command=command,
        )

    def _refusal(self, exc: Rejected) -> Abort:
        code, reason = _REJECTIONS.get(exc.reason, (grpc.StatusCode.INTERNAL, None))
        message = exc.message
        if exc.reason is RejectReason.QUOTA_EXHAUSTED:
            message = f"{CONCURRENCY_TEXT} reached: {exc.message}"
        retry = None if exc.retry_after is None else exc.retry_after * self.sim.clock.time_scale
        return Abort(code, message, reason, retry)

    async def GetSandbox(
        self, request: sandbox_pb2.GetSandboxRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> sandbox_pb2.Sandbox:
        try:
            self._authorize(context)
            return self.sandbox_message(self._get(request.sandbox_id))
        except Abort as exc:
            await self._answer(context, exc)
        raise AssertionError("unreachable: abort raises")

    async def ListSandboxes(
        self, request: sandbox_pb2.ListSandboxesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> sandbox_pb2.ListSandboxesResponse:
        """Sandboxes carrying every tag asked for, active ones unless `show_terminated`, paged by offset."""
        try:
            self._authorize(context)
            found = self.sim.list(labels=tuple(request.tags), active_only=not request.show_terminated)
            if request.state != sandbox_pb2.STATE_UNSPECIFIED:
                found = [sb for sb in found if _STATES.get(sb.status) == request.state]
            if request.sort_direction == sandbox_pb2.SORT_DIRECTION_DESCENDING:
                found.reverse()
            start = int(request.page_token) if request.page_token.isdigit() else 0
            size = min(request.page_size or LIST_PAGE_MAX, LIST_PAGE_MAX)
            page = found[start : start + size]
            more = start + size < len(found)
            return sandbox_pb2.ListSandboxesResponse(
                sandboxes=[self.sandbox_message(sb) for sb in page], next_page_token=str(start + size) if more else ""
            )
        except Abort as exc:
            await self._answer(context, exc)
        raise AssertionError("unreachable: abort raises")

    async def DeleteSandbox(
        self, request: sandbox_pb2.DeleteSandboxRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> sandbox_pb2.DeleteSandboxResponse:
        """Stop (idempotent: an ended sandbox answers as it is). `allow_missing` makes an unknown id a success."""
        try:
            self._authorize(context)
            try:
                sb = self.sim.terminate(request.sandbox_id)
            except NotFound:
                if request.allow_missing:
                    return sandbox_pb2.DeleteSandboxResponse()
                raise _not_found(request.sandbox_id) from None
            return sandbox_pb2.DeleteSandboxResponse(sandbox=self.sandbox_message(sb))
        except Abort as exc:
            await self._answer(context, exc)
        raise AssertionError("unreachable: abort raises")

    async def ConnectSandbox(
        self, request: sandbox_pb2.ConnectSandboxRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> sandbox_pb2.SandboxConnection:
        """No direct mTLS data plane here: UNIMPLEMENTED sends the SDK's `auto` mode to the gateway."""
        await self._answer(
            context, Abort(grpc.StatusCode.UNIMPLEMENTED, "direct data-plane connections are not served locally")
        )
        raise AssertionError("unreachable: abort raises")

    # --- commands -------------------------------------------------------------------------------------

    def _running(self, sandbox_id: str) -> SimSandbox:
        sb = self._get(sandbox_id)
        if sb.status is not SandboxStatus.RUNNING:
            raise Abort(grpc.StatusCode.FAILED_PRECONDITION, f"sandbox {sandbox_id} is not running ({sb.status})")
        return sb

    async def Exec(
        self, request: sandbox_pb2.ExecRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> sandbox_pb2.ExecResponse:
        """The unary exec: the whole output at the end."""
        try:
            self._authorize(context)
            sb = self._running(request.sandbox_id)
            try:
                outcome = await self.sim.exec(
                    sb.id, shlex.join(request.command), timeout_s=sb.lifetime_s, env=dict(request.env) or None
                )
            except BaseException as exc:
                raise _exec_abort(exc) from None
            out, err = outcome.stdout.encode(), outcome.stderr.encode()
            return sandbox_pb2.ExecResponse(
                stdout=out,
                stderr=err,
                exit_code=outcome.exit_code,
                stdout_bytes_produced=len(out),
                stderr_bytes_produced=len(err),
            )
        except Abort as exc:
            await self._answer(context, exc)
        raise AssertionError("unreachable: abort raises")

    async def StreamExec(
        self,
        request_iterator: AsyncIterator[sandbox_pb2.ExecStreamRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[sandbox_pb2.ExecStreamResponse]:
        """init -> ready -> output (as it comes with real commands, at the end with modelled ones) -> exit.
        A sandbox that dies mid-command answers an `error` message, as the SDK expects on this stream."""
        try:
            self._authorize(context)
            first = await anext(aiter(request_iterator), None)
            if first is None or not first.HasField("init"):
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "the first StreamExec message must be init")
            init = first.init
            sb = self._running(init.sandbox_id)
        except Abort as exc:
            await self._answer(context, exc)
            return
        chunks: asyncio.Queue[sandbox_pb2.ExecStreamResponse | None] = asyncio.Queue()

        def output(stream: int) -> Any:
            def put(data: bytes) -> None:
                chunks.put_nowait(sandbox_pb2.ExecStreamResponse(output={"stream": stream, "data": data}))

            return put

        streamed = self.sim.profile.sandbox.commands == "real"
        on_out = output(sandbox_pb2.ExecStreamOutput.STREAM_STDOUT) if streamed else None
        on_err = output(sandbox_pb2.ExecStreamOutput.STREAM_STDERR) if streamed else None
        finished: asyncio.Future[ExecOutcome | BaseException] = asyncio.get_running_loop().create_future()

        def done(result: ExecOutcome | BaseException) -> None:
            if not finished.done():
                finished.set_result(result)
                chunks.put_nowait(None)

        try:
            ticket = self.sim.exec_start(
                sb.id,
                shlex.join(init.command),
                timeout_s=sb.lifetime_s,
                on_done=done,
                env=dict(init.env) or None,
                on_stdout=on_out,
                on_stderr=on_err,
                stdin=streamed,
                pty=(init.tty_width or 80, init.tty_height or 24) if streamed and init.tty else None,
            )
        except (NotFound, NotRunning) as exc:
            await self._answer(context, _exec_abort(exc))
            return
        # stdin, resize and close go to a real command; the modelled shell reads no input
        feed = asyncio.ensure_future(_feed(request_iterator, ticket.process))
        try:
            yield sandbox_pb2.ExecStreamResponse(
                ready={"ready_time": _timestamp(self.sim.clock.wall(self.sim.clock.now()))}
            )
            while (item := await chunks.get()) is not None:
                yield item
            outcome = finished.result()
            if isinstance(outcome, BaseException):
                abort = _exec_abort(outcome)
                yield sandbox_pb2.ExecStreamResponse(error={"message": abort.message, "code": abort.code.name})
                return
            for response in _final_output(outcome, streamed):
                yield response
            yield sandbox_pb2.ExecStreamResponse(exit={"exit_code": outcome.exit_code})
        finally:
            if not finished.done():
                ticket.cancel()  # the client went away: a real command is killed
            feed.cancel()
            with contextlib.suppress(BaseException):
                await feed

    # --- files ----------------------------------------------------------------------------------------

    async def WriteFile(
        self, request: sandbox_pb2.WriteFileRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> sandbox_pb2.WriteFileResponse:
        """Write a whole file (parents made), as root: the sandbox's own files, `sim.tree(id)`."""
        try:
            self._authorize(context)
            await self._file_op(request.sandbox_id, request.path, bytes(request.content))
            return sandbox_pb2.WriteFileResponse()
        except Abort as exc:
            await self._answer(context, exc)
        raise AssertionError("unreachable: abort raises")

    async def ReadFile(
        self, request: sandbox_pb2.ReadFileRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> sandbox_pb2.ReadFileResponse:
        try:
            self._authorize(context)
            return sandbox_pb2.ReadFileResponse(content=await self._file_op(request.sandbox_id, request.path, None))
        except Abort as exc:
            await self._answer(context, exc)
        raise AssertionError("unreachable: abort raises")

    async def _file_op(self, sandbox_id: str, path: str, data: bytes | None) -> bytes:
        """Write `data` to `path`, or (None) read it, each file over the profile's bandwidth first
        (`VendorSimulator.transfer`); OS errors and refused files as the SDK's CWSANDBOX_FILE_* reasons."""
        self._running(sandbox_id)
        try:
            tree = self.sim.tree(sandbox_id)
            if data is None:
                content = tree.host_path(path).read_bytes()
                await self.sim.transfer(sandbox_id, "download", len(content))
                return content
            host = tree.writable(path)
            await self.sim.transfer(sandbox_id, "upload", len(data))
            host.parent.mkdir(parents=True, exist_ok=True)
            host.write_bytes(data)
            return b""
        except TransferRefused as exc:
            # a file reason, so the SDK raises SandboxFileError (an upload's or download's `transfer_error`). Not
            # CWSANDBOX_FILE_TOO_LARGE: cwsandbox answers that one by streaming the file through an exec instead,
            # around the files API, so the profile's cap would refuse nothing
            failed = exc.reason == "transfer_failed"  # the vendor broke it part-way: an internal error, not a cap
            code = grpc.StatusCode.INTERNAL if failed else grpc.StatusCode.RESOURCE_EXHAUSTED
            raise Abort(code, f"{path}: {exc.message}", "CWSANDBOX_FILE_IO_FAILED") from None
        except NotFound:
            raise _not_found(sandbox_id) from None
        except NotRunning as exc:
            raise _not_running(exc) from None
        except IsADirectoryError:
            raise _file_abort("CWSANDBOX_FILE_IS_DIRECTORY", path) from None
        except (FileNotFoundError, NotADirectoryError):
            raise _file_abort("CWSANDBOX_FILE_NOT_FOUND", path) from None
        except PermissionError:
            raise _file_abort("CWSANDBOX_FILE_PERMISSION_DENIED", path) from None
        except OSError as exc:
            raise _file_abort("CWSANDBOX_FILE_IO_FAILED", f"{path}: {exc.strerror or exc}") from None


def _file_abort(reason: str, path: str) -> Abort:
    code = grpc.StatusCode.PERMISSION_DENIED if "PERMISSION" in reason else grpc.StatusCode.NOT_FOUND
    if reason.endswith("IS_DIRECTORY"):
        code = grpc.StatusCode.FAILED_PRECONDITION
    return Abort(code, f"{reason.removeprefix('CWSANDBOX_').lower()}: {path}", reason)


def _exec_abort(exc: BaseException) -> Abort:
    """A command that did not finish, as the gateway's status."""
    if isinstance(exc, NotFound):
        return _not_found(exc.sandbox_id)
    if isinstance(exc, NotRunning):
        return _not_running(exc)
    if isinstance(exc, ExecTimedOut):
        return Abort(grpc.StatusCode.DEADLINE_EXCEEDED, str(exc), "CWSANDBOX_COMMAND_TIMEOUT")
    if isinstance(exc, SandboxDied):
        return Abort(grpc.StatusCode.ABORTED, str(exc))
    if isinstance(exc, ExecError):
        return Abort(grpc.StatusCode.UNAVAILABLE, exc.message, "CWSANDBOX_RUNNER_UNAVAILABLE")
    if isinstance(exc, asyncio.CancelledError):
        return Abort(grpc.StatusCode.CANCELLED, "the command was cancelled")
    return Abort(grpc.StatusCode.INTERNAL, f"local plane error: {type(exc).__name__}")


def _final_output(outcome: ExecOutcome, streamed: bool) -> Iterable[sandbox_pb2.ExecStreamResponse]:
    """A modelled command's output, sent once it is done (a real one's went out as it came)."""
    if streamed:
        return
    for stream, text in (
        (sandbox_pb2.ExecStreamOutput.STREAM_STDOUT, outcome.stdout),
        (sandbox_pb2.ExecStreamOutput.STREAM_STDERR, outcome.stderr),
    ):
        if text:
            yield sandbox_pb2.ExecStreamResponse(output={"stream": stream, "data": text.encode()})


async def _feed(requests: AsyncIterator[sandbox_pb2.ExecStreamRequest], process: RealProcess | None) -> None:
    """The rest of a StreamExec's requests: stdin chunks, terminal resizes and the end of input, to a real command."""
    async for request in requests:
        if process is None:
            continue
        kind = request.WhichOneof("message")
        if kind == "stdin":
            process.write_stdin(request.stdin)
        elif kind == "resize":
            process.resize(request.resize.width, request.resize.height)
        elif kind == "close":
            process.close_stdin()
