"""The `vercel` provider: Vercel Sandbox (Firecracker microVMs) through Vercel's own SDK (pinned:
`vercel-sandbox==0.10.0`).

A rollout is `SandboxClient.create_sandbox(image, resources=SandboxResources(vcpus), execution_time_limit,
env, tags=spec.tags())`: the SDK posts `/v3/sandboxes` and polls `GET /v2/sandboxes/{name}` every 0.5 s until the
sandbox is `running` (a terminal status raises `SandboxTerminalStateError`), so readiness is create's answer, as
the SDK defines it: `wait_ready` looks at nothing (`ReadyObservation(poll_window_s=0, polls=0)`). Commands are
`Sandbox.run_process(argv[0], argv[1:], capture_output=True, kill_after=...)`: one request whose answer streams
NDJSON (the command, its stdout/stderr records as they come, its end with the exit code). `terminate` is
`Sandbox.destroy()` (the sandbox's session stops and its name is freed; a 404 means already gone); a run's
leftovers are found with `query_sandboxes(SandboxQueryByCreatedAt(tag=TagFilter(RUN_LABEL, run_id)))` (one tag
filter a query, so the engine's is checked here), those whose session ended (stopped, failed, aborted: a fork
copy that failed to boot is listed until destroyed, holding nothing) left out, and destroyed one by one. Files:
`fs.write_bytes` (a gzip tar to `fs/write`) and `fs.read_bytes` (`fs/read`); snapshots: `Sandbox.snapshot()`, whose
id `create` takes back through `SandboxSpec.image` as `SnapshotSource` (Vercel stops the sandbox it snapshots).

Contract 9's steps: `exec_stream` is `create_process` with its stdout and stderr readers iterated as the log stream
routes them, then `wait`; `start_process` is `create_process` with output discarded (the process id is the handle),
`process_exit` `get_process`'s return code; a fork is the contract's default, `count` creates from `snapshot`'s
snapshot (Vercel has no multi-create).

Where it talks, as whom: `SandboxServiceOptions(base_url=..., credentials_factory=...)`, per client, never the
process environment. Without `base_url` the SDK's own (`https://vercel.com/api`) and its own credentials
(`VERCEL_TOKEN`, `VERCEL_TEAM_ID`, `VERCEL_PROJECT_ID`, or a `VERCEL_OIDC_TOKEN`); with `base_url` (`--base-url`,
or `--local` for the local Vercel Sandbox) that server's `/api`, `token` as the bearer token and the `team_id` /
`project_id` options (by default the local plane's). `VERCEL_SANDBOX_TELEMETRY_DISABLED` is set for the process: the SDK would otherwise probe
for a coding agent on every client it builds (nothing leaves the machine either way).

Capacity is counted by Vercel in vCPUs allocated per time (Hobby 40 vCPU per 10 minutes, Pro 400 vCPU a minute):
a sandbox asks `vcpus` = the spec's cores rounded up (option `vcpus` overrides), so the size a rollout asks is
what it spends. The SDK retries nothing: a 429 is the create's answer. Taxonomy (`classify_vercel`): the create
rate and the vCPU allocation limit (429 `vcpu_allocation_limit_exceeded`) are `rate_limited` (waiting cures both;
no sandbox has to end: the harness has no kind of its own for a vCPU rate, and `quota_exhausted` means a cap that
only ending sandboxes lifts), the concurrent-sandbox cap `quota_exhausted`, 503 `capacity`, 401/403 `auth`, 400/422
`invalid_request`, a 404 for the image at create `image`, a create answered 504 or past the create budget
`ready_timeout`, a session that ended before it ran (`failed`, `aborted`) `died_before_ready`, a stream's
`sandbox_stopped` mid-command `died_during_exec`, a command past its timeout `exec_timeout`.

The SDK's own behaviour is kept: it retries nothing, and every call is its own (its models, its exceptions). Its
wire is not: with `api_transport=http1` (the default) the SDK's httpx2 client sends over
`providers/http1_transport_httpx2.py`, the keep-alive HTTP/1.1 client the `stub` provider uses, except what streams
a command's output (`.../logs`, and `cmd` with `logs=true`: `run_process`), which stays on the SDK's own httpcore2
transport so output arrives as it is sent. Why: through the SDK's transport every create, status look and destroy
walked httpcore2's pool (100 connections; a create's polls queue for one at 960 in flight) and the client spent
2.68-3.12 CPU-ms a lifecycle against 2.17-2.43 over this (2026-12-06, `bench/bench_sdk_overhead.py --vendors
vercel`, 64 and 960 in flight; bench/README.md). `api_transport=httpx` is the SDK's wire as shipped, on
`max_connections` connections (the SDK's 100 by default, through its documented `httpx_client_factory`); on either
wire the streaming requests use that pool. Measured on the local plane before the keep-alive client, a 960-wide
burst with 1000 httpcore2 connections stalled the engine's loop 2.2-2.5 s opening them, so the default width stays
the SDK's.

Options (`--provider-option K=V`; defaults in `VercelOptions`): `team_id`, `project_id`, `image` (a rollout's image
when the spec names none; none: Vercel's default), `vcpus`, `api_transport`, `max_connections`, `create_timeout`,
`preflight_timeout`.
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from importlib import metadata
from typing import Any

import httpx2
from vercel._internal.core.http import DEFAULT_TIMEOUT
from vercel.sandbox import (
    Sandbox,
    SandboxApiError,
    SandboxClient,
    SandboxCredentials,
    SandboxCredentialsError,
    SandboxError,
    SandboxPathNotFoundError,
    SandboxQueryByCreatedAt,
    SandboxResources,
    SandboxServiceOptions,
    SandboxStatus,
    SandboxStreamError,
    SandboxTerminalStateError,
    SandboxTimeoutError,
    SnapshotSource,
    TagFilter,
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
from providers.http1_transport_httpx2 import Http1Httpx2Transport
from providers.options import (
    Option,
    choice,
    declare,
    declared_options,
    declared_values,
    integer,
    number,
    parse_options,
    text,
)
from providers.output_clock import OutputClock
from providers.preflight import preflight_errors

SDK_VERSION = "0.10.0"  # the `[vercel]` extra's pin: its wire and exceptions were read for this release
API_PATH = "/api"  # Vercel's API base is https://vercel.com/api; a `base_url` without it gets it appended
MAX_TIMEOUT_S = 5 * 3600  # Vercel's longest sandbox life (Pro/Enterprise); an unbounded lifetime asks for this
LIST_PAGE = 50  # the SDK allows 1..50 a page
SNAPSHOT_PREFIX = "snap_"  # Vercel's snapshot ids: a spec image so named is a snapshot to start from
SDK_MAX_CONNECTIONS = 100  # the SDK's own pool when `max_connections` is not given
_CONNECT_S = 10.0  # the keep-alive client's connect deadline (a request's own deadline is the SDK's timeout)
_EXEC_GRACE_S = 10.0  # past the command's own deadline, before the vendor is asked to kill it
_VCPU_LIMIT = "vcpu_allocation_limit_exceeded"
_QUOTA_CODES = frozenset({"concurrent_sandboxes_limit_exceeded", "concurrency_limit_exceeded"})
_TELEMETRY_ENV = "VERCEL_SANDBOX_TELEMETRY_DISABLED"
ENDED = frozenset({SandboxStatus.STOPPED, SandboxStatus.FAILED, SandboxStatus.ABORTED})
"""Statuses in which a sandbox holds nothing (the SDK's own terminal set, which its create raises on): the query
still lists such a sandbox by name until it is destroyed, but it is no leftover (a fork copy that failed to boot)."""
LOCAL_TEAM, LOCAL_PROJECT = "team_stampede", "prj_stampede"
"""With `base_url` and no team or project given: the local Vercel Sandbox's own (its `serve` also announces them)."""


@dataclass(frozen=True, slots=True)
class VercelOptions:
    """Where the SDK connects, as whom, and what a sandbox asks for; built from option strings."""

    base_url: str | None  # the SDK's base URL (ends in /api); None: the SDK's own
    credentials: SandboxCredentials | None  # None: the SDK's own resolution (VERCEL_* or an OIDC token)
    image: str | None = declare(None, text)
    vcpus: int | None = declare(None, integer, minimum=1)  # None: the spec's cores, rounded up
    # the API's wire: `http1` (providers/http1_transport_httpx2.py; what streams stays on httpcore2) or `httpx`
    api_transport: str = declare("http1", choice, "http1", "httpx")
    max_connections: int | None = declare(None, integer, minimum=1)  # None: the SDK's own pool (100)
    create_timeout_s: float = declare(300.0, number, key="create_timeout", positive=True)  # the harness's budget
    preflight_timeout_s: float = declare(30.0, number, key="preflight_timeout", positive=True)

    @property
    def where(self) -> str:
        return self.base_url or "https://vercel.com/api"

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> VercelOptions:
        values = parse_options("vercel", options, VERCEL_OPTIONS)
        base = (values["base_url"] or "").strip().rstrip("/") or None
        if base is not None and not base.endswith(API_PATH):
            base += API_PATH
        token = values["token"] or os.environ.get("VERCEL_TOKEN")
        team = values["team_id"] or os.environ.get("VERCEL_TEAM_ID") or (LOCAL_TEAM if base else None)
        project = values["project_id"] or os.environ.get("VERCEL_PROJECT_ID") or (LOCAL_PROJECT if base else None)
        credentials = None
        if token and team and project:
            credentials = SandboxCredentials(token=token, team_id=team, project_id=project)
        elif base is not None or not os.environ.get("VERCEL_OIDC_TOKEN"):
            missing = [n for n, v in (("token", token), ("team_id", team), ("project_id", project)) if not v]
            raise ProviderConfigError(
                f"vercel provider: no {', '.join(missing)}; set VERCEL_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID "
                "(or --provider-option team_id=... project_id=...), or use --local for the local Vercel Sandbox"
            )
        return cls(base_url=base, credentials=credentials, **declared_values(cls, values))


VERCEL_OPTIONS: dict[str, Option] = {
    "base_url": text(),  # --base-url / --local: the API's server; none: the SDK's own
    "token": text(),  # the bearer token (--token, STAMPEDE_TOKEN); none: VERCEL_TOKEN
    "team_id": text(),
    "project_id": text(),
    **declared_options(VercelOptions),
}
"""The vercel provider's options (`--provider-option K=V`, the module's docstring): any other key is refused."""


def streams_output(request: httpx2.Request) -> bool:
    """A command's output as it comes (`.../logs`, or `cmd` with `logs=true`): the SDK's transport, not the
    keep-alive client, which hands an answer over whole."""
    return request.url.path.endswith("/logs") or request.url.params.get("logs") == "true"


def execution_time_limit(lifetime_s: float) -> timedelta:
    """Vercel's sandbox timeout for a spec's lifetime (whole seconds, at most Vercel's longest)."""
    if math.isinf(lifetime_s):
        return timedelta(seconds=MAX_TIMEOUT_S)
    return timedelta(seconds=max(1, min(MAX_TIMEOUT_S, math.ceil(lifetime_s))))


class VercelProvider(Provider):
    """Vercel Sandbox through `vercel.sandbox.SandboxClient`."""

    name = "vercel"

    def __init__(self, options: VercelOptions) -> None:
        self.options = options
        os.environ.setdefault(_TELEMETRY_ENV, "1")
        self._client: SandboxClient | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> VercelProvider:
        return cls(VercelOptions.from_mapping(options))

    def _sdk(self) -> SandboxClient:
        """One client (its connection pool) for the adapter's life, built on first use inside the loop."""
        if self._client is None:
            credentials = self.options.credentials

            async def given() -> SandboxCredentials:
                assert credentials is not None
                return credentials

            width = self.options.max_connections or SDK_MAX_CONNECTIONS
            http1 = self.options.api_transport == "http1"

            def client() -> httpx2.AsyncClient:
                """The SDK's own client (its timeout, HTTP/1.1), on `width` connections and, with `http1`, on the
                keep-alive client for what does not stream."""
                pool = httpx2.AsyncHTTPTransport(limits=httpx2.Limits(max_connections=width))
                wire = Http1Httpx2Transport(_CONNECT_S, pool, streams=streams_output) if http1 else pool
                return httpx2.AsyncClient(timeout=httpx2.Timeout(DEFAULT_TIMEOUT.total_seconds()), transport=wire)

            self._client = SandboxClient.create(
                options=SandboxServiceOptions(
                    base_url=self.options.base_url,
                    credentials_factory=given if credentials is not None else None,
                ),
                httpx_client_factory=client if http1 or self.options.max_connections is not None else None,
            )
        return self._client

    # --- the contract ----------------------------------------------------------------------------------

    async def preflight(self) -> None:
        async with preflight_errors(
            self.options.where,
            self.classify,
            timeout_s=self.options.preflight_timeout_s,
            refused=lambda exc: (
                f"HTTP {exc.status_code}"
                if isinstance(exc, SandboxApiError) and exc.status_code in (401, 403)
                else None
            ),
        ):
            pages = self._sdk().query_sandboxes(page_size=1)
            async for _ in pages:
                break

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        image = spec.image or self.options.image
        source = None
        if image is not None and image.startswith(SNAPSHOT_PREFIX):
            source, image = SnapshotSource(snapshot_id=image), None
        vcpus = self.options.vcpus or max(1, math.ceil(spec.cpu))
        try:
            async with asyncio.timeout(self.options.create_timeout_s):
                sandbox = await cancellable(
                    self._sdk().create_sandbox(
                        image=image,
                        source=source,
                        resources=SandboxResources(vcpus=vcpus),
                        execution_time_limit=execution_time_limit(spec.lifetime_s),
                        env=dict(spec.env) or None,
                        tags=spec.tags(),
                    )
                )
        except TimeoutError:
            raise ProviderError(
                FailureKind.READY_TIMEOUT, f"not running within the create budget {self.options.create_timeout_s:g}s"
            ) from None
        return SandboxRef(
            sandbox_id=sandbox.name,
            provider=self.name,
            run_id=spec.run_id,
            rollout_id=spec.rollout_id,
            handle=sandbox,
        )

    async def wait_ready(self, ref: SandboxRef, timeout: float) -> ReadyObservation:
        """Nothing to wait for: the SDK's create returned once the sandbox ran. No look was made here."""
        return ReadyObservation(poll_window_s=0.0, polls=0)

    async def _sandbox(self, ref: SandboxRef) -> Sandbox:
        if isinstance(ref.handle, Sandbox):
            return ref.handle
        found: Sandbox = await cancellable(self._sdk().get_sandbox(name=ref.sandbox_id))
        return found

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        sandbox = await self._sandbox(ref)
        if not argv:
            raise ProviderError(FailureKind.INVALID_REQUEST, "an empty command")
        try:
            async with asyncio.timeout(timeout):
                result = await cancellable(
                    sandbox.run_process(
                        argv[0], list(argv[1:]), capture_output=True, kill_after=timeout + _EXEC_GRACE_S
                    )
                )
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no end within {timeout:g}s") from None
        return ExecResult(exit_code=int(result.returncode), stdout=result.stdout or "", stderr=result.stderr or "")

    async def exec_stream(
        self, ref: SandboxRef, argv: Sequence[str], timeout: float, on_output: Callable[[str], None] | None = None
    ) -> StreamedExec:
        """`create_process` (detached), its stdout and stderr readers iterated as the log stream routes them, then
        `wait` for the exit code."""
        sandbox = await self._sandbox(ref)
        if not argv:
            raise ProviderError(FailureKind.INVALID_REQUEST, "an empty command")
        clock = OutputClock(on_output)

        async def read(reader: Any) -> str:
            parts: list[str] = []
            async for chunk in reader:
                clock.seen(chunk)
                parts.append(chunk)
            return "".join(parts)

        try:
            async with asyncio.timeout(timeout):
                process = await cancellable(
                    sandbox.create_process(argv[0], list(argv[1:]), kill_after=timeout + _EXEC_GRACE_S)
                )
                stdout, stderr = await asyncio.gather(read(process.stdout), read(process.stderr))
                code = await cancellable(process.wait())
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no end within {timeout:g}s") from None
        return clock.done(ExecResult(exit_code=int(code), stdout=stdout, stderr=stderr))

    async def start_process(self, ref: SandboxRef, argv: Sequence[str]) -> str:
        """`create_process` with its output discarded: the process id is the handle (`get_process` finds it)."""
        sandbox = await self._sandbox(ref)
        if not argv:
            raise ProviderError(FailureKind.INVALID_REQUEST, "an empty command")
        process = await cancellable(
            sandbox.create_process(argv[0], list(argv[1:]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
        return str(process.id)

    async def process_exit(self, ref: SandboxRef, handle: str) -> int | None:
        """`get_process`: its return code once it exited."""
        sandbox = await self._sandbox(ref)
        process = await cancellable(sandbox.get_process(handle))
        code = process.returncode
        return None if code is None else int(code)

    async def upload_file(self, ref: SandboxRef, path: str, data: bytes) -> None:
        """`fs.write_bytes` (a gzip tar to `fs/write`; a relative path is the sandbox's working directory's)."""
        sandbox = await self._sandbox(ref)
        await cancellable(sandbox.fs.write_bytes(path, bytes(data)))

    async def download_file(self, ref: SandboxRef, path: str) -> bytes:
        sandbox = await self._sandbox(ref)
        try:
            data = await cancellable(sandbox.fs.read_bytes(path))
        except SandboxPathNotFoundError as exc:
            raise FileNotFoundError(f"no such file in the sandbox: {path}") from exc
        return bytes(data)

    async def snapshot(self, ref: SandboxRef) -> str:
        """`Sandbox.snapshot()`: its id is an image `create` starts from (Vercel stops the sandbox it snapshots)."""
        sandbox = await self._sandbox(ref)
        snap = await cancellable(sandbox.snapshot())
        return str(snap.id)

    async def terminate(self, ref: SandboxRef) -> None:
        try:
            sandbox = await self._sandbox(ref)
            await cancellable(sandbox.destroy())
        except SandboxApiError as exc:
            if exc.status_code != 404:  # 404: already destroyed
                raise

    async def _listed(self, run_id: str | None) -> list[tuple[str, Mapping[str, str]]]:
        """Named sandboxes (of the run, when given) whose session has not ended (`ENDED`): what still holds."""
        tag = None if run_id is None else TagFilter(key=RUN_LABEL, value=run_id)
        pages = self._sdk().query_sandboxes(query=SandboxQueryByCreatedAt(tag=tag), page_size=LIST_PAGE)
        found: list[tuple[str, Mapping[str, str]]] = []
        async for sandbox in pages:
            if sandbox.status not in ENDED:
                found.append((sandbox.name, sandbox.tags or {}))
        return found

    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        wanted = owner_labels(run_id, engine)
        return [
            SandboxRef(name, self.name, run_id, rollout_id=tags.get(ROLLOUT_LABEL, ""))
            for name, tags in await cancellable(self._listed(run_id))
            if wanted.items() <= dict(tags).items()
        ]

    async def list_all_owned(self) -> list[SandboxRef]:
        """Every sandbox whose tags carry a run label (Vercel filters by one exact tag only: we filter)."""
        refs: list[SandboxRef] = []
        for name, tags in await cancellable(self._listed(None)):
            run_id = tagged_by_stampede(tags)
            if run_id is not None:
                refs.append(SandboxRef(name, self.name, run_id, rollout_id=tags.get(ROLLOUT_LABEL, "")))
        return refs

    def classify(self, exc: BaseException, phase: Phase | None = None) -> FailureKind:
        return classify_vercel(exc, phase)

    def versions(self) -> Mapping[str, str]:
        return {"vercel-sandbox": metadata.version("vercel-sandbox")}

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()


# --- classification ----------------------------------------------------------------------------------


def classify_vercel(exc: BaseException, phase: Phase | None) -> FailureKind:
    """Every exception vercel-sandbox 0.10.0 raises, onto the taxonomy (the module's docstring)."""
    if isinstance(exc, ProviderError):
        return exc.kind
    if isinstance(exc, SandboxApiError):
        return _status_kind(exc.status_code, exc.code, str(exc), phase)
    if isinstance(exc, SandboxTerminalStateError):  # the session failed or was stopped before it ran
        return FailureKind.DIED_BEFORE_READY
    if isinstance(exc, SandboxStreamError):  # in-band on a command's stream
        if exc.code in ("sandbox_stopped", "sandbox_stopping", "sandbox_snapshotting"):
            return gone_kind(phase)
        return vendor_error_kind(phase)
    if isinstance(exc, SandboxCredentialsError):
        return FailureKind.AUTH
    if isinstance(exc, SandboxTimeoutError):
        return _timed_out(phase)
    if isinstance(exc, httpx2.TimeoutException) and not isinstance(exc, httpx2.ConnectTimeout):
        return _timed_out(phase)
    if isinstance(exc, httpx2.TransportError):
        return FailureKind.TRANSPORT
    if isinstance(exc, SandboxError):  # a malformed answer, a bad handle: the vendor's error, by phase
        return vendor_error_kind(phase)
    return classify_common(exc, phase)


def _timed_out(phase: Phase | None) -> FailureKind:
    if phase is Phase.EXEC:
        return FailureKind.EXEC_TIMEOUT
    if phase is Phase.TERMINATE:
        return FailureKind.TRANSPORT
    if phase in (Phase.UPLOAD, Phase.DOWNLOAD, Phase.SNAPSHOT):
        return vendor_error_kind(phase)
    return FailureKind.READY_TIMEOUT  # create (which waits for the boot), ready, pull or a fork's boot


def _status_kind(status: int, code: str | None, message: str, phase: Phase | None) -> FailureKind:
    """A `SandboxApiError`: the API's HTTP status and its `error.code`."""
    if status == 429:
        return FailureKind.QUOTA_EXHAUSTED if code in _QUOTA_CODES else FailureKind.RATE_LIMITED
    if status in (401, 403):
        return FailureKind.AUTH
    if status in (400, 409, 422):
        return FailureKind.INVALID_REQUEST
    if status == 503 and phase in (None, Phase.CREATE):
        return FailureKind.CAPACITY
    if status == 504 and phase in (None, Phase.CREATE, Phase.READY):
        return FailureKind.READY_TIMEOUT
    if status == 404 and phase in (None, Phase.CREATE) and "image" in message.lower():
        return FailureKind.IMAGE
    if status in (404, 410):
        return gone_kind(phase)
    if status in (502, 504) and phase is Phase.TERMINATE:
        return FailureKind.TRANSPORT
    return vendor_error_kind(phase)
