"""The `daytona` provider: Daytona sandboxes through Daytona's own SDK (pinned: `daytona==0.226.1`).

One `AsyncDaytona` per provider. A rollout is the SDK's own `create` (labels `spec.tags()`, from the
organization's default snapshot unless `snapshot` or `image` says otherwise, `ttl_minutes` from the spec's
lifetime, `auto_stop_interval` / `auto_delete_interval` from the options), a command through the process API,
and `delete`; a run's leftovers are found with `list(ListSandboxesQuery(labels=...))` and deleted one by one.
The SDK's exceptions on the failure taxonomy: `errors.py`.

Readiness, as the SDK defines it: `AsyncDaytona.create` posts the sandbox and then waits until its state is
`started` (Socket.IO `sandbox.state.updated` events, with a `GET /sandbox/{id}` once a second as a safety
net), and offers no way to skip that wait. The adapter runs that one call in a task and splits it where the
API acknowledged the sandbox: `create` returns when the POST answered (an id exists), `wait_ready` when the
SDK's create returned. `wait_ready` reports what it saw: how many status looks the SDK made, and, when the
last look (not an event) found the sandbox started, the gap since the look before, the most the SDK could
have noticed late; an event (or a create answered `started`) has no poll term (0).

Commands (`exec_api`): `exec` is `sandbox.process.exec`, one call per command with the daemon's own
timeout; the daemon answers stdout and stderr as one stream (`result`), so stdout holds both and stderr is
empty, as the SDK reports it. `session` runs each command in a session (`execute_session_command`, created on
the first command: one extra call in the first command's time), which reports stdout and stderr apart;
session commands have no server-side timeout, so the adapter gives up after the timeout and starts a new
session for the next command.

Contract 9's steps: `exec_stream` runs the command async in a session of its own and follows its logs over the
daemon's WebSocket (`get_session_command_logs_async`, stdout and stderr apart) until it ends, then reads its exit code
(`get_session_command`); `start_process` is a session command run async, `process_exit` its `get_session_command`.
`snapshot` is `create_snapshot` under a fresh name, answered as `snapshot:<name>`, which `create` starts from
(`CreateSandboxFromSnapshotParams`) where any other `spec.image` is a registry image; a fork is the contract's default
(`count` creates from that snapshot): the SDK's `fork` copies a running sandbox, one at a time. Readiness reports
`pull_s` when an answer the SDK got (the create's, or a status look) said `pulling_snapshot`: from that answer to the
first look past it; a start that fails as an image failure while the last state seen was the pull is raised in the
`pull` phase.

Where it talks, as whom: without `base_url`, the SDK's own configuration (`DAYTONA_API_KEY`,
`DAYTONA_API_URL`, `DAYTONA_TARGET`); with `base_url` (`--base-url`, or `--local` for the local Daytona)
that API URL and `token`. Both go into this provider's `DaytonaConfig`, never into the process environment.

Options (`--provider-option K=V`; defaults in `DaytonaOptions`): `api_key`, `target`, `snapshot`, `image` (a
registry image the API builds a snapshot from, sized by the spec: cpu, memory, disk), `exec_api` (exec or
session), `auto_stop` (minutes idle before the vendor stops it), `auto_delete` (minutes stopped before it is
deleted), `events` (on: the SDK's event stream; off: its deprecated polling), `max_connections` (the SDK's HTTP
pool, wider than the SDK's own), `trust_env`, `preflight_timeout`, `check_sdk` (on: refuse any daytona but the
pinned one, whose internals and error texts this adapter was checked against).
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib.metadata
import math
import os
import shlex
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

# The SDK's plain modules only: `daytona._async` pulls in trio, which cannot be imported under gevent, and the
# Locust side imports this module to check the provider name. The client itself loads in the engine.
from daytona.common.daytona import CreateSandboxFromImageParams, CreateSandboxFromSnapshotParams, DaytonaConfig
from daytona.common.errors import (
    DaytonaError,
    DaytonaNotFoundError,
)
from daytona.common.process import SessionExecuteRequest
from daytona.common.sandbox import ListSandboxesQuery, Resources

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
    owner_labels,
    tagged_by_stampede,
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
from providers.vendors.daytona.errors import classify_daytona

if TYPE_CHECKING:
    from daytona import AsyncDaytona, AsyncSandbox

PINNED_SDK = "0.226.1"
SDK_DEFAULT_API_URL = "https://app.daytona.io/api"  # where the SDK goes when nothing names an API
_EXEC_GRACE_S = 10.0  # past the daemon's own command deadline, before the adapter gives up on it
SNAPSHOT_PREFIX = "snapshot:"  # `snapshot`'s answer: `create` starts from that Daytona snapshot, not a registry image
PULLING_STATE = "pulling_snapshot"  # the sandbox's state while its runner pulls the image


def sdk_version() -> str:
    try:
        return importlib.metadata.version("daytona")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - the import above would have failed
        return "unknown"


@dataclass(frozen=True, slots=True)
class DaytonaOptions:
    """Where the SDK connects, as whom, what it creates and how commands run; built from option strings.

    Each tunable field is declared as its option (`providers.options.declare`): its default here is the one."""

    api_key: str | None  # None: a JWT from the environment (DAYTONA_JWT_TOKEN + DAYTONA_ORGANIZATION_ID)
    api_url: str = SDK_DEFAULT_API_URL  # base_url, else DAYTONA_API_URL, else the SDK's default
    target: str | None = declare(None, text)
    snapshot: str | None = declare(None, text)  # None: the organization's default
    image: str | None = declare(None, text)
    exec_api: str = declare("exec", choice, "exec", "session")
    auto_stop_min: int = declare(15, integer, key="auto_stop", minimum=0)
    auto_delete_min: int = declare(0, integer, key="auto_delete", minimum=-1)  # 0: at once
    events: bool = declare(True, flag)
    max_connections: int = declare(1000, integer, minimum=1)  # the SDK's own: 250
    trust_env: bool = declare(False, flag)
    preflight_timeout_s: float = declare(30.0, number, key="preflight_timeout", positive=True)

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> DaytonaOptions:
        values = parse_options("daytona", options, DAYTONA_OPTIONS)
        installed = sdk_version()
        if installed != PINNED_SDK and values["check_sdk"]:
            raise ProviderConfigError(
                f"daytona provider: checked against daytona=={PINNED_SDK}, found {installed}; "
                f"pip install daytona=={PINNED_SDK} (or check_sdk=0 to try this one)"
            )
        if values["snapshot"] and values["image"]:
            raise ProviderConfigError("daytona provider: give snapshot or image, not both")
        base_url = (values["base_url"] or "").strip().rstrip("/") or None
        if base_url is not None:
            if not base_url.startswith(("http://", "https://")):
                raise ProviderConfigError(
                    f"daytona provider: base_url must be http(s)://host:port/api (got {base_url!r})"
                )
            api_url = base_url
            api_key = values["api_key"] or values["token"]
            if not api_key:
                raise ProviderConfigError(
                    "daytona provider: base_url needs a token (--token, STAMPEDE_TOKEN or api_key=...)"
                )
        else:
            api_url = os.environ.get("DAYTONA_API_URL") or SDK_DEFAULT_API_URL  # named, so the SDK warns of nothing
            api_key = values["api_key"] or os.environ.get("DAYTONA_API_KEY") or None
            jwt = os.environ.get("DAYTONA_JWT_TOKEN") and os.environ.get("DAYTONA_ORGANIZATION_ID")
            if not api_key and not jwt:
                raise ProviderConfigError(
                    "daytona provider: no API key; set DAYTONA_API_KEY (and DAYTONA_API_URL for a self-hosted "
                    "API), or use --local for the local Daytona"
                )
        return cls(api_key=api_key, api_url=api_url, **declared_values(cls, values))


DAYTONA_OPTIONS: dict[str, Option] = {
    "base_url": text(),  # --base-url / --local: the API URL (…/api); none: the SDK's own configuration
    "token": text(),  # the key for base_url (--token, STAMPEDE_TOKEN)
    "api_key": text(),
    "check_sdk": flag(True),
    **declared_options(DaytonaOptions),
}
"""The daytona provider's options (`--provider-option K=V`, the module's docstring): any other key is refused."""


@dataclass(eq=False)
class _Start:
    """One sandbox's start: the SDK's `create` running in `task`; `acked` once the API answered the POST."""

    acked: asyncio.Future[str]
    task: asyncio.Task[AsyncSandbox] | None = None
    acked_at: float = 0.0
    acked_state: str = ""  # the state the create's answer gave
    looks: list[tuple[float, str]] = field(default_factory=list)  # (monotonic, state) of each status GET
    sandbox: AsyncSandbox | None = None
    session_id: str | None = None

    def acknowledge(self, sandbox_id: str, state: str = "") -> None:
        if not self.acked.done():
            self.acked_at = time.monotonic()
            self.acked_state = state
            self.acked.set_result(sandbox_id)

    def observation(self) -> ReadyObservation:
        """How promptly the SDK saw `started` (the module's docstring), and how long it saw the image pulled."""
        looks = [look for look in self.looks if look[0] >= self.acked_at]
        pull_s = self.pull_s()
        if not looks or looks[-1][1] != "started":
            return ReadyObservation(poll_window_s=0.0, polls=len(looks), pull_s=pull_s)
        previous = looks[-2][0] if len(looks) > 1 else self.acked_at
        return ReadyObservation(poll_window_s=max(0.0, looks[-1][0] - previous), polls=len(looks), pull_s=pull_s)

    def pull_s(self) -> float | None:
        """From the first answer in `pulling_snapshot` (the create's, or a status look's) to the first look past it:
        the pull as the SDK's looks saw it (at most a look's interval long on either side); None if none said so."""
        looks = [(self.acked_at, self.acked_state), *(look for look in self.looks if look[0] >= self.acked_at)]
        began = next((at for at, state in looks if state == PULLING_STATE), None)
        if began is None:
            return None
        ended = next((at for at, state in looks if at > began and state != PULLING_STATE), None)
        return None if ended is None else ended - began

    def pulled(self) -> bool:
        """Whether the last state the SDK saw was the pull (a failure then is the image's, in the pull phase)."""
        states = [self.acked_state, *(state for _, state in self.looks)]
        return states[-1] == PULLING_STATE


_START: contextvars.ContextVar[_Start | None] = contextvars.ContextVar("stampede_daytona_start", default=None)


def _retrieve(task: asyncio.Task[Any]) -> None:
    """A start nobody waits for any more (its rollout ended early) must not log 'exception never retrieved'."""
    if not task.cancelled():
        task.exception()


class DaytonaProvider(Provider):
    """Daytona sandboxes through `daytona.AsyncDaytona`."""

    name = "daytona"

    def __init__(self, options: DaytonaOptions) -> None:
        self.options = options
        self._sdk: AsyncDaytona | None = None
        self._starts: set[asyncio.Task[AsyncSandbox]] = set()  # SDK creates still running (cancelled at close)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> DaytonaProvider:
        return cls(DaytonaOptions.from_mapping(options))

    # --- the SDK client, built once on the engine's loop -------------------------------------------------

    @property
    def sdk(self) -> AsyncDaytona:
        if self._sdk is None:
            self._sdk = self._build_sdk()
        return self._sdk

    def _build_sdk(self) -> AsyncDaytona:
        from daytona import AsyncDaytona

        opts = self.options
        config = DaytonaConfig(
            api_key=opts.api_key,
            api_url=opts.api_url,
            target=opts.target,
            connection_pool_maxsize=opts.max_connections,
            use_deprecated_polling=not opts.events,
        )
        try:
            sdk = AsyncDaytona(config)
        except DaytonaError as exc:
            raise ProviderConfigError(f"daytona provider: the Daytona SDK refused its configuration: {exc}") from None
        _observe_sandbox_api(sdk)
        if not opts.trust_env:
            _session_without_env(sdk, opts.max_connections)
        return sdk

    @property
    def where(self) -> str:
        return self.options.api_url

    # --- the contract ----------------------------------------------------------------------------------

    async def preflight(self) -> None:
        async with preflight_errors(
            self.where, self.classify, timeout_s=self.options.preflight_timeout_s, vendor_errors=(DaytonaError,)
        ):
            async for _ in self.sdk.list(ListSandboxesQuery(limit=1)):
                break

    def create_params(self, spec: SandboxSpec) -> CreateSandboxFromSnapshotParams | CreateSandboxFromImageParams:
        """The SDK's create parameters for a spec (resources only apply to an image: a snapshot has its own)."""
        opts = self.options
        common: dict[str, Any] = {
            "labels": spec.tags(),
            "env_vars": dict(spec.env) or None,
            "auto_stop_interval": opts.auto_stop_min,
            "auto_delete_interval": opts.auto_delete_min,
            "ttl_minutes": None if math.isinf(spec.lifetime_s) else max(1, math.ceil(spec.lifetime_s / 60)),
            "network_block_all": not spec.network,
        }
        image = spec.image or opts.image
        try:
            if image and image.startswith(SNAPSHOT_PREFIX):
                return CreateSandboxFromSnapshotParams(snapshot=image[len(SNAPSHOT_PREFIX) :], **common)
            if image:
                resources = Resources(
                    cpu=max(1, math.ceil(spec.cpu)),
                    memory=max(1, math.ceil(spec.memory_mb / 1024)),
                    disk=max(1, math.ceil(spec.disk_gb)),
                )
                return CreateSandboxFromImageParams(image=image, resources=resources, **common)
            return CreateSandboxFromSnapshotParams(snapshot=opts.snapshot, **common)
        except (ValueError, TypeError) as exc:
            raise ProviderError(FailureKind.INVALID_REQUEST, f"the Daytona SDK refused the spec: {exc}") from None

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        params = self.create_params(spec)
        start = _Start(acked=asyncio.get_running_loop().create_future())
        token = _START.set(start)
        try:
            task = start.task = asyncio.ensure_future(self.sdk.create(params, timeout=0))
        finally:
            _START.reset(token)
        self._starts.add(task)
        task.add_done_callback(self._starts.discard)
        task.add_done_callback(_retrieve)
        try:
            either: set[asyncio.Future[Any]] = {start.acked, task}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not start.acked.done():  # the SDK's create ended before the API acknowledged anything: it failed
            sandbox = task.result()  # raises the SDK's exception
            start.acknowledge(sandbox.id)
        return SandboxRef(
            sandbox_id=start.acked.result(),
            provider=self.name,
            run_id=spec.run_id,
            rollout_id=spec.rollout_id,
            handle=start,
        )

    async def wait_ready(self, ref: SandboxRef, timeout: float) -> ReadyObservation | None:
        start = _start_of(ref)
        if start.task is None:
            return None
        try:
            async with asyncio.timeout(timeout):
                start.sandbox = await start.task  # a timeout cancels the SDK's wait with it
        except TimeoutError:
            raise ProviderError(FailureKind.READY_TIMEOUT, f"not started within {timeout:g}s") from None
        except DaytonaError as exc:
            await self._explain_start_failure(ref.sandbox_id, exc)
            kind = classify_daytona(exc, Phase.READY)
            if start.pulled() and kind is FailureKind.IMAGE:
                raise ProviderError(FailureKind.IMAGE, exc.message, phase=Phase.PULL) from exc
            # classified here whichever way the SDK heard of it: an event (no reason, explained above) or its own
            # poll (the reason in its message), a race the same start can go either way
            raise ProviderError(kind, exc.message) from exc
        return start.observation()

    async def _explain_start_failure(self, sandbox_id: str, exc: DaytonaError) -> None:
        """Raise the start failure with the sandbox's own `errorReason` when the SDK's message lacks it.

        The SDK hears `error` from an event, which carries the state and not the reason ("error reason:
        None"), so a start that timed out cannot be told from one that crashed; one GET tells them apart.
        """
        if "entered error state" not in exc.message or "error reason: None" not in exc.message:
            return
        try:
            reason = (await self.sdk.get(sandbox_id)).error_reason
        except DaytonaError:
            return
        if reason:
            explained = DaytonaError(exc.message.replace("error reason: None", f"error reason: {reason}"))
            raise ProviderError(classify_daytona(explained, Phase.READY), explained.message) from exc

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        sandbox = await self._sandbox(ref)
        command = shlex.join(argv)
        seconds = max(1, math.ceil(timeout))
        if self.options.exec_api == "exec":
            try:
                async with asyncio.timeout(seconds + _EXEC_GRACE_S):
                    response = await sandbox.process.exec(command, timeout=seconds)
            except TimeoutError:
                waited = seconds + _EXEC_GRACE_S
                raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no answer within {waited:g}s") from None
            code = response.exit_code if response.exit_code is not None else -1
            return ExecResult(exit_code=code, stdout=response.result or "", stderr="")
        start = ref.handle if isinstance(ref.handle, _Start) else None
        session_id = start.session_id if start is not None else None
        if session_id is None:
            session_id = f"stampede-{uuid.uuid4().hex[:12]}"
            await sandbox.process.create_session(session_id)
            if start is not None:
                start.session_id = session_id
        request = SessionExecuteRequest(command=command, run_async=False)
        try:
            async with asyncio.timeout(seconds):
                result = await sandbox.process.execute_session_command(session_id, request, timeout=seconds)
        except TimeoutError:
            if start is not None:
                start.session_id = None  # the command still holds that session: the next one gets a new session
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no answer within {seconds}s") from None
        code = result.exit_code if result.exit_code is not None else -1
        return ExecResult(exit_code=code, stdout=result.stdout or "", stderr=result.stderr or "")

    async def exec_stream(
        self, ref: SandboxRef, argv: Sequence[str], timeout: float, on_output: Callable[[str], None] | None = None
    ) -> StreamedExec:
        """A session command run async, its logs followed over the daemon's WebSocket
        (`get_session_command_logs_async`) until it ends, then its exit code (`get_session_command`)."""
        sandbox = await self._sandbox(ref)
        clock = OutputClock(on_output)
        session_id = f"stampede-{uuid.uuid4().hex[:12]}"
        stdout: list[str] = []
        stderr: list[str] = []

        def out(chunk: str) -> None:
            clock.seen(chunk)
            stdout.append(chunk)

        def err(chunk: str) -> None:
            clock.seen(chunk)
            stderr.append(chunk)

        seconds = max(1, math.ceil(timeout))
        try:
            async with asyncio.timeout(seconds + _EXEC_GRACE_S):
                await sandbox.process.create_session(session_id)
                request = SessionExecuteRequest(command=shlex.join(argv), run_async=True)
                started = await sandbox.process.execute_session_command(session_id, request)
                await sandbox.process.get_session_command_logs_async(session_id, started.cmd_id, out, err)
                command = await sandbox.process.get_session_command(session_id, started.cmd_id)
                while command.exit_code is None:  # the log stream ended a moment before the exit was recorded
                    await asyncio.sleep(0.05)
                    command = await sandbox.process.get_session_command(session_id, started.cmd_id)
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no end within {seconds + _EXEC_GRACE_S:g}s") from None
        finally:
            await _quietly(sandbox.process.delete_session(session_id))  # after the last byte: not in its time
        return clock.done(ExecResult(exit_code=int(command.exit_code), stdout="".join(stdout), stderr="".join(stderr)))

    async def start_process(self, ref: SandboxRef, argv: Sequence[str]) -> str:
        """A session of its own, the command run async in it (`run_async`): the handle is `session:command`."""
        sandbox = await self._sandbox(ref)
        session_id = f"stampede-bg-{uuid.uuid4().hex[:12]}"
        await sandbox.process.create_session(session_id)
        started = await sandbox.process.execute_session_command(
            session_id, SessionExecuteRequest(command=shlex.join(argv), run_async=True)
        )
        return f"{session_id}:{started.cmd_id}"

    async def process_exit(self, ref: SandboxRef, handle: str) -> int | None:
        """`get_session_command`'s exit code (None while it runs)."""
        session_id, _, command_id = handle.partition(":")
        command = await (await self._sandbox(ref)).process.get_session_command(session_id, command_id)
        return None if command.exit_code is None else int(command.exit_code)

    async def snapshot(self, ref: SandboxRef) -> str:
        """`create_snapshot` under a fresh name; `snapshot:<name>` is what `create` starts from (`SandboxSpec.image`)."""
        name = f"stampede-{uuid.uuid4().hex[:16]}"
        await (await self._sandbox(ref)).create_snapshot(name, timeout=0)
        return SNAPSHOT_PREFIX + name

    async def terminate(self, ref: SandboxRef) -> None:
        start = ref.handle if isinstance(ref.handle, _Start) else None
        sandbox = ref.handle if start is None else None  # a listed sandbox (list_owned), or nothing
        if start is not None:
            if start.task is not None and not start.task.done():
                start.task.cancel()  # a start still being waited for: the delete below ends it
            sandbox = start.sandbox
        try:
            if sandbox is None:
                sandbox = await self.sdk.get(ref.sandbox_id)
            await sandbox.delete()
        except DaytonaNotFoundError:
            return  # already gone: terminate is idempotent

    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        query = ListSandboxesQuery(labels=owner_labels(run_id, engine), limit=100)
        return [
            SandboxRef(sandbox_id=sandbox.id, provider=self.name, run_id=run_id, handle=sandbox)
            async for sandbox in self.sdk.list(query)
        ]

    async def list_all_owned(self) -> list[SandboxRef]:
        """Every sandbox whose labels carry a run label (Daytona filters by `key=value` only: we filter)."""
        refs: list[SandboxRef] = []
        async for sandbox in self.sdk.list(ListSandboxesQuery(limit=100)):
            run_id = tagged_by_stampede(sandbox.labels or {})
            if run_id is not None:
                refs.append(SandboxRef(sandbox_id=sandbox.id, provider=self.name, run_id=run_id, handle=sandbox))
        return refs

    def classify(self, exc: BaseException, phase: Phase | None = None) -> FailureKind:
        return classify_daytona(exc, phase)

    def versions(self) -> Mapping[str, str]:
        return {"daytona": sdk_version()}

    async def aclose(self) -> None:
        starts = list(self._starts)
        for task in starts:
            task.cancel()  # a start nobody waits for would otherwise poll a closed client
        if starts:
            await asyncio.wait(starts)
        sdk, self._sdk = self._sdk, None
        if sdk is not None:
            await sdk.close()

    async def upload_file(self, ref: SandboxRef, path: str, data: bytes) -> None:
        """`fs.upload_file` from bytes (a relative path is the sandbox's working directory's)."""
        await (await self._sandbox(ref)).fs.upload_file(bytes(data), path)

    async def download_file(self, ref: SandboxRef, path: str) -> bytes:
        try:
            data: bytes = await (await self._sandbox(ref)).fs.download_file(path)
        except DaytonaNotFoundError as exc:
            raise FileNotFoundError(f"no such file in the sandbox: {path}") from exc
        return data

    async def _sandbox(self, ref: SandboxRef) -> AsyncSandbox:
        if ref.handle is not None and not isinstance(ref.handle, _Start):
            return ref.handle  # type: ignore[no-any-return]  # a listed sandbox (list_owned)
        start = _start_of(ref)
        if start.sandbox is None:
            if start.task is None:
                raise ProviderError(FailureKind.HARNESS, "exec on a sandbox this provider did not start")
            start.sandbox = await start.task
        return start.sandbox


async def _quietly(call: Any) -> None:
    """A clean-up (a streamed command's session) whose failure changes nothing: bounded, errors dropped."""
    try:
        async with asyncio.timeout(_EXEC_GRACE_S):
            await call
    except Exception:
        pass


def _start_of(ref: SandboxRef) -> _Start:
    if not isinstance(ref.handle, _Start):
        raise ProviderError(FailureKind.HARNESS, f"sandbox {ref.sandbox_id} was not created by this provider")
    return ref.handle


def _session_without_env(sdk: AsyncDaytona, max_connections: int) -> None:
    """The SDK's one HTTP session, as it would build it, but not reading the environment on every request.

    The SDK's session has `trust_env=True`: aiohttp then looks up `~/.netrc` and the proxy variables in worker
    threads for each request, two thread hops per call that queue behind each other on the loop's default
    executor when hundreds of calls are in flight. Made here, first, the SDK adopts it for every call
    (`SharedAiohttpSession` keeps a session it already has); `trust_env=1` keeps the SDK's own.
    """
    shared = sdk._shared_session
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=max_connections, keepalive_timeout=30), trust_env=False
    )
    shared._session = session
    for client in shared._rest_clients:
        client.pool_manager = session


def _observe_sandbox_api(sdk: AsyncDaytona) -> None:
    """Note, for the start in progress in this task, when the API acknowledged it and each status look.

    The SDK's `create` posts through, and its readiness wait polls through, the one `SandboxApi` of the
    client; wrapping that instance's two methods (the SDK itself is unchanged) is how the adapter tells the
    acknowledgement from the start and counts the looks.
    """
    api = sdk._sandbox_api
    post, get = api.create_sandbox, api.get_sandbox

    async def create_sandbox(*args: Any, **kwargs: Any) -> Any:
        response = await post(*args, **kwargs)
        start = _START.get()
        if start is not None:
            start.acknowledge(response.id, response.state.value if response.state is not None else "")
        return response

    async def get_sandbox(*args: Any, **kwargs: Any) -> Any:
        response = await get(*args, **kwargs)
        start = _START.get()
        if start is not None:
            state = response.state.value if response.state is not None else ""
            start.looks.append((time.monotonic(), state))
        return response

    api.create_sandbox = create_sandbox  # type: ignore[method-assign]
    api.get_sandbox = get_sandbox  # type: ignore[method-assign]
