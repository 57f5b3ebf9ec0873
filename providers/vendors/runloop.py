"""The `runloop` provider: Runloop devboxes through Runloop's own SDK (pinned: `runloop-api-client==3.0.0`).

One `AsyncRunloop` per provider. A rollout is the SDK's `devboxes.create` (metadata `spec.tags()`, the lifetime as
`launch_parameters.keep_alive_time_seconds`, the spec's environment), the SDK's own readiness wait, a command, and
`devboxes.shutdown`; a run's leftovers are found by listing live devboxes and keeping those whose metadata carries the
run's labels (the API lists by status, not by metadata), and shut down one by one.

Readiness, as the SDK defines it: `devboxes.await_running` long-polls `POST /v1/devboxes/{id}/wait_for_status`
(the server holds each call up to 30 s and answers as the status changes), so there is no poll term: `wait_ready`
reports a poll window of 0. A devbox that ends in `failure` or `shutdown` instead is the SDK's `RunloopError`.

Commands (`exec_api`): `execute` (default) is what `execute_and_await_completion` does (`execute` with the API's
optimistic wait, then long polls on the execution: `executions.await_completed`); `async` is `execute_async` then `executions.await_completed`; `stream` is
`execute_async` with the SDK's server-sent event streams of stdout and stderr (`stream_stdout_updates`,
`stream_stderr_updates`) read while the command runs; `sync` is the deprecated `execute_sync`. Runloop has no
per-command deadline: past the timeout the adapter kills the execution (`executions.kill`) and raises
`EXEC_TIMEOUT`. A command the devbox did not outlive completes without an exit status: the devbox's own status
tells OOM (`failure_reason` `out_of_memory`) from another death.

Contract 9's steps: `exec_stream` is `execute_async` with both SSE streams read as the command writes them, then
`executions.await_completed`; `start_process` is `execute_async` (the execution id is the handle), `process_exit`
`executions.retrieve`; a fork is the contract's default, `count` creates from `snapshot_disk`'s snapshot (Runloop has
no multi-create).

Images: `spec.image` (or the `blueprint` option) names a blueprint by name; `bpt_…` is a blueprint id; `snapshot:ID`
(what `snapshot` returns) starts from a disk snapshot. Files: `upload_file` / `download_file` are the SDK's own.

Where it talks, as whom: without `base_url`, the SDK's own configuration (`RUNLOOP_API_KEY`, `RUNLOOP_BASE_URL`);
with `base_url` (`--base-url`, or `--local` for the local Runloop) that URL and `token`, passed to this provider's
client, never into the process environment.

Options (`--provider-option K=V`; defaults in `RunloopOptions`): `api_key`, `blueprint`, `resource_size` (X_SMALL ..
XX_LARGE; none: the API's default), `exec_api` (execute, async, stream, sync), `max_retries` (the SDK's own
retries of 429 and 5xx; its default 5), `max_connections` (this provider's HTTP/1.1 connections, split over `pool_shards` pools; 0:
the SDK's shared sharded HTTP/2 pools), `preflight_timeout`, `check_sdk` (on: refuse any runloop-api-client but the pinned one).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import math
import os
import shlex
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from runloop_api_client import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RunloopError,
    UnprocessableEntityError,
)
from runloop_api_client.lib.polling import PollingConfig, PollingTimeout

from providers.base import (
    ExecResult,
    FailureKind,
    Phase,
    Provider,
    ProviderConfigError,
    ProviderError,
    ReadyObservation,
    SandboxRef,
    SandboxSpec,
    StreamedExec,
    classify_common,
    gone_kind,
    owner_labels,
    tagged_by_stampede,
    vendor_error_kind,
)
from providers.options import (
    Option,
    choice,
    declare,
    declared_options,
    declared_values,
    flag,
    integer,
    number,
    parse_options,
    text,
)
from providers.output_clock import OutputClock
from providers.preflight import preflight_errors

if TYPE_CHECKING:
    from runloop_api_client import AsyncRunloop
    from runloop_api_client.types import DevboxView

PINNED_SDK = "3.0.0"
SDK_DEFAULT_BASE_URL = "https://api.runloop.ai"
SNAPSHOT_PREFIX = "snapshot:"
LIVE_STATUSES = ("queued", "provisioning", "initializing", "running", "suspending", "suspended", "resuming")
_OPTIMISTIC_MAX_S = 25  # the API's longest optimistic wait in `execute`
_EXEC_GRACE_S = 5.0  # past the command's timeout, for the answer to arrive, before the adapter gives up on it
_SIZES = ("X_SMALL", "SMALL", "MEDIUM", "LARGE", "X_LARGE", "XX_LARGE")


# `exec_api=sync` is the SDK's deprecated execute_sync, chosen on purpose: its warning would repeat per command
warnings.filterwarnings("ignore", message="deprecated", category=DeprecationWarning, module=__name__)


def sdk_version() -> str:
    try:
        return importlib.metadata.version("runloop-api-client")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - the import above would have failed
        return "unknown"


@dataclass(frozen=True, slots=True)
class RunloopOptions:
    """Where the SDK connects, as whom, what it creates and how commands run; built from option strings."""

    api_key: str
    base_url: str = SDK_DEFAULT_BASE_URL
    blueprint: str | None = declare(None, text)
    resource_size: str | None = declare(None, text)
    exec_api: str = declare("execute", choice, "execute", "async", "stream", "sync")
    max_retries: int = declare(5, integer, minimum=0)  # the SDK's own default
    max_connections: int = declare(1000, integer, minimum=0)  # 0: the SDK's shared pools
    pool_shards: int = declare(64, integer, minimum=1)  # max_connections split over this many pools
    preflight_timeout_s: float = declare(30.0, number, key="preflight_timeout", positive=True)

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> RunloopOptions:
        values = parse_options("runloop", options, RUNLOOP_OPTIONS)
        installed = sdk_version()
        if installed != PINNED_SDK and values["check_sdk"]:
            raise ProviderConfigError(
                f"runloop provider: checked against runloop-api-client=={PINNED_SDK}, found {installed}; "
                f"pip install runloop-api-client=={PINNED_SDK} (or check_sdk=0 to try this one)"
            )
        size = values["resource_size"]
        if size is not None and size not in _SIZES:
            raise ProviderConfigError(
                f"runloop provider: resource_size must be one of {', '.join(_SIZES)} (got {size!r})"
            )
        base_url = (values["base_url"] or "").strip().rstrip("/") or None
        if base_url is not None:
            if not base_url.startswith(("http://", "https://")):
                raise ProviderConfigError(f"runloop provider: base_url must be http(s)://host:port (got {base_url!r})")
            api_key = values["api_key"] or values["token"]
            if not api_key:
                raise ProviderConfigError(
                    "runloop provider: base_url needs a token (--token, STAMPEDE_TOKEN or api_key=...)"
                )
        else:
            base_url = os.environ.get("RUNLOOP_BASE_URL") or SDK_DEFAULT_BASE_URL
            api_key = values["api_key"] or os.environ.get("RUNLOOP_API_KEY")
            if not api_key:
                raise ProviderConfigError(
                    "runloop provider: no API key; set RUNLOOP_API_KEY, or use --local for the local Runloop"
                )
        return cls(api_key=api_key, base_url=base_url, **declared_values(cls, values))


RUNLOOP_OPTIONS: dict[str, Option] = {
    "base_url": text(),  # --base-url / --local: the API's URL; none: the SDK's own configuration
    "token": text(),  # the key for base_url (--token, STAMPEDE_TOKEN)
    "api_key": text(),
    "check_sdk": flag(True),
    **declared_options(RunloopOptions),
}
"""The runloop provider's options (`--provider-option K=V`, the module's docstring): any other key is refused."""


class _PoolShards(httpx.AsyncBaseTransport):
    """`connections` HTTP/1.1 connections split over `shards` pools, requests dealt round-robin.

    One httpcore pool scans all its connections for every request it assigns (`_assign_requests_to_connections`):
    with a thousand long polls open at once that scan was 24 of 37 CPU seconds for 300 rollouts, quadratic in the
    connections. Pools of ~16 keep each scan short; the SDK's own shared pools (`max_connections=0`) hold 20
    connections a shard, too few for one long poll per devbox in flight.
    """

    def __init__(self, connections: int, shards: int) -> None:
        shards = max(1, min(shards, connections))
        each = max(1, math.ceil(connections / shards))
        limits = httpx.Limits(max_connections=each, max_keepalive_connections=each)
        tls = httpx.create_ssl_context()  # one for all: loading the CA bundle costs ~30 ms of CPU a context
        self._pools = [httpx.AsyncHTTPTransport(limits=limits, verify=tls) for _ in range(shards)]
        self._next = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        pool = self._pools[self._next]
        self._next = (self._next + 1) % len(self._pools)
        return await pool.handle_async_request(request)

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


class RunloopProvider(Provider):
    """Runloop devboxes through `runloop_api_client.AsyncRunloop`."""

    name = "runloop"

    def __init__(self, options: RunloopOptions) -> None:
        self.options = options
        self._sdk: AsyncRunloop | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> RunloopProvider:
        return cls(RunloopOptions.from_mapping(options))

    @property
    def sdk(self) -> AsyncRunloop:
        if self._sdk is None:
            from runloop_api_client import DEFAULT_TIMEOUT, AsyncRunloop

            opts = self.options
            http_client = None
            if opts.max_connections:  # wide enough for every devbox's long poll at once, over small pools
                transport = _PoolShards(opts.max_connections, opts.pool_shards)
                http_client = httpx.AsyncClient(transport=transport, timeout=DEFAULT_TIMEOUT, trust_env=False)
            self._sdk = AsyncRunloop(
                bearer_token=opts.api_key, base_url=opts.base_url, max_retries=opts.max_retries, http_client=http_client
            )
        return self._sdk

    @property
    def where(self) -> str:
        return self.options.base_url

    # --- the contract ----------------------------------------------------------------------------------

    async def preflight(self) -> None:
        async with preflight_errors(
            self.where,
            self.classify,
            timeout_s=self.options.preflight_timeout_s,
            vendor_errors=(RunloopError, httpx.HTTPError),
            refused=lambda exc: str(exc) if isinstance(exc, (AuthenticationError, PermissionDeniedError)) else None,
        ):
            await self.sdk.devboxes.list(limit=1, include_total_count=False)

    def create_params(self, spec: SandboxSpec) -> dict[str, Any]:
        """The SDK's `devboxes.create` keyword arguments for a spec."""
        launch: dict[str, Any] = {}
        if not math.isinf(spec.lifetime_s):
            launch["keep_alive_time_seconds"] = max(1, math.ceil(spec.lifetime_s))
        if self.options.resource_size:
            launch["resource_size_request"] = self.options.resource_size
        params: dict[str, Any] = {"metadata": spec.tags(), "launch_parameters": launch}
        if spec.env:
            params["environment_variables"] = dict(spec.env)
        image = spec.image or self.options.blueprint
        if image:
            if image.startswith(SNAPSHOT_PREFIX):
                params["snapshot_id"] = image[len(SNAPSHOT_PREFIX) :]
            elif image.startswith("bpt_"):
                params["blueprint_id"] = image
            else:
                params["blueprint_name"] = image
        return params

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        devbox = await self.sdk.devboxes.create(**self.create_params(spec))
        return SandboxRef(
            sandbox_id=devbox.id, provider=self.name, run_id=spec.run_id, rollout_id=spec.rollout_id, handle=devbox
        )

    async def wait_ready(self, ref: SandboxRef, timeout: float) -> ReadyObservation | None:
        polling = PollingConfig(interval_seconds=1.0, max_attempts=max(1, math.ceil(timeout)), timeout_seconds=timeout)
        try:
            async with asyncio.timeout(timeout + _EXEC_GRACE_S):
                await self.sdk.devboxes.await_running(ref.sandbox_id, polling_config=polling)
        except (TimeoutError, PollingTimeout):
            raise ProviderError(FailureKind.READY_TIMEOUT, f"not running within {timeout:g}s") from None
        except RunloopError as exc:
            if isinstance(exc, APIStatusError) or "terminal state" not in str(exc):
                raise
            raise ProviderError(await self._why_ended(ref.sandbox_id, Phase.READY), str(exc)) from exc
        return ReadyObservation(poll_window_s=0.0)

    async def _why_ended(self, devbox_id: str, phase: Phase) -> FailureKind:
        """A devbox that ended under us: OOM when its `failure_reason` says so, else died in this phase."""
        try:
            devbox = await self.sdk.devboxes.retrieve(devbox_id)
        except RunloopError:
            return gone_kind(phase)
        if devbox.failure_reason == "out_of_memory":
            return FailureKind.OOM if phase is Phase.EXEC else FailureKind.DIED_BEFORE_READY
        if phase is Phase.READY and devbox.status == "failure" and devbox.failure_reason == "health_check_failed":
            return FailureKind.DIED_BEFORE_READY
        return gone_kind(phase)

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        command = shlex.join(argv)
        devboxes = self.sdk.devboxes
        api = self.options.exec_api
        started: list[str] = []  # the execution's id, once known, to kill it past the timeout
        try:
            async with asyncio.timeout(timeout + _EXEC_GRACE_S):
                if api == "sync":
                    done = await devboxes.execute_sync(ref.sandbox_id, command=command, timeout=timeout + _EXEC_GRACE_S)
                    return ExecResult(exit_code=done.exit_status, stdout=done.stdout, stderr=done.stderr)
                polling = PollingConfig(interval_seconds=1.0, max_attempts=10**6, timeout_seconds=timeout)
                streamed = None
                if api == "execute":  # the SDK's execute_and_await_completion, with the execution's id kept
                    optimistic = max(1, min(_OPTIMISTIC_MAX_S, math.ceil(timeout)))
                    result = await devboxes.execute(ref.sandbox_id, command=command, optimistic_timeout=optimistic)
                    if result.status != "completed":
                        started.append(result.execution_id)
                        result = await devboxes.executions.await_completed(
                            result.execution_id, devbox_id=ref.sandbox_id, polling_config=polling
                        )
                else:
                    execution = await devboxes.execute_async(ref.sandbox_id, command=command)
                    started.append(execution.execution_id)
                    streams = self._stream(ref.sandbox_id, execution.execution_id) if api == "stream" else None
                    result = await devboxes.executions.await_completed(
                        execution.execution_id, devbox_id=ref.sandbox_id, polling_config=polling
                    )
                    if streams is not None:
                        streamed = await streams
        except (TimeoutError, PollingTimeout):
            if started:
                await self._kill(ref.sandbox_id, started[0])
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no result within {timeout:g}s") from None
        if result.exit_status is None:
            kind = await self._why_ended(ref.sandbox_id, Phase.EXEC)
            raise ProviderError(kind, f"devbox {ref.sandbox_id} ended during the command")
        if streamed is not None:
            return ExecResult(exit_code=result.exit_status, stdout=streamed[0], stderr=streamed[1])
        return ExecResult(exit_code=result.exit_status, stdout=result.stdout or "", stderr=result.stderr or "")

    async def exec_stream(
        self, ref: SandboxRef, argv: Sequence[str], timeout: float, on_output: Callable[[str], None] | None = None
    ) -> StreamedExec:
        """`execute_async`, both SSE streams read as the command writes (`stream_stdout_updates`,
        `stream_stderr_updates`), then `executions.await_completed` for the exit status."""
        clock = OutputClock(on_output)
        devboxes = self.sdk.devboxes
        started: list[str] = []
        try:
            async with asyncio.timeout(timeout + _EXEC_GRACE_S):
                execution = await devboxes.execute_async(ref.sandbox_id, command=shlex.join(argv))
                started.append(execution.execution_id)
                streams = self._stream(ref.sandbox_id, execution.execution_id, clock.seen)
                polling = PollingConfig(interval_seconds=1.0, max_attempts=10**6, timeout_seconds=timeout)
                result = await devboxes.executions.await_completed(
                    execution.execution_id, devbox_id=ref.sandbox_id, polling_config=polling
                )
                stdout, stderr = await streams
        except (TimeoutError, PollingTimeout):
            if started:
                await self._kill(ref.sandbox_id, started[0])
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no result within {timeout:g}s") from None
        if result.exit_status is None:
            kind = await self._why_ended(ref.sandbox_id, Phase.EXEC)
            raise ProviderError(kind, f"devbox {ref.sandbox_id} ended during the command")
        return clock.done(ExecResult(exit_code=result.exit_status, stdout=stdout, stderr=stderr))

    async def start_process(self, ref: SandboxRef, argv: Sequence[str]) -> str:
        """`execute_async`: the execution's id is the handle."""
        execution = await self.sdk.devboxes.execute_async(ref.sandbox_id, command=shlex.join(argv))
        return str(execution.execution_id)

    async def process_exit(self, ref: SandboxRef, handle: str) -> int | None:
        """`executions.retrieve`: the exit status once the execution completed (a devbox that ended under it:
        classified as a death during the command)."""
        execution = await self.sdk.devboxes.executions.retrieve(handle, devbox_id=ref.sandbox_id)
        if execution.status != "completed":
            return None
        if execution.exit_status is None:
            kind = await self._why_ended(ref.sandbox_id, Phase.EXEC)
            raise ProviderError(kind, f"devbox {ref.sandbox_id} ended during the background command")
        return int(execution.exit_status)

    def _stream(
        self, devbox_id: str, execution_id: str, seen: Callable[[str], None] | None = None
    ) -> asyncio.Future[tuple[str, str]]:
        """Read both SSE streams (the SDK's, reconnecting from the last offset) while the command runs."""
        executions = self.sdk.devboxes.executions

        async def read(which: str) -> str:
            method = executions.stream_stdout_updates if which == "stdout" else executions.stream_stderr_updates
            stream = await method(execution_id, devbox_id=devbox_id)
            parts: list[str] = []
            async for chunk in stream:
                if seen is not None:
                    seen(chunk.output)
                parts.append(chunk.output)
            return "".join(parts)

        async def both() -> tuple[str, str]:
            out, err = await asyncio.gather(read("stdout"), read("stderr"))
            return out, err

        return asyncio.ensure_future(both())

    async def _kill(self, devbox_id: str, execution_id: str) -> None:
        try:
            async with asyncio.timeout(_EXEC_GRACE_S):
                await self.sdk.devboxes.executions.kill(execution_id, devbox_id=devbox_id)
        except (RunloopError, TimeoutError):
            pass  # best effort: the devbox's shutdown ends it anyway

    async def terminate(self, ref: SandboxRef) -> None:
        try:
            await self.sdk.devboxes.shutdown(ref.sandbox_id)
        except NotFoundError:
            return  # already gone: terminate is idempotent

    async def _live(self) -> list[DevboxView]:
        found: list[DevboxView] = []
        for status in LIVE_STATUSES:
            async for devbox in self.sdk.devboxes.list(status=status, limit=100):  # type: ignore[arg-type]
                found.append(devbox)
        return found

    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        wanted = owner_labels(run_id, engine).items()
        return [
            SandboxRef(sandbox_id=devbox.id, provider=self.name, run_id=run_id, handle=devbox)
            for devbox in await self._live()
            if wanted <= (devbox.metadata or {}).items()
        ]

    async def list_all_owned(self) -> list[SandboxRef]:
        refs: list[SandboxRef] = []
        for devbox in await self._live():
            run_id = tagged_by_stampede(devbox.metadata or {})
            if run_id is not None:
                refs.append(SandboxRef(sandbox_id=devbox.id, provider=self.name, run_id=run_id, handle=devbox))
        return refs

    async def upload_file(self, ref: SandboxRef, path: str, data: bytes) -> None:
        """`devboxes.upload_file` (multipart; a relative path is the devbox user's home's)."""
        await self.sdk.devboxes.upload_file(ref.sandbox_id, path=path, file=(os.path.basename(path) or "file", data))

    async def download_file(self, ref: SandboxRef, path: str) -> bytes:
        try:
            response = await self.sdk.devboxes.download_file(ref.sandbox_id, path=path)
        except NotFoundError as exc:
            raise FileNotFoundError(f"no such file in the devbox: {path}") from exc
        return await response.read()

    async def snapshot(self, ref: SandboxRef) -> str:
        """`devboxes.snapshot_disk`; the name `create` takes back as `SandboxSpec.image`."""
        snap = await self.sdk.devboxes.snapshot_disk(ref.sandbox_id)
        return SNAPSHOT_PREFIX + snap.id

    def classify(self, exc: BaseException, phase: Phase | None = None) -> FailureKind:
        return classify_runloop(exc, phase)

    def versions(self) -> Mapping[str, str]:
        return {"runloop-api-client": sdk_version()}

    async def aclose(self) -> None:
        sdk, self._sdk = self._sdk, None
        if sdk is not None:
            await sdk.close()


# --- classification ----------------------------------------------------------------------------------


def classify_runloop(exc: BaseException, phase: Phase | None) -> FailureKind:
    """Every exception runloop-api-client 3.0.0 raises, onto the taxonomy (docs/vendors.md, Runloop)."""
    if isinstance(exc, ProviderError):
        return exc.kind
    if isinstance(exc, PollingTimeout):
        return classify_common(TimeoutError(), phase) if phase is not None else FailureKind.READY_TIMEOUT
    if isinstance(exc, APITimeoutError):
        return classify_common(TimeoutError(), phase)
    if isinstance(exc, APIConnectionError):
        return FailureKind.TRANSPORT
    if isinstance(exc, APIStatusError):
        return _status_error(exc, phase)
    if isinstance(exc, RunloopError):  # the SDK's own: a devbox that reached a terminal state while awaited
        message = str(exc)
        if "terminal state" in message:
            return gone_kind(phase) if phase is not Phase.CREATE else FailureKind.DIED_BEFORE_READY
        if "bearer_token" in message:
            return FailureKind.AUTH
        return vendor_error_kind(phase)
    if isinstance(exc, httpx.TimeoutException):
        return classify_common(TimeoutError(), phase)
    if isinstance(exc, httpx.HTTPError):
        return FailureKind.TRANSPORT
    return classify_common(exc, phase)


def _status_error(exc: APIStatusError, phase: Phase | None) -> FailureKind:
    message = str(exc).lower()
    creating = phase in (None, Phase.CREATE)
    if isinstance(exc, RateLimitError):
        if "concurrent" in message or "limit reached" in message:
            return FailureKind.QUOTA_EXHAUSTED  # the account's concurrent devbox limit
        return FailureKind.RATE_LIMITED
    if isinstance(exc, (AuthenticationError, PermissionDeniedError)):
        if "quota" in message or "limit" in message:
            return FailureKind.QUOTA_EXHAUSTED
        return FailureKind.AUTH
    if isinstance(exc, NotFoundError):
        if creating:
            return (
                FailureKind.IMAGE if ("snapshot" in message or "blueprint" in message) else FailureKind.INVALID_REQUEST
            )
        return gone_kind(phase)
    if isinstance(exc, (BadRequestError, ConflictError, UnprocessableEntityError)):
        if not creating and "not running" in message:
            return gone_kind(phase)
        if creating and ("blueprint" in message and ("fail" in message or "not built" in message)):
            return FailureKind.IMAGE
        return FailureKind.INVALID_REQUEST if creating else vendor_error_kind(phase)
    status = exc.status_code
    if status == 408 or status == 504:
        return classify_common(TimeoutError(), phase)
    if status == 503 and creating:
        return FailureKind.CAPACITY
    return vendor_error_kind(phase)
