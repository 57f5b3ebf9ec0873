"""The `e2b` provider: E2B sandboxes (Firecracker microVMs) through E2B's own SDK (pinned: `e2b==2.56.0`).

One module, unlike prime/: the SDK adaptation and the classification of that SDK's exceptions are one
adapter's two halves.

A rollout is `AsyncSandbox.create(template, timeout=<lifetime s>, metadata=spec.tags(), envs,
allow_internet_access)`. E2B's create answers only once the sandbox runs (envd inside it reachable), so
readiness is create's answer: `wait_ready` returns at once, having looked at nothing
(`ReadyObservation(poll_window_s=0, polls=0)`: no polling term hides in `ready_s`). Commands are
`sandbox.commands.run` (Connect RPC `process.Process/Start` on envd: stdout, stderr, exit code; the SDK's
`CommandExitException` for a non-zero exit is a result, not a failure); `terminate` is `AsyncSandbox.kill(id)`
(False once gone: idempotent); a run's leftovers are found with `AsyncSandbox.list(query=SandboxQuery(
metadata=...))`, running and paused, and killed one by one.

Contract 9's steps: `exec_stream` is `commands.run` with `on_stdout`/`on_stderr` (envd streams each chunk as the
process writes it); `start_process` is `commands.run(background=True, timeout=0)`, whose handle the SDK keeps
following (its exit code is what `process_exit` reads); `snapshot` is `create_snapshot`, and `fork` from a snapshot
is the contract's default, `count` creates with the snapshot as the template. A plan's fork goes through
`fork_running` instead: the SDK's own `AsyncSandbox.fork(id, count=...)`, which checkpoints the running sandbox
once (it keeps running) and boots the copies from it, memory and all, at most `MAX_FORKS` a call. Its copies carry
the source's metadata (E2B's fork takes none): listed, every copy names the group's rollout, not its own.
A copy that failed is answered in its place: a 5xx there is that copy's failed start, `died_before_ready` at
`fork` (the checkpoint had succeeded), as is a create from a snapshot answered 5xx (the snapshot was taken; the
copy's start was not). The whole fork call failing 5xx is the checkpoint's, `snapshot_error`; a snapshot that is
not there (404) stays `snapshot_error` too.

Where it talks, as whom: everything goes to the SDK as per-call parameters, never into the process environment.
Without `base_url`, the SDK's own configuration (`E2B_API_KEY`, `E2B_DOMAIN`, `E2B_API_URL`,
`E2B_SANDBOX_URL`); with `base_url` (`--base-url`, or `--local` for the local E2B), that API URL, `token` as the
API key, and `sandbox_url` the sandbox proxy (the local E2B announces it). `E2B_DEBUG=true` is refused: the
SDK then skips the API altogether and every create answers the same fake id.

SDK behaviour the adapter changes, per call, so that the vendor shows through (options restore it; every
option's default is its field's in `E2BOptions`, written once there):
- `create_retries`: the SDK retries a create answered 503, or 429 with Retry-After, up to 3 times,
  so throttling would hide inside create latency. A throttled create fails at once as `rate_limited` (or
  `quota_exhausted` for the concurrent-sandbox cap, `capacity` for a 503). 3 is the SDK as shipped.
- `create_timeout` (the harness's create budget): E2B's create waits for the boot, and the SDK's
  60 s request timeout would turn the vendor's own slow starts into client timeouts. Other calls keep
  `request_timeout` (the SDK's).
- `max_connections` (`DEFAULT_MAX_CONNECTIONS`, unless `E2B_MAX_CONNECTIONS` is set): the SDK caps its
  connections per address at 200. Against E2B (TLS) HTTP/2 carries 100 requests on each; over plain http (the
  local E2B) every request holds a connection of its own, a create holds it until the sandbox runs, and at 200
  the rest of a 960-wide burst would queue in the client (measured: TTI p50 41 s instead of 2-3 s, the vendor
  unchanged). Process-wide, as the SDK's own setting is; it applies to the connection pool the SDK builds next.

Options (`--provider-option K=V`; defaults in `E2BOptions`): `api_key`, `domain`, `sandbox_url`, `template` (a
rollout's image, when set, names the template), `create_retries`, `create_timeout`, `request_timeout`,
`max_connections`, `preflight_timeout`, `check_sdk` (on: refuse an e2b outside `SUPPORTED_SDK`, the `[e2b]` extra's
range, whose wire protocol and exceptions this adapter and the local E2B were checked against: 2.56.0 and 2.63.0). E2B sizes a sandbox by its template: the spec's
cpu, memory and disk are not sent.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import httpx
import pyqwest
from connectrpc.code import Code as ConnectCode
from connectrpc.errors import ConnectError
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    ConnectionConfig,
    FileNotFoundException,
    InvalidArgumentException,
    NotEnoughSpaceException,
    NotFoundException,
    RateLimitException,
    SandboxException,
    SandboxNotFoundException,
    SandboxNotRunningException,
    SandboxQuery,
    SandboxUnreachableException,
    ServiceBusyException,
    TemplateException,
    TimeoutException,
)
from e2b.api import AsyncApiClient, handle_api_exception
from e2b.api import client_async as sdk_transports
from e2b.api.client.api.sandboxes import delete_sandboxes_sandbox_id
from e2b.retry import AsyncRetryableTransport

from providers.base import (
    ROLLOUT_LABEL,
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
from providers.http1_transport import Http1Transport
from providers.options import (
    Option,
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

SUPPORTED_SDK = ">=2.56,<3"  # the `[e2b]` extra's range in pyproject.toml
_SDK_LOWEST = (2, 56)
_SDK_BELOW = (3,)
DEFAULT_TEMPLATE = "base"
MAX_TIMEOUT_S = 86_400  # E2B's longest sandbox life (Pro); an unbounded lifetime asks for this
LIST_PAGE = 100
MAX_FORKS = 20  # copies one `fork` call may ask for (the SDK checks 1..20)
DEFAULT_MAX_CONNECTIONS = 1000
SDK_CONNECTIONS_ENV = "E2B_MAX_CONNECTIONS"
_EXEC_GRACE_S = 10.0  # past the SDK's own command deadline, before the adapter gives up on it
_CONNECT_S = 10.0  # the most a terminate waits to connect, on the adapter's own wire
_QUOTA_TEXT = "maximum number of concurrent"  # E2B's 429 for the account's concurrent-sandbox cap
_CANCELED_TEXT = "cancelled by the server"  # the SDK's TimeoutException for a Connect CANCELED: stream cut off
_TRANSPORT_ERRORS = (
    httpx.TransportError,
    pyqwest.ReadError,
    pyqwest.WriteError,
    pyqwest.StreamError,
    OSError,
    EOFError,
)


def sdk_supported(version: str) -> bool:
    """Whether an e2b release is inside `SUPPORTED_SDK` (its numeric release part; a pre-release counts as it)."""
    release = re.match(r"\d+(?:\.\d+)*", version)
    if release is None:
        return False
    numbers = tuple(int(part) for part in release.group().split("."))
    return _SDK_LOWEST <= numbers < _SDK_BELOW


@dataclass(frozen=True, slots=True)
class E2BOptions:
    """Where the SDK connects, as whom, and which SDK behaviours are kept; built from option strings."""

    connection: Mapping[str, Any]  # ApiParams for every SDK call (api_key, api_url, sandbox_url, domain, debug)
    template: str = declare(DEFAULT_TEMPLATE, text)
    create_retries: int = declare(0, integer, minimum=0)  # the SDK's own: 3
    create_timeout_s: float = declare(300.0, number, key="create_timeout", positive=True)  # the harness's budget
    request_timeout_s: float = declare(60.0, number, key="request_timeout", positive=True)  # the SDK's own
    # the option's absence is the adapter's choice (`_default_connections`), hence no `declare`; None: the SDK's own
    max_connections: int | None = DEFAULT_MAX_CONNECTIONS
    preflight_timeout_s: float = declare(30.0, number, key="preflight_timeout", positive=True)

    @property
    def where(self) -> str:
        return str(self.connection.get("api_url") or ConnectionConfig(**self.connection).api_url)

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> E2BOptions:
        values = parse_options("e2b", options, E2B_OPTIONS)
        installed = metadata.version("e2b")
        if values["check_sdk"] and not sdk_supported(installed):
            raise ProviderConfigError(
                f"e2b provider: checked against e2b{SUPPORTED_SDK}, found {installed}; "
                f"pip install 'e2b{SUPPORTED_SDK}' (or check_sdk=0 to try this one)"
            )
        base_url = (values["base_url"] or "").strip().rstrip("/") or None
        connection: dict[str, Any] = {"debug": False}
        if base_url is not None:
            connection["api_url"] = base_url
        for key, value in (
            ("api_key", values["api_key"] or (values["token"] if base_url else None)),
            ("sandbox_url", values["sandbox_url"]),
            ("domain", values["domain"]),
        ):
            if value:
                connection[key] = value
        try:
            resolved = ConnectionConfig(**{**connection, "debug": None})  # the SDK's own reading of E2B_* too
        except SandboxException as exc:
            raise ProviderConfigError(f"e2b provider: the E2B SDK's configuration is unusable: {exc}") from None
        if resolved.debug:
            raise ProviderConfigError(
                "e2b provider: E2B_DEBUG=true makes the SDK skip E2B's API (every create answers one fake id); unset it"
            )
        if not resolved.api_key:
            raise ProviderConfigError(
                "e2b provider: no API key; set E2B_API_KEY (or --provider-option api_key=...), "
                "or use --local for the local E2B"
            )
        return cls(
            connection=connection,
            max_connections=values["max_connections"] or _default_connections(),
            **declared_values(cls, values),
        )


E2B_OPTIONS: dict[str, Option] = {
    "base_url": text(),  # --base-url / --local: the API URL; none: the SDK's own configuration
    "token": text(),  # the API key for base_url (--token, STAMPEDE_TOKEN)
    "api_key": text(),
    "domain": text(),
    "sandbox_url": text(),
    "max_connections": integer(None, minimum=1),  # none: DEFAULT_MAX_CONNECTIONS unless E2B_MAX_CONNECTIONS is set
    "check_sdk": flag(True),
    **declared_options(E2BOptions),
}
"""The e2b provider's options (`--provider-option K=V`, the module's docstring): any other key is refused."""


def _default_connections() -> int | None:
    """The adapter's pool width, unless the user set the SDK's own (then None: theirs stands)."""
    return None if os.environ.get(SDK_CONNECTIONS_ENV) else DEFAULT_MAX_CONNECTIONS


def sandbox_timeout(lifetime_s: float) -> int:
    """E2B's `timeout` (whole seconds the sandbox may live) for a spec's lifetime."""
    if math.isinf(lifetime_s):
        return MAX_TIMEOUT_S
    return max(1, math.ceil(lifetime_s))


class E2BProvider(Provider):
    """E2B sandboxes through `e2b.AsyncSandbox`."""

    name = "e2b"

    def __init__(self, options: E2BOptions) -> None:
        self.options = options
        self._processes: dict[str, Any] = {}  # start_process's key -> the SDK's AsyncCommandHandle
        self._api: AsyncApiClient | None = None  # the SDK's API client for terminate, built once (`_api_client`)
        self._wire: Http1Transport | None = None  # its connections
        if options.max_connections is not None:
            sdk_transports.max_connections = options.max_connections  # read when the SDK builds its pool

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> E2BProvider:
        return cls(E2BOptions.from_mapping(options))

    def _params(self, **extra: Any) -> dict[str, Any]:
        return {**self.options.connection, "request_timeout": self.options.request_timeout_s, **extra}

    # --- the contract ----------------------------------------------------------------------------------

    async def preflight(self) -> None:
        async with preflight_errors(
            self.options.where,
            self.classify,
            timeout_s=self.options.preflight_timeout_s,
            refused=lambda exc: "HTTP 401" if isinstance(exc, AuthenticationException) else None,
        ):
            await AsyncSandbox.list(limit=1, **self._params()).next_items()

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        sandbox = await cancellable(
            AsyncSandbox.create(
                template=spec.image or self.options.template,
                timeout=sandbox_timeout(spec.lifetime_s),
                metadata=spec.tags(),
                envs=dict(spec.env) or None,
                allow_internet_access=spec.network,
                **self._params(request_timeout=self.options.create_timeout_s, retries=self.options.create_retries),
            )
        )
        return SandboxRef(
            sandbox_id=sandbox.sandbox_id,
            provider=self.name,
            run_id=spec.run_id,
            rollout_id=spec.rollout_id,
            handle=sandbox,
        )

    async def wait_ready(self, ref: SandboxRef, timeout: float) -> ReadyObservation:
        """Nothing to wait for: E2B's create answered once the sandbox ran. No look was made, so no poll window."""
        return ReadyObservation(poll_window_s=0.0, polls=0)

    async def _sandbox(self, ref: SandboxRef) -> AsyncSandbox:
        if isinstance(ref.handle, AsyncSandbox):
            return ref.handle
        connected: AsyncSandbox = await cancellable(AsyncSandbox.connect(ref.sandbox_id, **self._params()))
        return connected

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        sandbox = await self._sandbox(ref)
        try:
            async with asyncio.timeout(timeout + _EXEC_GRACE_S):
                result = await cancellable(
                    sandbox.commands.run(
                        shlex.join(argv), timeout=timeout, request_timeout=self.options.request_timeout_s
                    )
                )
        except CommandExitException as exc:  # a non-zero exit: a result
            return ExecResult(exit_code=exc.exit_code, stdout=exc.stdout, stderr=exc.stderr)
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no answer within {timeout + _EXEC_GRACE_S:g}s") from None
        return ExecResult(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr)

    async def exec_stream(
        self, ref: SandboxRef, argv: Sequence[str], timeout: float, on_output: Callable[[str], None] | None = None
    ) -> StreamedExec:
        """`commands.run` with `on_stdout`/`on_stderr`: envd streams each chunk as the process writes it."""
        sandbox = await self._sandbox(ref)
        clock = OutputClock(on_output)
        try:
            async with asyncio.timeout(timeout + _EXEC_GRACE_S):
                result = await cancellable(
                    sandbox.commands.run(
                        shlex.join(argv),
                        timeout=timeout,
                        request_timeout=self.options.request_timeout_s,
                        on_stdout=clock.seen,
                        on_stderr=clock.seen,
                    )
                )
        except CommandExitException as exc:
            return clock.done(ExecResult(exit_code=exc.exit_code, stdout=exc.stdout, stderr=exc.stderr))
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no answer within {timeout + _EXEC_GRACE_S:g}s") from None
        return clock.done(ExecResult(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr))

    async def start_process(self, ref: SandboxRef, argv: Sequence[str]) -> str:
        """`commands.run(background=True)` (no command deadline): the SDK's handle, kept here, follows its events."""
        sandbox = await self._sandbox(ref)
        handle = await cancellable(
            sandbox.commands.run(
                shlex.join(argv), background=True, timeout=0, request_timeout=self.options.request_timeout_s
            )
        )
        key = f"{ref.sandbox_id}:{handle.pid}"
        self._processes[key] = handle
        return key

    async def process_exit(self, ref: SandboxRef, handle: str) -> int | None:
        """The handle's exit code once envd sent the end event; its stream's error (the sandbox gone) raised."""
        command = self._processes.get(handle)
        if command is None:
            raise ProviderError(FailureKind.EXEC_ERROR, f"no background process {handle} started by this provider")
        exit_code = command.exit_code
        if exit_code is None and command._wait.done():  # the stream ended without an end event: wait() says why
            try:
                await command.wait()
            except CommandExitException as exc:
                exit_code = exc.exit_code
        if exit_code is not None:
            self._processes.pop(handle, None)
        return exit_code

    async def upload_file(self, ref: SandboxRef, path: str, data: bytes) -> None:
        """`files.write` (envd's upload, as the sandbox's user: a relative path is that user's home's)."""
        sandbox = await self._sandbox(ref)
        await cancellable(sandbox.files.write(path, bytes(data), request_timeout=self.options.request_timeout_s))

    async def download_file(self, ref: SandboxRef, path: str) -> bytes:
        sandbox = await self._sandbox(ref)
        try:
            data = await cancellable(
                sandbox.files.read(path, format="bytes", request_timeout=self.options.request_timeout_s)
            )
        except FileNotFoundException as exc:
            raise FileNotFoundError(f"no such file in the sandbox: {path}") from exc
        return bytes(data)

    async def snapshot(self, ref: SandboxRef) -> str:
        """`create_snapshot`: its id is a template `create` starts from (`SandboxSpec.image`)."""
        sandbox = await self._sandbox(ref)
        info = await cancellable(sandbox.create_snapshot())
        return str(info.snapshot_id)

    async def fork_running(self, ref: SandboxRef, spec: SandboxSpec, count: int) -> list[SandboxRef]:
        """`AsyncSandbox.fork(id, count=...)`, `MAX_FORKS` copies a call: each copy answered on its own, and one
        that failed fails the fork (the made ones killed first, the contract's rule). The copies carry the source's
        metadata and env (E2B's fork takes neither); `spec` gives their lifetime and their refs' rollout ids."""
        made: list[SandboxRef] = []
        failed: BaseException | None = None
        for first in range(0, count, MAX_FORKS):
            try:
                results = await cancellable(
                    AsyncSandbox.fork(
                        ref.sandbox_id,
                        timeout=sandbox_timeout(spec.lifetime_s),
                        count=min(MAX_FORKS, count - first),
                        **self._params(request_timeout=self.options.create_timeout_s),
                    )
                )
            except SandboxException as exc:
                failed = _checkpoint_failure(exc)
                break
            for result in results:
                if isinstance(result, BaseException):
                    failed = failed or result
                else:
                    rollout = f"{spec.rollout_id}-{len(made)}"
                    made.append(SandboxRef(result.sandbox_id, self.name, spec.run_id, rollout, handle=result))
            if failed is not None:
                break
        if failed is not None:
            await asyncio.gather(*(self.terminate(copy) for copy in made), return_exceptions=True)
            raise failed
        return made

    async def terminate(self, ref: SandboxRef) -> None:
        """`DELETE /sandboxes/{id}`, what `AsyncSandbox.kill` sends, on one API client kept for every terminate
        (`_api_client`). A 404 is a sandbox already gone (kill's False); any other error status is raised as kill
        raises it."""
        answer = await cancellable(
            delete_sandboxes_sandbox_id.asyncio_detailed(ref.sandbox_id, client=self._api_client())
        )
        if answer.status_code >= 300 and answer.status_code != 404:
            raise handle_api_exception(answer)

    def _api_client(self) -> AsyncApiClient:
        """The SDK's API client for this provider's connection, as `kill` builds it (its headers, auth, timeout and
        status retries, `AsyncRetryableTransport`), built once instead of per call, and on our HTTP/1.1 wire
        (`providers/http1_transport.py`) instead of pyqwest's: measured against the local E2B, 64 at a time, a
        terminate cost 0.72 ms of client CPU through `kill`, 0.69 ms on a kept client, 0.27 ms on this one."""
        if self._api is None:
            config = ConnectionConfig(**AsyncSandbox._resolve_api_params(**self._params()))
            self._wire = Http1Transport(connect_timeout_s=_CONNECT_S)
            self._api = AsyncApiClient(config, transport=AsyncRetryableTransport(self._wire, config.retries))
        return self._api

    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        query = SandboxQuery(metadata=owner_labels(run_id, engine))
        pages = AsyncSandbox.list(query=query, limit=LIST_PAGE, **self._params())
        refs: list[SandboxRef] = []
        while pages.has_next:
            for info in await cancellable(pages.next_items()):
                rollout = info.metadata.get(ROLLOUT_LABEL, "")
                refs.append(SandboxRef(info.sandbox_id, self.name, run_id, rollout_id=rollout))
        return refs

    async def list_all_owned(self) -> list[SandboxRef]:
        """Every sandbox whose metadata carries a run label (E2B filters by `key=value` only: we filter)."""
        pages = AsyncSandbox.list(query=SandboxQuery(), limit=LIST_PAGE, **self._params())
        refs: list[SandboxRef] = []
        while pages.has_next:
            for info in await cancellable(pages.next_items()):
                metadata = info.metadata or {}
                run_id = tagged_by_stampede(metadata)
                if run_id is not None:
                    rollout = metadata.get(ROLLOUT_LABEL, "")
                    refs.append(SandboxRef(info.sandbox_id, self.name, run_id, rollout_id=rollout))
        return refs

    def classify(self, exc: BaseException, phase: Phase | None = None) -> FailureKind:
        return classify_e2b(exc, phase)

    def versions(self) -> Mapping[str, str]:
        return {"e2b": metadata.version("e2b")}

    async def aclose(self) -> None:
        wire, self._wire, self._api = self._wire, None, None
        if wire is not None:
            await wire.aclose()  # the terminate wire's keep-alive connections (the SDK's retry layer closes nothing)


# --- classification ----------------------------------------------------------------------------------


def _checkpoint_failure(exc: SandboxException) -> BaseException:
    """A fork call failed as a whole: a 5xx there is the checkpoint of the source (`snapshot_error`), not a copy's
    boot (answered per copy); anything else (429, 401, the source gone) is classified as it is."""
    status = exc.status_code
    if status is not None and status >= 500 and status not in (503, 504):
        failure = ProviderError(FailureKind.SNAPSHOT_ERROR, f"the fork's checkpoint failed: {exc}", phase=Phase.FORK)
        failure.__cause__ = exc
        return failure
    return exc


def classify_e2b(exc: BaseException, phase: Phase | None) -> FailureKind:
    """Every exception e2b 2.56.0 raises, onto the taxonomy (docs/vendors.md, E2B).

    E2B's create is also its readiness wait, so a create that runs out of time is `ready_timeout`.
    """
    if isinstance(exc, ProviderError):
        return exc.kind
    if isinstance(exc, AuthenticationException):  # 401 from the API, or envd refusing the access token
        return FailureKind.AUTH
    if isinstance(exc, RateLimitException):  # 429: the create rate, or the concurrent-sandbox cap
        return FailureKind.QUOTA_EXHAUSTED if _QUOTA_TEXT in str(exc) else FailureKind.RATE_LIMITED
    if isinstance(exc, ServiceBusyException):  # 503: no room to place the sandbox (or a fork's copy), a node declining
        return FailureKind.CAPACITY if phase in (None, Phase.CREATE, Phase.FORK) else vendor_error_kind(phase)
    if isinstance(exc, (SandboxNotRunningException, SandboxNotFoundException)):  # killed, or its timeout came
        return gone_kind(phase)
    if isinstance(exc, SandboxUnreachableException):  # running, but envd could not be reached
        return FailureKind.TRANSPORT
    if isinstance(exc, TimeoutException):
        return gone_kind(phase) if _CANCELED_TEXT in str(exc) else _timed_out(phase)
    if isinstance(exc, TemplateException):  # a template built for an envd this SDK cannot speak to
        return FailureKind.IMAGE
    if isinstance(exc, InvalidArgumentException):
        return FailureKind.INVALID_REQUEST
    if isinstance(exc, (NotFoundException, NotEnoughSpaceException, CommandExitException)):
        return FailureKind.EXEC_ERROR if phase is Phase.EXEC else vendor_error_kind(phase)
    if isinstance(exc, SandboxException):
        return _status_kind(exc.status_code, str(exc), phase)
    if isinstance(exc, ConnectError):
        return _connect_code(exc.code, phase)
    if isinstance(exc, (httpx.ConnectTimeout, pyqwest.ConnectTimeout)):
        return FailureKind.TRANSPORT
    if isinstance(exc, (httpx.TimeoutException, TimeoutError)):  # TimeoutError is an OSError: first
        return _timed_out(phase)
    if isinstance(exc, _TRANSPORT_ERRORS):
        return FailureKind.TRANSPORT
    if type(exc) is Exception and str(exc) in ("Body of the request is None", "Command ended without an end event"):
        return vendor_error_kind(phase)  # the SDK's bare Exceptions: an answer it could not use
    return classify_common(exc, phase)


def _timed_out(phase: Phase | None) -> FailureKind:
    if phase is Phase.EXEC:
        return FailureKind.EXEC_TIMEOUT
    if phase is Phase.TERMINATE:
        return FailureKind.TRANSPORT
    if phase in (Phase.UPLOAD, Phase.DOWNLOAD, Phase.SNAPSHOT):
        return vendor_error_kind(phase)
    return FailureKind.READY_TIMEOUT  # create (which waits for the boot), ready, pull or a fork's boot


def _status_kind(status: int | None, message: str, phase: Phase | None) -> FailureKind:
    """A `SandboxException` carrying the API's HTTP status (the SDK keeps `code: message`, drops `error_code`)."""
    if status in (400, 422):
        return FailureKind.INVALID_REQUEST
    if status in (401, 403):
        return FailureKind.AUTH
    if status == 404 and phase in (None, Phase.CREATE) and "template" in message.lower():
        return FailureKind.IMAGE
    if status == 404:
        return gone_kind(phase)
    if status == 504 and phase in (None, Phase.CREATE, Phase.FORK):  # "Failed to place sandbox: ... timed out"
        return FailureKind.READY_TIMEOUT
    if status is not None and status >= 500 and phase is Phase.FORK:  # a copy's start failed, not the snapshot
        return FailureKind.DIED_BEFORE_READY
    if status in (502, 504) and phase is Phase.TERMINATE:
        return FailureKind.TRANSPORT
    return vendor_error_kind(phase)


def _connect_code(code: ConnectCode, phase: Phase | None) -> FailureKind:
    """A raw Connect error from envd (the SDK normally maps these to its own classes first)."""
    if code in (ConnectCode.UNAUTHENTICATED, ConnectCode.PERMISSION_DENIED):
        return FailureKind.AUTH
    if code is ConnectCode.RESOURCE_EXHAUSTED:
        return FailureKind.RATE_LIMITED
    if code is ConnectCode.DEADLINE_EXCEEDED:
        return _timed_out(phase)
    if code in (ConnectCode.NOT_FOUND, ConnectCode.UNAVAILABLE, ConnectCode.CANCELED):
        return gone_kind(phase)
    if code in (ConnectCode.INVALID_ARGUMENT, ConnectCode.UNIMPLEMENTED, ConnectCode.OUT_OF_RANGE):
        return FailureKind.INVALID_REQUEST
    return vendor_error_kind(phase)
