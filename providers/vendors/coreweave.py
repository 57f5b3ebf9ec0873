"""The `coreweave` provider: CoreWeave Sandbox (Kubernetes pods on CoreWeave's runners) through its own SDK
(pinned: `cwsandbox==1.22.0`, the `[coreweave]` extra).

One module, like e2b.py: the SDK adaptation and the classification of that SDK's exceptions are one adapter's two
halves.

The SDK speaks gRPC (`coreweave.sandbox.v1.SandboxService`) from a background event loop of its own; every call
returns an `OperationRef` (or a `Process`) that is awaitable from any loop, so the adapter awaits them and never
blocks. A rollout is `Sandbox(container_image=, tags=["key=value", ...], max_lifetime_seconds=, resources=,
environment_variables=)` then `start()` (CreateSandbox: the sandbox is PENDING). Readiness is the SDK's own:
`await sandbox` polls GetSandbox through PENDING -> CREATING until RUNNING (or raises on FAILED / TERMINATED), at
0.2 s growing x1.5 to 2 s, so the poll window `wait_ready` reports is that schedule's interval at the time it
returned. Commands are `sandbox.exec(argv, timeout_seconds=)`: the SDK streams them (StreamExec: ready, output
chunks, exit); a non-zero exit is a result. `terminate` is `stop(missing_ok=True)` (DeleteSandbox, then a poll
to a terminal state), or `Sandbox.delete(id, missing_ok=True)` without a handle. Files are `write_file` /
`read_file`. A run's leftovers are `Sandbox.list(tags=[run label])`, each deleted.

Contract 9's steps: `exec_stream` is `sandbox.exec` with its `stdout`/`stderr` readers iterated as the exec stream
delivers; `start_process` is `sandbox.exec` not awaited (the SDK's `Process` kept here), `process_exit` its `poll`. No
snapshot (so no fork): the SDK's `snapshot` captures a file-system-snapshot mount the sandbox must have been created
with (FSS, an organization feature), restored through `file_system_snapshot` options rather than an image, and the
local plane does not serve it.

Where it talks, as whom: everything is passed per call, never put into the process environment. Without
`base_url`, the SDK's own configuration (`CWSANDBOX_BASE_URL`, else https://api.cwsandbox.com, and
`CWSANDBOX_API_KEY`); with `base_url` (`--base-url`, or `--local` for the local plane), that URL and `token` as
the API key (`authorization: Bearer`).

The SDK's SIGINT/SIGTERM handlers (which stop every sandbox it owns) are turned off, as its docs ask of an embedding
host: the harness owns the signals and cleans up by label; the SDK's atexit cleanup stays.

SDK behaviour kept as shipped: `data_plane_mode=auto` (a direct mTLS data plane per sandbox when the API offers
one, else the gateway; the local plane offers none and announces `data_plane_mode=gateway`, which skips the
per-sandbox key pair and CSR the SDK would make first); `create_retry_budget_seconds=0` (the SDK's default: a
capacity refusal fails the create at once, so throttling never hides inside create latency).

Options (`--provider-option K=V`; defaults in `CoreWeaveOptions`): `api_key`, `image` (the default container image,
python:3.11 as in the SDK), `data_plane_mode` (auto, gateway, direct), `request_timeout` (the SDK's 300 s),
`preflight_timeout`, `check_sdk` (on: refuse a cwsandbox other than the one this adapter and the local plane were
checked against, `SUPPORTED_SDK`). The spec's cpu and memory go as the container's limits; `network` is not sent
(egress is the runner profile's policy).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import grpc
from cwsandbox import (
    AuthHeaders,
    CWSandboxAuthenticationError,
    CWSandboxError,
    CWSandboxValidationError,
    ResourceOptions,
    Sandbox,
    SandboxCommandTimeoutError,
    SandboxExecutionError,
    SandboxFailedError,
    SandboxFileError,
    SandboxNotFoundError,
    SandboxNotRunningError,
    SandboxRequestTimeoutError,
    SandboxResourceExhaustedError,
    SandboxTerminatedError,
    SandboxTimeoutError,
    SandboxUnavailableError,
    disable_signal_handlers,
)

from providers.base import (
    ROLLOUT_LABEL,
    RUN_LABEL,
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
from providers.cancellation import cancellable
from providers.options import (
    Option,
    choice,
    declare,
    declared_options,
    declared_values,
    flag,
    number,
    parse_options,
    text,
)
from providers.output_clock import OutputClock
from providers.preflight import preflight_errors

SUPPORTED_SDK = "1.22.0"  # the `[coreweave]` extra's pin in pyproject.toml
DEFAULT_IMAGE = "python:3.11"  # the SDK's DEFAULT_CONTAINER_IMAGE
BASE_URL_ENV = "CWSANDBOX_BASE_URL"
DEFAULT_BASE_URL = "https://api.cwsandbox.com"
API_KEY_ENV = "CWSANDBOX_API_KEY"
# the SDK's status poll (cwsandbox/_defaults.py): 0.2 s, x1.5 per poll, at most 2 s
POLL_FIRST_S, POLL_FACTOR, POLL_MAX_S = 0.2, 1.5, 2.0
_EXEC_GRACE_S = 10.0  # past the SDK's own command deadline, before the adapter gives up on it
# AIP-193 reasons (cwsandbox._error_info) meaning no runner can take the sandbox now
_CAPACITY_REASONS = frozenset(
    {
        "CWSANDBOX_RUNNER_CAPACITY_EXHAUSTED",
        "CWSANDBOX_NO_SUITABLE_RUNNER",
        "CWSANDBOX_RUNNER_OVERLOADED",
        "CWSANDBOX_PLACEMENT_REJECTED",
        "CWSANDBOX_PLACEMENT_CONSTRAINT_UNSATISFIED",
        "CWSANDBOX_RUNNER_UNAVAILABLE",
    }
)
_QUOTA_WORDS = ("concurrent", "quota")  # the concurrent-sandbox quota's refusal (docs: limits-and-quotas)
_IMAGE_WORDS = ("imagepull", "errimagepull", "image pull", "pull image", "invalidimagename", "image_pull")


@dataclass(frozen=True, slots=True)
class CoreWeaveOptions:
    """Where the SDK connects, as whom, and how; built from option strings."""

    base_url: str | None  # None: the SDK's own (CWSANDBOX_BASE_URL, else its default)
    auth: AuthHeaders | None  # None: the SDK's own (CWSANDBOX_API_KEY)
    image: str = declare(DEFAULT_IMAGE, text)
    data_plane_mode: str = declare("auto", choice, "auto", "gateway", "direct")
    request_timeout_s: float = declare(300.0, number, key="request_timeout", positive=True)  # the SDK's own
    preflight_timeout_s: float = declare(30.0, number, key="preflight_timeout", positive=True)

    @property
    def where(self) -> str:
        return self.base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> CoreWeaveOptions:
        values = parse_options("coreweave", options, COREWEAVE_OPTIONS)
        installed = metadata.version("cwsandbox")
        if values["check_sdk"] and installed != SUPPORTED_SDK:
            raise ProviderConfigError(
                f"coreweave provider: checked against cwsandbox=={SUPPORTED_SDK}, found {installed}; "
                f"pip install 'cwsandbox=={SUPPORTED_SDK}' (or check_sdk=0 to try this one)"
            )
        base_url = (values["base_url"] or "").strip().rstrip("/") or None
        key = values["api_key"] or (values["token"] if base_url else None)
        if not key and not os.environ.get(API_KEY_ENV):
            raise ProviderConfigError(
                f"coreweave provider: no API key; set {API_KEY_ENV} (or --provider-option api_key=...), "
                "or use --local for the local CoreWeave Sandbox"
            )
        auth = AuthHeaders(headers={"Authorization": f"Bearer {key}"}, strategy="api_key") if key else None
        return cls(base_url=base_url, auth=auth, **declared_values(cls, values))


COREWEAVE_OPTIONS: dict[str, Option] = {
    "base_url": text(),  # --base-url / --local: the API URL; none: the SDK's own configuration
    "token": text(),  # the API key for base_url (--token, STAMPEDE_TOKEN)
    "api_key": text(),
    "check_sdk": flag(True),
    **declared_options(CoreWeaveOptions),
}
"""The coreweave provider's options (`--provider-option K=V`, the module's docstring): any other key is refused."""


def label_tags(labels: Mapping[str, str]) -> list[str]:
    """Stampede's labels as CoreWeave tags (strings; a list filter matches sandboxes carrying every tag)."""
    return [f"{key}={value}" for key, value in labels.items()]


def labels_of(tags: Sequence[str]) -> dict[str, str]:
    return dict(tag.partition("=")[::2] for tag in tags if "=" in tag)


def poll_schedule(elapsed_s: float) -> tuple[float, int]:
    """The SDK's poll schedule replayed over `elapsed_s` of waiting: (the interval before its last look, at most
    how long RUNNING went unseen; the looks made). The SDK counts neither, so both are the schedule's, not measured
    (an answer's own latency stretches each interval a little)."""
    interval, spent, polls = POLL_FIRST_S, 0.0, 1
    while spent + interval < elapsed_s:
        spent += interval
        polls += 1
        interval = min(interval * POLL_FACTOR, POLL_MAX_S)
    return interval, polls


class CoreWeaveProvider(Provider):
    """CoreWeave Sandbox through `cwsandbox.Sandbox`."""

    name = "coreweave"

    def __init__(self, options: CoreWeaveOptions) -> None:
        self.options = options
        self._processes: dict[str, Any] = {}  # start_process's key -> the SDK's Process
        self._started = 0
        with contextlib.suppress(RuntimeError):  # already installed by the user's own code: theirs stands
            disable_signal_handlers()  # the harness owns SIGINT/SIGTERM (and cleans up by label); atexit stays

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> CoreWeaveProvider:
        return cls(CoreWeaveOptions.from_mapping(options))

    def _where(self) -> dict[str, Any]:
        where: dict[str, Any] = {}
        if self.options.base_url is not None:
            where["base_url"] = self.options.base_url
        if self.options.auth is not None:
            where["auth"] = self.options.auth
        return where

    # --- the contract ----------------------------------------------------------------------------------

    async def preflight(self) -> None:
        async with preflight_errors(
            self.options.where,
            self.classify,
            timeout_s=self.options.preflight_timeout_s,
            refused=lambda exc: "UNAUTHENTICATED" if isinstance(exc, CWSandboxAuthenticationError) else None,
        ):
            await Sandbox.list(
                tags=[f"{RUN_LABEL}=preflight"], timeout_seconds=self.options.preflight_timeout_s, **self._where()
            )

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        quantities = {"cpu": f"{spec.cpu:g}", "memory": f"{spec.memory_mb}Mi"}
        sandbox = Sandbox(
            container_image=spec.image or self.options.image,
            tags=label_tags(spec.tags()),
            max_lifetime_seconds=None if math.isinf(spec.lifetime_s) else max(1, math.ceil(spec.lifetime_s)),
            resources=ResourceOptions(requests=dict(quantities), limits=quantities),
            environment_variables=dict(spec.env) or None,
            request_timeout_seconds=self.options.request_timeout_s,
            data_plane_mode=self.options.data_plane_mode,
            **self._where(),
        )
        await cancellable(sandbox.start())
        return SandboxRef(
            sandbox_id=str(sandbox.sandbox_id),
            provider=self.name,
            run_id=spec.run_id,
            rollout_id=spec.rollout_id,
            handle=sandbox,
        )

    async def _sandbox(self, ref: SandboxRef) -> Sandbox:
        if isinstance(ref.handle, Sandbox):
            return ref.handle
        found: Sandbox = await cancellable(Sandbox.from_id(ref.sandbox_id, **self._where()))
        return found

    async def wait_ready(self, ref: SandboxRef, timeout: float) -> ReadyObservation:
        """`await sandbox`: the SDK's own poll until RUNNING (FAILED / TERMINATED raise)."""
        sandbox = await self._sandbox(ref)
        started = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(timeout):
                await cancellable(_running(sandbox))
        except SandboxFailedError as exc:
            if any(word in str(exc).lower() for word in _IMAGE_WORDS):  # the pod's image pull failed: the pull step
                raise ProviderError(FailureKind.IMAGE, str(exc), phase=Phase.PULL) from exc
            raise
        elapsed = asyncio.get_running_loop().time() - started
        window, polls = poll_schedule(elapsed)
        return ReadyObservation(poll_window_s=min(window, elapsed), polls=polls)

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        sandbox = await self._sandbox(ref)
        try:
            async with asyncio.timeout(timeout + _EXEC_GRACE_S):
                result = await cancellable(_result(sandbox.exec(list(argv), timeout_seconds=timeout)))
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no answer within {timeout + _EXEC_GRACE_S:g}s") from None
        return ExecResult(exit_code=result.returncode, stdout=result.stdout, stderr=result.stderr)

    async def exec_stream(
        self, ref: SandboxRef, argv: Sequence[str], timeout: float, on_output: Callable[[str], None] | None = None
    ) -> StreamedExec:
        """`sandbox.exec`, its `stdout` and `stderr` readers iterated as the exec stream delivers, then its result."""
        sandbox = await self._sandbox(ref)
        clock = OutputClock(on_output)

        async def read(reader: Any) -> str:
            parts: list[str] = []
            async for chunk in reader:
                text = chunk.decode(errors="replace") if isinstance(chunk, bytes) else str(chunk)
                clock.seen(text)
                parts.append(text)
            return "".join(parts)

        try:
            async with asyncio.timeout(timeout + _EXEC_GRACE_S):
                process = sandbox.exec(list(argv), timeout_seconds=timeout)
                stdout, stderr = await asyncio.gather(read(process.stdout), read(process.stderr))
                result = await cancellable(_result(process))
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no answer within {timeout + _EXEC_GRACE_S:g}s") from None
        return clock.done(ExecResult(exit_code=result.returncode, stdout=stdout, stderr=stderr))

    async def start_process(self, ref: SandboxRef, argv: Sequence[str]) -> str:
        """`sandbox.exec` not awaited: the SDK's `Process` is kept here, `process_exit` is its `poll`."""
        sandbox = await self._sandbox(ref)
        process = sandbox.exec(list(argv))
        self._started += 1
        key = f"{ref.sandbox_id}:{self._started}"
        self._processes[key] = process
        return key

    async def process_exit(self, ref: SandboxRef, handle: str) -> int | None:
        """The `Process`'s exit code once its stream ended (an exec stream that failed raises its error)."""
        process = self._processes.get(handle)
        if process is None:
            raise ProviderError(FailureKind.EXEC_ERROR, f"no background process {handle} started by this provider")
        if process.poll() is None:
            try:
                process.wait(timeout=0)  # ended without an exit code: its stream's error is raised here
            except concurrent.futures.TimeoutError:
                return None  # still running
        self._processes.pop(handle, None)
        return int(process.wait(timeout=0))

    async def upload_file(self, ref: SandboxRef, path: str, data: bytes) -> None:
        sandbox = await self._sandbox(ref)
        await cancellable(sandbox.write_file(path, bytes(data)))

    async def download_file(self, ref: SandboxRef, path: str) -> bytes:
        sandbox = await self._sandbox(ref)
        try:
            data = await cancellable(sandbox.read_file(path))
        except SandboxFileError as exc:
            if exc.reason == "CWSANDBOX_FILE_NOT_FOUND":
                raise FileNotFoundError(f"no such file in the sandbox: {path}") from exc
            raise
        return bytes(data)

    async def terminate(self, ref: SandboxRef) -> None:
        if isinstance(ref.handle, Sandbox):
            await cancellable(ref.handle.stop(missing_ok=True))
            return
        await cancellable(Sandbox.delete(ref.sandbox_id, missing_ok=True, **self._where()))

    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        return await self._listed(label_tags(owner_labels(run_id, engine)))

    async def list_all_owned(self) -> list[SandboxRef]:
        """Every sandbox whose tags carry a run label (CoreWeave filters by whole tags only: we filter)."""
        return await self._listed([])

    async def _listed(self, tags: list[str]) -> list[SandboxRef]:
        found = await cancellable(Sandbox.list(tags=tags or None, **self._where()))
        refs: list[SandboxRef] = []
        for sandbox in found:
            labels = labels_of(sandbox.tags)
            run_id = tagged_by_stampede(labels)
            if run_id is not None and sandbox.sandbox_id:
                refs.append(SandboxRef(sandbox.sandbox_id, self.name, run_id, rollout_id=labels.get(ROLLOUT_LABEL, "")))
        return refs

    def classify(self, exc: BaseException, phase: Phase | None = None) -> FailureKind:
        return classify_coreweave(exc, phase)

    def versions(self) -> Mapping[str, str]:
        return {"cwsandbox": metadata.version("cwsandbox")}


async def _running(sandbox: Sandbox) -> None:
    await sandbox


async def _result(process: Any) -> Any:
    return await process


# --- classification ----------------------------------------------------------------------------------


def classify_coreweave(exc: BaseException, phase: Phase | None) -> FailureKind:
    """Every exception cwsandbox 1.22.0 raises, onto the taxonomy (docs/vendors.md, CoreWeave Sandbox)."""
    if isinstance(exc, ProviderError):
        return exc.kind
    if isinstance(exc, CWSandboxAuthenticationError):  # UNAUTHENTICATED / PERMISSION_DENIED, or no credentials
        return FailureKind.AUTH
    reason = getattr(exc, "reason", None)
    text = str(exc).lower()
    if isinstance(exc, SandboxResourceExhaustedError):  # RESOURCE_EXHAUSTED
        if reason in _CAPACITY_REASONS:
            return FailureKind.CAPACITY
        return FailureKind.QUOTA_EXHAUSTED if any(word in text for word in _QUOTA_WORDS) else FailureKind.RATE_LIMITED
    if isinstance(exc, CWSandboxValidationError):  # INVALID_ARGUMENT (a resource ceiling too)
        return FailureKind.INVALID_REQUEST
    if isinstance(exc, SandboxFailedError):  # FAILED: the status reason says why
        return _failed_kind(text, phase)
    if isinstance(exc, (SandboxTerminatedError, SandboxNotFoundError)):  # stopped, lifetime over, or gone
        return gone_kind(phase)
    if isinstance(exc, SandboxUnavailableError):  # UNAVAILABLE
        if reason in _CAPACITY_REASONS and phase in (None, Phase.CREATE):
            return FailureKind.CAPACITY
        return FailureKind.TRANSPORT if reason is None else vendor_error_kind(phase)
    if isinstance(exc, SandboxCommandTimeoutError):
        return FailureKind.EXEC_TIMEOUT
    if isinstance(exc, (SandboxRequestTimeoutError, SandboxTimeoutError)):  # DEADLINE_EXCEEDED, or wait()'s own
        return _timed_out(phase)
    if isinstance(exc, SandboxNotRunningError):  # CANCELLED, or used after stop
        return gone_kind(phase)
    if isinstance(exc, SandboxExecutionError):  # a terminal ExecStreamError
        return _stream_error_kind(text, phase)
    if isinstance(exc, CWSandboxError):
        if "failed_precondition" in text or "not running" in text:
            return gone_kind(phase)
        return vendor_error_kind(phase)
    if isinstance(exc, grpc.RpcError):  # a raw status the SDK let through
        return _grpc_kind(exc, phase)
    return classify_common(exc, phase)


def _failed_kind(text: str, phase: Phase | None) -> FailureKind:
    if any(word in text for word in _IMAGE_WORDS):
        return FailureKind.IMAGE
    if "oom" in text:
        return FailureKind.OOM
    if "timeout" in text or "did not start" in text:
        return FailureKind.READY_TIMEOUT
    return FailureKind.DIED_DURING_EXEC if phase is Phase.EXEC else FailureKind.DIED_BEFORE_READY


def _stream_error_kind(text: str, phase: Phase | None) -> FailureKind:
    if "oom" in text:
        return FailureKind.OOM
    if "deadline" in text or "timed out" in text:
        return FailureKind.EXEC_TIMEOUT
    if "died" in text or "aborted" in text or "terminated" in text:
        return gone_kind(phase)
    return FailureKind.EXEC_ERROR if phase in (None, Phase.EXEC) else vendor_error_kind(phase)


def _timed_out(phase: Phase | None) -> FailureKind:
    if phase is Phase.EXEC:
        return FailureKind.EXEC_TIMEOUT
    if phase is Phase.TERMINATE:
        return FailureKind.TRANSPORT
    if phase in (Phase.UPLOAD, Phase.DOWNLOAD, Phase.SNAPSHOT):
        return vendor_error_kind(phase)
    return FailureKind.READY_TIMEOUT


def _grpc_kind(exc: grpc.RpcError, phase: Phase | None) -> FailureKind:
    code = exc.code() if hasattr(exc, "code") else None
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return FailureKind.AUTH
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        return FailureKind.RATE_LIMITED
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return _timed_out(phase)
    if code is grpc.StatusCode.UNAVAILABLE:
        return FailureKind.TRANSPORT
    if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.CANCELLED, grpc.StatusCode.ABORTED):
        return gone_kind(phase)
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.OUT_OF_RANGE):
        return FailureKind.INVALID_REQUEST
    return vendor_error_kind(phase)
