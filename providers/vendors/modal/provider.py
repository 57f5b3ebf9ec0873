"""The `modal` provider: Modal Sandboxes through the real `modal` SDK (pinned: `modal==1.6.4`), `.aio` only.

One `modal.Client` per provider, built for an explicit server URL and token pair: the user's Modal
workspace (`MODAL_TOKEN_ID`/`MODAL_TOKEN_SECRET` or `~/.modal.toml`, server from their Modal config), or,
with `base_url`, any Modal-compatible control plane such as our local one (`--local`). A rollout is
`App.lookup(app_name, create_if_missing=True)` (once), `Sandbox.create` tagged with the run and rollout
ids, `wait_until_ready` on a `Probe.with_exec("true")` readiness probe (the SDK's own notion of "a command
can run"), `exec` with both streams read and the exit code waited for, `terminate` + `detach`;
`Sandbox.list(app_id=..., tags=...)` finds a run's leftovers.

Contract 9's steps: `exec_stream` is `Sandbox.exec` with its stdout and stderr iterated as the router sends them;
`start_process` is `Sandbox.exec` not waited for (output to DEVNULL), `process_exit` the SDK's `poll`; `snapshot` is
`snapshot_filesystem` (an `im-` Image id `create` starts from) and a fork is the contract's default, `count` creates
from that Image: Modal has no multi-create or fork of its own.

Two SDK settings are process-global (read by the SDK from the environment on every call), so the provider
sets them for its process (the engine runs one provider per process) and restores them on `aclose`:
`MODAL_SANDBOX_V2` (option `sandbox_v2`; V2 is the 1.6 SDK's own backend) and `MODAL_MAX_THROTTLE_WAIT`
(option `max_throttle_wait`), so that throttling surfaces as `rate_limited` instead of being
absorbed into TTI by the SDK's server-directed retries. The vendor's retry hint (`RPCRetryPolicy`) is honoured
all the same: it holds every create for its length (at most `HINT_MAX_S`, a `ThrottleGate` shared with the other
adapters' Retry-After), so a throttling storm meets one create per hint.

Timing notes (why TTI, not create latency, is the comparable metric): on V1, `Sandbox.create` blocks until
the sandbox is scheduled (polling `SandboxGetTaskId` every 0.5 s); on V2 it returns at once with a task
id and the container boots while `wait_until_ready` waits.

Options (`--provider-option K=V`; defaults in `ModalOptions`): `token_id`, `token_secret` (`token` when
`base_url` is set, else the user's Modal config), `sandbox_v2` (1/0), `max_throttle_wait` (seconds, `none` for the
SDK's default of unlimited), `app_name`, `environment`, `readiness` (`probe`, or `none`: the first command absorbs
the boot), `region`, `sdk_loop` (`engine`, the default: the SDK's calls on the engine's loop, `sdk_loop.py`;
`own`: its own thread),
`preflight_timeout` (seconds to connect, authenticate and resolve the default image:
`LOCAL_PREFLIGHT_S` with `base_url`, else `MODAL_PREFLIGHT_S`; the SDK itself retries an unreachable server for a
minute), `rpc_timeout` (seconds: the most a call that should answer at once may take: a V2 create, a command's
start, a terminate, a list; the SDK waits on such calls without a deadline, so a hung vendor would otherwise hold a
rollout until the engine's watchdog).

Hostile transport: the SDK retries resets, UNAVAILABLE/INTERNAL/UNKNOWN and timeouts itself (3 times on the
control plane; the command router until the call's deadline). What it gives up on is classified (`errors.py`): a
reply that does not decode or a unary call that ended without one is `transport`; RESOURCE_EXHAUSTED
without a named cause is `rate_limited`. `terminate` and `list_owned` retry such transient failures a few
times themselves (a sandbox a failed terminate left would otherwise run until the run's final sweep).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import posixpath
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpclib
import grpclib.exceptions
import modal
import modal.exception as mexc
from modal_proto import api_pb2

from providers.base import (
    ExecResult,
    FailureKind,
    Phase,
    Provider,
    ProviderConfigError,
    ProviderError,
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
    number,
    parse_options,
    text,
)
from providers.output_clock import OutputClock
from providers.preflight import preflight_errors
from providers.throttle_gate import ThrottleGate
from providers.vendors.modal.errors import classify_modal, pull_failed
from providers.vendors.modal.sdk_loop import adopt_running_loop, in_own_task, release_loop

T = TypeVar("T")

PINNED_SDK = "1.6.4"
LOCAL_TOKEN_ID = "ak-stampede-local"
DEFAULT_APP = "stampede"
_ENV_V2 = "MODAL_SANDBOX_V2"
_ENV_THROTTLE = "MODAL_MAX_THROTTLE_WAIT"
_READY_GRACE_S = 5.0
LOCAL_PREFLIGHT_S = 30.0  # the preflight's budget against a Modal at base_url (ours, with --local)
MODAL_PREFLIGHT_S = 180.0  # against the real Modal: a first image build may be slow
_POLL_AFTER_OVERRUN_S = 5.0
_CONTROL_ATTEMPTS = 4  # terminate / list: the first try and 3 retries of a transient failure
_CONTROL_BACKOFF_S = 0.25
_TRANSIENT_KINDS = frozenset({"transport", "rate_limited"})


def _throttle_wait(raw: Any) -> int | None:
    """Whole seconds the SDK may wait on throttling; `none` (or empty): the SDK's default, unlimited."""
    text_value = str(raw).strip().lower()
    if text_value in ("", "none", "default"):
        return None
    seconds = int(float(text_value))
    if seconds < 0:
        raise ValueError(raw)
    return seconds


def _throttle_wait_option(default: int | None) -> Option:
    return Option(default, _throttle_wait, "whole seconds or none")


@dataclass(frozen=True, slots=True)
class ModalOptions:
    """Where the SDK connects, as whom, and how it behaves; built from `--provider-option` strings.

    Each tunable field is declared as its option (`providers.options.declare`): its default here is the one."""

    server_url: str
    token_id: str
    token_secret: str
    local: bool = False
    sandbox_v2: bool = declare(True, flag, true=("v2",), false=("v1",))
    max_throttle_wait: int | None = declare(0, _throttle_wait_option)
    app_name: str = declare(DEFAULT_APP, text)
    environment: str | None = declare(None, text)
    readiness: str = declare("probe", choice, "probe", "none")
    # `sdk_loop.py`: `engine` runs the SDK's calls on the engine's loop (no thread hops); `own` its own thread
    sdk_loop: str = declare("engine", choice, "engine", "own")
    region: str | None = declare(None, text)
    # the option's absence depends on where the SDK connects, hence no `declare`
    preflight_timeout_s: float = LOCAL_PREFLIGHT_S
    rpc_timeout_s: float = declare(60.0, number, key="rpc_timeout", positive=True)

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> ModalOptions:
        values = parse_options("modal", options, MODAL_OPTIONS)
        base_url = (values["base_url"] or "").strip().rstrip("/")
        if base_url:
            if not base_url.startswith(("http://", "https://")):
                raise ProviderConfigError(f"modal provider: base_url must be http(s)://host:port (got {base_url!r})")
            token_id = values["token_id"] or LOCAL_TOKEN_ID
            token_secret = values["token_secret"] or values["token"] or ""
            if not token_secret:
                raise ProviderConfigError("modal provider: base_url needs a token (--token or token_secret=...)")
            server_url = base_url
        else:
            from modal.config import config

            server_url = str(config.get("server_url"))
            token_id = str(values["token_id"] or config.get("token_id") or "")
            token_secret = str(values["token_secret"] or config.get("token_secret") or "")
            if not token_id or not token_secret:
                raise ProviderConfigError(
                    "modal provider: no Modal credentials; set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, "
                    "run `modal token new`, or use --local"
                )
        preflight_timeout = values["preflight_timeout"]
        if preflight_timeout is None:
            preflight_timeout = LOCAL_PREFLIGHT_S if base_url else MODAL_PREFLIGHT_S
        return cls(
            server_url=server_url,
            token_id=token_id,
            token_secret=token_secret,
            local=bool(base_url),
            preflight_timeout_s=preflight_timeout,
            **declared_values(cls, values),
        )

    @property
    def backend(self) -> str:
        return "v2" if self.sandbox_v2 else "v1"


MODAL_OPTIONS: dict[str, Option] = {
    "base_url": text(),  # a Modal-compatible control plane (--base-url; --local: ours); none: the user's Modal
    "token": text(),  # the token secret for base_url (--token, STAMPEDE_TOKEN)
    "token_id": text(),  # announced by the local Modal (providers.sim.modal.serve)
    "token_secret": text(),
    "preflight_timeout": number(None, positive=True),  # None: LOCAL_PREFLIGHT_S with base_url, else MODAL_PREFLIGHT_S
    **declared_options(ModalOptions),
}
"""The modal provider's options (`--provider-option K=V`, the module's docstring): any other key is refused."""


HINT_MAX_S = 30.0  # the most a vendor's retry hint holds creates (the SDK's max_throttle_wait is 0 by default)


def retry_hint(exc: BaseException) -> float | None:
    """Modal's retry hint: the `RPCRetryPolicy` a RESOURCE_EXHAUSTED answer carries in its details (seconds). Read
    from the gRPC error itself (the SDK's exception is raised from it; its own `details` is deprecated)."""
    for error in (exc, exc.__cause__, exc.__context__):
        if error is None or isinstance(error, mexc.Error):
            continue
        for entry in getattr(error, "details", None) or ():
            seconds = getattr(entry, "retry_after_secs", None)
            if isinstance(seconds, (int, float)) and seconds > 0:
                return float(seconds)
    return None


class ModalProvider(Provider):
    """Modal Sandboxes through the `modal` SDK's async interface."""

    name = "modal"

    def __init__(self, options: ModalOptions) -> None:
        self.options = options
        # With max_throttle_wait 0 the SDK raises a throttled create at once and drops the vendor's retry hint:
        # the hint holds every create here instead (bounded by HINT_MAX_S), so throttling still surfaces as
        # `rate_limited` and a storm meets one create per hint, not every rollout's at once.
        self._create_gate = ThrottleGate(HINT_MAX_S)
        self._client: Any = None
        self._adopted = False  # the SDK's calls made on this loop (`sdk_loop.py`), given back on `aclose`
        self._app: Any = None
        self._images: dict[str | None, Any] = {}
        self._lock = asyncio.Lock()
        self._image_locks: dict[str | None, asyncio.Lock] = {}
        self._processes: dict[str, Any] = {}  # start_process's key -> the SDK's ContainerProcess
        self._started = 0
        self._saved_env = {name: os.environ.get(name) for name in (_ENV_V2, _ENV_THROTTLE)}
        os.environ[_ENV_V2] = "1" if options.sandbox_v2 else "0"
        if options.max_throttle_wait is None:
            os.environ.pop(_ENV_THROTTLE, None)
        else:
            os.environ[_ENV_THROTTLE] = str(options.max_throttle_wait)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ModalProvider:
        return cls(ModalOptions.from_mapping(options))

    # --- SDK objects, created once --------------------------------------------------------------------

    async def client(self) -> Any:
        if self._client is None:
            async with self._lock:
                if self._client is None:
                    self._adopted = self.options.sdk_loop == "engine" and adopt_running_loop()
                    client = modal.Client(
                        self.options.server_url,
                        api_pb2.CLIENT_TYPE_CLIENT,
                        (self.options.token_id, self.options.token_secret),
                    )
                    await in_own_task(client.__aenter__())
                    self._client = client
        return self._client

    async def app(self) -> Any:
        if self._app is None:
            client = await self.client()
            async with self._lock:
                if self._app is None:
                    self._app = await in_own_task(
                        modal.App.lookup.aio(
                            self.options.app_name,
                            create_if_missing=True,
                            environment_name=self.options.environment,
                            client=client,
                        )
                    )
        return self._app

    async def image(self, name: str | None) -> Any:
        """The image, built (resolved) once so that a burst of creates does not resolve it N times."""
        found = self._images.get(name)
        if found is not None:
            return found
        lock = self._image_locks.setdefault(name, asyncio.Lock())
        async with lock:
            found = self._images.get(name)
            if found is None:
                app = await self.app()
                if name is None:
                    image = modal.Image.debian_slim()
                elif name.startswith("im-"):  # an Image by id: a `snapshot` of ours, or one the user built
                    image = modal.Image.from_id(name)
                else:
                    image = modal.Image.from_registry(name)
                found = await in_own_task(image.build.aio(app))
                self._images[name] = found
        return found

    # --- contract ---------------------------------------------------------------------------------------

    async def preflight(self) -> None:
        async with preflight_errors(
            "the local Modal" if self.options.local else self.options.server_url,
            self.classify,
            timeout_s=self.options.preflight_timeout_s,
            timeout_note=" (connect, authenticate, resolve the default image)",
            refused=lambda exc: _short(exc) if isinstance(exc, (mexc.AuthError, mexc.PermissionDeniedError)) else None,
            credential="the Modal token",
            unusable=lambda exc: f"{type(exc).__name__}: {_short(exc)}",
        ):
            client = await self.client()
            await in_own_task(client.hello.aio())
            await self.image(None)

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        client = await self.client()
        app = await self.app()
        image = await self.image(spec.image)
        kwargs: dict[str, Any] = {
            "app": app,
            "image": image,
            "tags": spec.tags(),
            "timeout": max(1, math.ceil(spec.lifetime_s)),
            "cpu": float(spec.cpu),
            "memory": int(spec.memory_mb),
            "block_network": not spec.network,
            "client": client,
        }
        if spec.env:
            kwargs["env"] = dict(spec.env)
        if self.options.region:
            kwargs["region"] = self.options.region
        if self.options.readiness == "probe":
            kwargs["readiness_probe"] = modal.Probe.with_exec("true")
        throttle_wait = self.options.max_throttle_wait
        async with self._create_gate.passage():
            try:
                if self.options.sandbox_v2 and throttle_wait is not None:
                    # V2 answers at once, after the throttling waits the SDK was allowed; V1's create waits for
                    # scheduling, and an unlimited throttle wait is the user's choice: the engine's budget bounds those
                    create = modal.Sandbox.create.aio(**kwargs)
                    sandbox = await self._bounded("create", create, extra_s=throttle_wait)
                else:
                    sandbox = await in_own_task(modal.Sandbox.create.aio(**kwargs))
            except (mexc.ResourceExhaustedError, grpclib.exceptions.GRPCError) as exc:
                if classify_modal(exc, Phase.CREATE) is FailureKind.RATE_LIMITED:
                    self._create_gate.throttled(retry_hint(exc))
                else:
                    self._create_gate.answered()
                raise
            except BaseException:
                self._create_gate.answered()
                raise
            self._create_gate.answered()
        return SandboxRef(
            sandbox_id=sandbox.object_id,
            provider=self.name,
            run_id=spec.run_id,
            rollout_id=spec.rollout_id,
            handle=sandbox,
            meta={"backend": self.options.backend},
        )

    async def wait_ready(self, ref: SandboxRef, timeout: float) -> None:
        if self.options.readiness != "probe":
            return  # nothing to wait on (V1's create already waited for scheduling): the first command absorbs the boot
        sandbox = await self._sandbox(ref)
        budget = asyncio.timeout(timeout + _READY_GRACE_S)
        try:
            async with budget:
                await in_own_task(sandbox.wait_until_ready.aio(timeout=max(1, math.ceil(timeout))))
        except TimeoutError:
            if budget.expired():
                raise ProviderError(FailureKind.READY_TIMEOUT, f"not ready within {timeout:g}s") from None
            raise
        except Exception as exc:
            if pull_failed(exc):  # the vendor placed it: the image pull inside readiness
                raise ProviderError(FailureKind.IMAGE, str(exc), phase=Phase.PULL) from exc
            raise

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        sandbox = await self._sandbox(ref)
        budget = asyncio.timeout(timeout)
        process: Any = None
        try:
            async with budget:
                process = await self._bounded("the command's start", sandbox.exec.aio(*argv, text=False))
                stdout, stderr = await asyncio.gather(process.stdout.read.aio(), process.stderr.read.aio())
                code = await in_own_task(process.wait.aio())
        except TimeoutError:
            if budget.expired():
                raise await self._exec_overran(process, timeout) from None
            raise
        return ExecResult(
            exit_code=int(code),
            stdout=stdout.decode(errors="replace") if isinstance(stdout, bytes) else str(stdout),
            stderr=stderr.decode(errors="replace") if isinstance(stderr, bytes) else str(stderr),
        )

    async def exec_stream(
        self, ref: SandboxRef, argv: Sequence[str], timeout: float, on_output: Callable[[str], None] | None = None
    ) -> StreamedExec:
        """`Sandbox.exec`, its stdout and stderr iterated as the router sends them, then `wait`."""
        sandbox = await self._sandbox(ref)
        clock = OutputClock(on_output)
        budget = asyncio.timeout(timeout)
        process: Any = None

        async def read(stream: Any) -> bytes:
            parts: list[bytes] = []
            async for chunk in stream:
                data = chunk if isinstance(chunk, bytes) else str(chunk).encode()
                clock.seen(data)
                parts.append(data)
            return b"".join(parts)

        try:
            async with budget:
                process = await self._bounded("the command's start", sandbox.exec.aio(*argv, text=False))
                stdout, stderr = await asyncio.gather(read(process.stdout), read(process.stderr))
                code = await in_own_task(process.wait.aio())
        except TimeoutError:
            if budget.expired():
                raise await self._exec_overran(process, timeout) from None
            raise
        result = ExecResult(int(code), stdout.decode(errors="replace"), stderr.decode(errors="replace"))
        return clock.done(result)

    async def start_process(self, ref: SandboxRef, argv: Sequence[str]) -> str:
        """`Sandbox.exec` not waited for (its output discarded): `process_exit` is the SDK's `poll`."""
        sandbox = await self._sandbox(ref)
        process = await self._bounded(
            "the command's start",
            sandbox.exec.aio(
                *argv, stdout=modal.stream_type.StreamType.DEVNULL, stderr=modal.stream_type.StreamType.DEVNULL
            ),
        )
        self._started += 1
        key = f"{ref.sandbox_id}:{self._started}"
        self._processes[key] = process
        return key

    async def process_exit(self, ref: SandboxRef, handle: str) -> int | None:
        process = self._processes.get(handle)
        if process is None:
            raise ProviderError(FailureKind.EXEC_ERROR, f"no background process {handle} started by this provider")
        code = await self._bounded("a poll of the command", process.poll.aio())
        if code is None:
            return None
        self._processes.pop(handle, None)
        return int(code)

    async def _exec_overran(self, process: Any, timeout: float) -> ProviderError:
        """Why a command's budget ran out: `exec_timeout` only when the vendor says the command still runs.

        A hung or dead output stream looks like a slow command from here; one poll of the command's status
        (bounded) tells them apart, so a transport stall is not blamed on the command.
        """
        if process is not None:
            try:
                async with asyncio.timeout(min(self.options.rpc_timeout_s, _POLL_AFTER_OVERRUN_S)):
                    code = await in_own_task(process.poll.aio())
            except Exception as exc:  # the router no longer answers about the command (or not in time)
                return ProviderError(
                    FailureKind.TRANSPORT,
                    f"no result within {timeout:g}s and no answer about the command ({type(exc).__name__})",
                )
            if code is not None:
                return ProviderError(
                    FailureKind.TRANSPORT,
                    f"the command exited ({code}) but its result never arrived within {timeout:g}s",
                )
        return ProviderError(FailureKind.EXEC_TIMEOUT, f"command did not finish within {timeout:g}s")

    async def terminate(self, ref: SandboxRef) -> None:
        await self._retrying(lambda: self._terminate_once(ref))

    async def _terminate_once(self, ref: SandboxRef) -> None:
        try:
            sandbox = await self._bounded("terminate", self._sandbox(ref))
        except mexc.NotFoundError:
            return  # never existed or long gone: terminate is idempotent
        try:
            try:
                await self._bounded("terminate", sandbox.terminate.aio())
            except mexc.ClientClosed:  # a handle we detached after an earlier terminate: ask by id
                sandbox = await self._bounded(
                    "terminate", modal.Sandbox.from_id.aio(ref.sandbox_id, client=await self.client())
                )
                await self._bounded("terminate", sandbox.terminate.aio())
        except mexc.NotFoundError:
            pass
        finally:
            with contextlib.suppress(Exception):
                await in_own_task(sandbox.detach.aio())

    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        return await self._retrying(lambda: self._bounded("list", self._list_once(run_id, engine)))

    async def _list_once(self, run_id: str, engine: str | None) -> list[SandboxRef]:
        client = await self.client()
        app = await self.app()
        refs: list[SandboxRef] = []
        async for sandbox in modal.Sandbox.list.aio(
            app_id=app.app_id, tags=owner_labels(run_id, engine), client=client
        ):
            refs.append(SandboxRef(sandbox_id=sandbox.object_id, provider=self.name, run_id=run_id, handle=sandbox))
        return refs

    async def _bounded(self, what: str, call: Awaitable[T], extra_s: float = 0.0) -> T:
        """`call`, failed as `transport` when the vendor has not answered within `rpc_timeout` (+ `extra_s`)."""
        limit = self.options.rpc_timeout_s + extra_s
        budget = asyncio.timeout(limit)
        try:
            async with budget:
                return await in_own_task(call)
        except TimeoutError:
            if budget.expired():
                raise ProviderError(FailureKind.TRANSPORT, f"{what}: no answer within {limit:g}s") from None
            raise

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """An idempotent control call, retried a few times when it failed transiently (reset, 5xx, throttle)."""
        for n in range(_CONTROL_ATTEMPTS):
            try:
                return await attempt()
            except Exception as exc:
                if n + 1 >= _CONTROL_ATTEMPTS or str(classify_modal(exc)) not in _TRANSIENT_KINDS:
                    raise
            await asyncio.sleep(_CONTROL_BACKOFF_S * 2**n)
        raise AssertionError("unreachable")  # pragma: no cover

    # --- files and snapshots -------------------------------------------------------------------------------

    async def upload_file(self, ref: SandboxRef, path: str, data: bytes) -> None:
        """`Sandbox.filesystem.write_bytes` (parents made). Modal's sandboxes run as root in `/`: a relative path
        is taken from `/` (the SDK itself takes absolute paths only)."""
        sandbox = await self._sandbox(ref)
        await in_own_task(sandbox.filesystem.write_bytes.aio(bytes(data), posixpath.join("/", path)))

    async def download_file(self, ref: SandboxRef, path: str) -> bytes:
        sandbox = await self._sandbox(ref)
        try:
            data: bytes = await in_own_task(sandbox.filesystem.read_bytes.aio(posixpath.join("/", path)))
        except mexc.SandboxFilesystemNotFoundError as exc:
            raise FileNotFoundError(f"no such file in the sandbox: {path}") from exc
        return data

    async def snapshot(self, ref: SandboxRef) -> str:
        """`snapshot_filesystem`: the Image id (`im-...`) a later `create` starts from."""
        sandbox = await self._sandbox(ref)
        image = await in_own_task(sandbox.snapshot_filesystem.aio())
        return str(image.object_id)

    async def _sandbox(self, ref: SandboxRef) -> Any:
        if isinstance(ref.handle, modal.Sandbox):
            return ref.handle
        return await in_own_task(modal.Sandbox.from_id.aio(ref.sandbox_id, client=await self.client()))

    async def list_all_owned(self) -> list[SandboxRef]:
        """Every live sandbox of the app whose tags carry a run label (Modal filters by `key=value` only; the app
        may hold sandboxes stampede did not make, so each one's tags are read)."""
        client = await self.client()
        app = await self.app()

        async def listed() -> list[SandboxRef]:
            refs: list[SandboxRef] = []
            async for sandbox in modal.Sandbox.list.aio(app_id=app.app_id, client=client):
                run_id = tagged_by_stampede(await sandbox.get_tags.aio())
                if run_id is not None:
                    refs.append(SandboxRef(sandbox.object_id, self.name, run_id, handle=sandbox))
            return refs

        return await in_own_task(listed())

    def versions(self) -> Mapping[str, str]:
        return {"modal": modal.__version__, "modal_backend": self.options.backend}

    async def aclose(self) -> None:
        client, self._client = self._client, None
        self._app = None
        self._images.clear()
        if client is not None:
            with contextlib.suppress(Exception):
                await in_own_task(client.close.aio())
        if self._adopted:
            self._adopted = False
            release_loop()
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    # --- classification ---------------------------------------------------------------------------------

    def classify(self, exc: BaseException, phase: Phase | None = None) -> FailureKind:
        return classify_modal(exc, phase)


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__
