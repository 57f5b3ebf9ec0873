"""The `prime` provider: Prime Intellect sandboxes through Prime's own SDK (pinned: `prime-sandboxes==0.5.1`).

This module adapts the SDK; the classification of that SDK's exceptions is `errors.py`, HTTP statuses
(shared with the stub) `statuses.py`, its options (`PrimeOptions`, checked and typed once) `options.py`.

One `AsyncSandboxClient` per provider. A rollout is `create` (labels `stampede-run=<run>`,
`stampede-rollout=<rollout>`), `wait_for_creation` (the SDK's batching status coalescer, then its
gateway probe `echo 'sandbox ready'`: both count as ready), `execute_command` (ConnectRPC
`command_session.CommandSession/Start` on the gateway) and `delete`; a run's leftovers are found with
`list(labels=..., exclude_terminated=True)` and reaped with one `bulk_delete(labels=...)`.

Contract 9's steps: `exec_stream` is `open_process` (a live command session: stdout and stderr iterated as the
gateway sends them, then `wait`); `start_process` is `start_background_job` (the SDK's nohup launch; the job's record,
as JSON, is the handle), `process_exit` `get_background_job_status`; `snapshot` is a filesystem `checkpoint`
waited until DURABLE, answered `checkpoint:<id>`, which `create` starts from (`checkpoint_id`); a fork is the
contract's default, `count` creates from it (Prime has no multi-create).

Where it talks, as whom: without `base_url`, the SDK's own configuration (`PRIME_API_KEY`, optional
`PRIME_TEAM_ID`, `PRIME_API_BASE_URL`, or `~/.prime/config.json`: what `prime login` writes); with
`base_url` (`--base-url`, or `--local` for the embedded Prime-like stub), that URL and `token`. Both are
set on this provider's SDK client object, never in the process environment.

SDK behaviour the adapter changes, per instance, so that the vendor shows through (options restore it; every
option's default is its field's in `PrimeOptions`, written once there):
- `retry_429`: the SDK retries a 429 on create twice, after 10 s and 30 s, so throttling
  would hide inside create latency. Without it, a create answered 429 fails at once as `rate_limited`
  (`quota_exhausted` when the body says the sandbox limit was reached), with the server's Retry-After.
  On, the SDK retries as shipped; `ref.meta["throttled_429"]` counts the 429s a create absorbed.
  A 429 on a status look or a delete is raised past the SDK's retries too (they wait 10 s, then 30 s, whatever
  Retry-After says, and one throttled status batch would hold every sandbox in it). A create's 429 holds every
  create client-wide for its Retry-After (`max_backoff_s` at most), then one probe at a time.
- `api_timeout`: the SDK builds its control-plane client with a 30 s timeout but passes
  `timeout=None` on every call, which httpx reads as no timeout at all: a hung answer held a rollout (or a
  whole status batch) forever. Here None means the client's own timeout.
- readiness: a status look lost on the way (timeout, reset, 5xx, 429, an unreadable answer) fails the SDK's
  wait for every sandbox of its batch; the adapter asks again (after Retry-After) until the ready deadline.
- `terminate_attempts`: a delete the API did not confirm (5xx, reset, timeout, 429, an answer
  that is not JSON) is asked again, so one blip does not leave the sandbox alive until the end-of-run sweep.
- `auth_cache` (`memory` or `file`): the SDK persists gateway tokens to `~/.prime/sandbox_auth_cache.json`,
  re-serialising the whole cache (it never shrinks) on every create. `memory` keeps them in this
  process and drops a sandbox's token when it is deleted; `file` is the SDK as shipped.
- `api_transport`: the SDK's control-plane httpx client sends over `providers/http1_transport.py` (keep-alive
  HTTP/1.1, no client-side queue), not httpcore, whose pool walk and keep-alive churn were half the engine's
  CPU per rollout at 960 in flight (6.6 -> 3.3 ms). `api_transport=httpx` restores httpcore, with
  `api_max_connections` (httpx's default pool is 100 connections, 30 s pool timeout; a wider pool keeps
  client-side queueing out of vendor latency) and `api_keepalive` (httpx's own; httpcore scans every pooled
  connection on each request, so 1000 kept alive doubled the engine's CPU per rollout at 480 in flight).

Options (`--provider-option K=V`; defaults in `PrimeOptions`): `api_key`, `team_id`, `image`, `retry_429`,
`auth_cache`, `api_transport`, `api_max_connections`, `api_keepalive`, `gateway_max_connections` (the SDK's own),
`preflight_timeout`, `api_timeout`, `terminate_attempts`, `max_backoff_s`, `check_sdk` (on: refuse any
prime-sandboxes but the pinned one, whose wire protocol, internals and error texts this adapter and the stub were
checked against), `readiness_probe` (on: a direct probe beside the SDK's readiness wait, so a run shows how much of
that wait is the SDK's polling).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import math
import os
import posixpath
import shlex
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import prime_sandboxes
import pydantic
from prime_sandboxes import (
    APIError,
    APITimeoutError,
    AsyncSandboxClient,
    BackgroundJob,
    CreateSandboxRequest,
    PaymentRequiredError,
    UnauthorizedError,
)

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
from providers.cancellation import cancellable
from providers.http1_transport import Http1Transport
from providers.output_clock import OutputClock
from providers.preflight import preflight_errors
from providers.throttle_gate import THROTTLE_DEFAULT_S, ThrottleGate
from providers.vendors.prime.errors import TRANSPORT_ERRORS, classify_prime, image_pull_failed
from providers.vendors.prime.options import PrimeOptions
from providers.vendors.prime.statuses import error_from_response, retry_after_of

CHECKPOINT_PREFIX = "checkpoint:"  # `snapshot`'s answer: `create` starts from that checkpoint, not a docker image
LIST_PAGE = 100
ALL_OWNED_MAX_PAGES = 10_000  # a bound on the listing, not a limit anyone meets
PROBE_FIRST_S = 0.05
PROBE_MAX_S = 1.0
_EXEC_GRACE_S = 10.0  # past the SDK's own command deadline, before the adapter gives up on it
_RETRY_FIRST_S = 0.1  # the first pause before a terminate is asked again; doubled each time
_RETRY_MAX_S = 2.0
_T = TypeVar("_T")


def label_strings(tags: Mapping[str, str]) -> list[str]:
    """Prime labels are plain strings; ours are `key=value`."""
    return [f"{key}={value}" for key, value in sorted(tags.items())]


@dataclass
class _CreateCall:
    """The create in progress in this task: what its 429 answers were."""

    surface_429: bool
    throttled: int = 0


_CREATE_CALL: contextvars.ContextVar[_CreateCall | None] = contextvars.ContextVar("stampede_prime_create", default=None)


def _throttle_error(status: int, body: Any, headers: Mapping[str, str], phase: Phase = Phase.CREATE) -> ProviderError:
    return error_from_response(status, body, phase, retry_after_of(headers, body))


def _surfaced_429_phase(request: httpx.Request) -> Phase | None:
    """A 429 the adapter raises past the SDK's retries (10 s, then 30 s, whatever Retry-After said): a status look
    (one throttled batch would hold every sandbox in it; the adapter asks again after Retry-After) and a delete
    (retried by `terminate` after Retry-After). Listing and bulk delete keep the SDK's own retries."""
    path = request.url.path
    if request.method == "POST" and path.endswith("/sandbox/status:batchGet"):
        return Phase.READY
    if request.method == "DELETE" and path.rstrip("/").rsplit("/", 1)[0].endswith("/sandbox"):
        return Phase.TERMINATE
    return None


class _DefaultTimeoutClient(httpx.AsyncClient):
    """The control-plane client: prime-sandboxes 0.5.1 passes `timeout=None` on every call, which httpx reads as
    "no timeout at all" (a hung answer then holds a rollout, or a whole status batch, forever); here None means the
    client's own timeout (`api_timeout`)."""

    async def request(self, method: str, url: Any, *args: Any, **kwargs: Any) -> httpx.Response:
        if kwargs.get("timeout", httpx.USE_CLIENT_DEFAULT) is None:
            kwargs["timeout"] = httpx.USE_CLIENT_DEFAULT
        return await super().request(method, url, *args, **kwargs)


class PrimeProvider(Provider):
    """Prime sandboxes through `prime_sandboxes.AsyncSandboxClient`."""

    name = "prime"

    def __init__(self, options: PrimeOptions) -> None:
        self.options = options
        self._sdk: AsyncSandboxClient | None = None
        self._create_gate = ThrottleGate(options.max_backoff_s)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> PrimeProvider:
        return cls(PrimeOptions.from_mapping(options))

    # --- the SDK client, built once --------------------------------------------------------------------

    @property
    def sdk(self) -> AsyncSandboxClient:
        if self._sdk is None:
            self._sdk = self._build_sdk()
        return self._sdk

    def _build_sdk(self) -> AsyncSandboxClient:
        try:
            sdk = AsyncSandboxClient(api_key=self.options.api_key, max_connections=self.options.gateway_max_connections)
        except ValueError as exc:
            raise ProviderConfigError(f"prime provider: the Prime SDK's configuration is unusable: {exc}") from None
        api = sdk.client
        if self.options.base_url is not None:
            api.base_url = self.options.base_url
        # Same headers, timeouts and redirects as the SDK's own control-plane client; a wider pool and our
        # response hook (429s on create).
        old = api.client
        seconds = self.options.api_timeout_s
        connect_s = min(seconds, old.timeout.connect or seconds)
        # http1: keep-alive HTTP/1.1 without httpcore's per-request pool walk (http1_transport.py); httpx: httpcore's
        wire: dict[str, Any] = (
            {"transport": Http1Transport(connect_timeout_s=connect_s)}
            if self.options.api_transport == "http1"
            else {
                "limits": httpx.Limits(
                    max_connections=self.options.api_max_connections,
                    max_keepalive_connections=min(self.options.api_keepalive, self.options.api_max_connections),
                )
            }
        )
        api.client = _DefaultTimeoutClient(
            headers=old.headers,
            follow_redirects=old.follow_redirects,
            timeout=httpx.Timeout(seconds, connect=connect_s),
            event_hooks={"response": [self._on_response]},
            **wire,
        )
        if self.options.auth_cache == "memory":
            _keep_auth_cache_in_memory(sdk)
        return sdk

    async def _on_response(self, response: httpx.Response) -> None:
        """A 429 answering a create: counted, and (unless `retry_429`) raised past the SDK's retries."""
        if response.status_code != 429:
            return
        call = _CREATE_CALL.get()
        if call is not None:
            call.throttled += 1
            phase: Phase | None = Phase.CREATE if call.surface_429 else None
        else:
            phase = _surfaced_429_phase(response.request) if not self.options.retry_429 else None
        if phase is None:
            return
        await response.aread()
        try:
            body = response.json()
        except ValueError:
            body = {"detail": response.text[:200]}
        raise _throttle_error(response.status_code, body, response.headers, phase)

    @property
    def where(self) -> str:
        return self.options.base_url or self.sdk.client.base_url

    # --- the contract ----------------------------------------------------------------------------------

    async def preflight(self) -> None:
        where = self.where

        def payment_required(exc: BaseException) -> ProviderError | None:
            if isinstance(exc, PaymentRequiredError):
                return ProviderError(FailureKind.QUOTA_EXHAUSTED, f"{where}: payment required (HTTP 402)")
            return None

        async with preflight_errors(
            where,
            self.classify,
            timeout_s=self.options.preflight_timeout_s,
            refused=lambda exc: "HTTP 401" if isinstance(exc, UnauthorizedError) else None,
            vendor_errors=(APIError,),
            special=payment_required,
        ):
            await self.sdk.list(per_page=1, team_id=self.options.team_id)

    def create_request(self, spec: SandboxSpec) -> CreateSandboxRequest:
        """The SDK request for a spec; a spec the SDK refuses is `invalid_request`. An image `checkpoint:<id>` (what
        `snapshot` answers) is a checkpoint to start from (`checkpoint_id`, its own image); any other a docker image."""
        lifetime = -1 if math.isinf(spec.lifetime_s) else max(1, math.ceil(spec.lifetime_s / 60))
        image = spec.image or self.options.image
        checkpoint = image[len(CHECKPOINT_PREFIX) :] if image.startswith(CHECKPOINT_PREFIX) else None
        # the SDK refuses an image or a disk size beside a checkpoint: both are the checkpoint's
        source: dict[str, Any] = (
            {"checkpoint_id": checkpoint} if checkpoint else {"docker_image": image, "disk_size_gb": spec.disk_gb}
        )
        try:
            return CreateSandboxRequest(  # type: ignore[call-arg]
                name=f"stampede-{spec.rollout_id}",
                **source,
                cpu_cores=spec.cpu,
                memory_gb=spec.memory_mb / 1024,
                timeout_minutes=lifetime,
                environment_vars=dict(spec.env) or None,
                labels=label_strings(spec.tags()),
                network_allowlist=None if spec.network else [],  # an empty allowlist: no egress
                team_id=self.options.team_id,
            )
        except pydantic.ValidationError as exc:
            raise ProviderError(FailureKind.INVALID_REQUEST, f"the Prime SDK refused the spec: {exc}") from None

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        request = self.create_request(spec)
        call = _CreateCall(surface_429=not self.options.retry_429)
        async with self._create_gate.passage() as waited:
            token = _CREATE_CALL.set(call)
            try:
                sandbox = await self.sdk.create(request)
            except ProviderError as exc:
                if exc.kind is FailureKind.RATE_LIMITED:
                    self._create_gate.throttled(exc.retry_after)  # Retry-After holds every create, not just this
                else:
                    self._create_gate.answered()
                raise
            except Exception:
                self._create_gate.answered()
                raise
            finally:
                _CREATE_CALL.reset(token)
            self._create_gate.answered()
        meta: dict[str, Any] = {"throttled_429": call.throttled} if call.throttled else {}
        if waited:
            meta["throttle_wait_s"] = waited
        return SandboxRef(
            sandbox_id=sandbox.id, provider=self.name, run_id=spec.run_id, rollout_id=spec.rollout_id, meta=meta
        )

    async def wait_ready(self, ref: SandboxRef, timeout: float) -> ReadyObservation | None:
        """The SDK's own readiness wait (its status polling backs off from 1 s to 10 s); beside it, with
        `readiness_probe`, a direct `true` probe on a fast schedule, so a run shows how much of the SDK-observed
        readiness is the SDK's polling rather than the vendor."""
        started = time.monotonic()
        probe = asyncio.ensure_future(self._probe(ref.sandbox_id)) if self.options.readiness_probe else None
        lost: list[BaseException] = []
        try:
            async with asyncio.timeout(timeout):
                while True:
                    remaining = max(0.0, timeout - (time.monotonic() - started))
                    try:
                        await cancellable(
                            self.sdk.wait_for_creation(ref.sandbox_id, max_attempts=_max_attempts(remaining))
                        )
                        break
                    except Exception as exc:
                        if image_pull_failed(exc):  # the vendor placed it: the pull inside readiness
                            raise ProviderError(FailureKind.IMAGE, str(exc), phase=Phase.PULL) from exc
                        pause = self._lost_look_pause(exc)
                        if pause is None:
                            raise
                        lost.append(exc)  # a status look lost on the way (a hang, reset, 5xx, 429, garbage)
                        await asyncio.sleep(pause)
        except TimeoutError:
            why = f" ({len(lost)} status looks lost, the last: {lost[-1]!r:.120})" if lost else ""
            raise ProviderError(FailureKind.READY_TIMEOUT, f"not ready within {timeout:g}s{why}") from None
        finally:
            if probe is not None and not probe.done():
                probe.cancel()
        if probe is None or probe.cancelled() or probe.exception() is not None:
            return None
        return ReadyObservation(probe_ready_s=probe.result() - started)

    def _lost_look_pause(self, exc: BaseException) -> float | None:
        """How long to wait before asking again after a status look was lost (None: a real answer, raise it).

        The SDK's readiness wait raises on any failed status request, and its batcher fails every sandbox in the
        batch at once: one lost look must cost those sandboxes a retry, not their rollout."""
        if isinstance(exc, ProviderError) and exc.kind is FailureKind.RATE_LIMITED:
            return min(exc.retry_after or THROTTLE_DEFAULT_S, self.options.max_backoff_s)
        if isinstance(exc, APITimeoutError) or classify_prime(exc, Phase.READY) is FailureKind.TRANSPORT:
            return _RETRY_FIRST_S
        return None

    async def _probe(self, sandbox_id: str) -> float:
        """When `true` first ran in the sandbox (monotonic), asking at 50 ms, then twice as late each time, up
        to 1 s: the readiness a client that simply tries the sandbox would see."""
        delay = PROBE_FIRST_S
        while True:
            await asyncio.sleep(delay)
            try:
                result = await cancellable(self.sdk.execute_command(sandbox_id, "true", timeout=5))
                if result.exit_code == 0:
                    return time.monotonic()
            except Exception:  # not running yet (or the gateway not yet reachable): look again later
                pass
            delay = min(2 * delay, PROBE_MAX_S)

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        seconds = max(1, math.ceil(timeout))
        try:
            async with asyncio.timeout(seconds + _EXEC_GRACE_S):
                result = await cancellable(self.sdk.execute_command(ref.sandbox_id, shlex.join(argv), timeout=seconds))
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no answer within {seconds + _EXEC_GRACE_S:g}s") from None
        return ExecResult(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr)

    async def exec_stream(
        self, ref: SandboxRef, argv: Sequence[str], timeout: float, on_output: Callable[[str], None] | None = None
    ) -> StreamedExec:
        """`open_process` (the gateway's command session, streamed): stdout and stderr iterated as they come, then
        `wait`; past the timeout the process is killed."""
        clock = OutputClock(on_output)
        seconds = max(1, math.ceil(timeout))
        process: Any = None

        async def read(stream: AsyncIterator[bytes]) -> bytes:
            parts: list[bytes] = []
            async for chunk in stream:
                clock.seen(chunk)
                parts.append(chunk)
            return b"".join(parts)

        try:
            async with asyncio.timeout(seconds + _EXEC_GRACE_S):
                process = await cancellable(self.sdk.open_process(ref.sandbox_id, shlex.join(argv)))
                stdout, stderr = await asyncio.gather(read(process.stdout), read(process.stderr))
                code = await cancellable(process.wait())
        except TimeoutError:
            if process is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(process.kill(), _EXEC_GRACE_S)
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no end within {seconds + _EXEC_GRACE_S:g}s") from None
        finally:
            if process is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(process.aclose(), _EXEC_GRACE_S)
        result = ExecResult(int(code), stdout.decode(errors="replace"), stderr.decode(errors="replace"))
        return clock.done(result)

    async def start_process(self, ref: SandboxRef, argv: Sequence[str]) -> str:
        """`start_background_job` (the SDK's nohup launch, its exit code written to a file): the job's own record, as
        JSON, is the handle, so any process of the run can poll it."""
        job = await cancellable(self.sdk.start_background_job(ref.sandbox_id, shlex.join(argv)))
        return str(job.model_dump_json())

    async def process_exit(self, ref: SandboxRef, handle: str) -> int | None:
        """`get_background_job_status` (the exit file, without downloading the output)."""
        job = BackgroundJob.model_validate_json(handle)
        status = await cancellable(self.sdk.get_background_job_status(ref.sandbox_id, job))
        return None if not status.completed or status.exit_code is None else int(status.exit_code)

    async def snapshot(self, ref: SandboxRef) -> str:
        """`checkpoint` (a filesystem checkpoint), then `wait_for_checkpoint` until it is DURABLE: `checkpoint:<id>`
        is what `create` starts from."""
        checkpoint = await cancellable(self.sdk.checkpoint(ref.sandbox_id))
        try:
            durable = await cancellable(self.sdk.wait_for_checkpoint(checkpoint.id))
        except RuntimeError as exc:  # FAILED or DELETING: the vendor refused to keep it
            raise ProviderError(FailureKind.SNAPSHOT_ERROR, str(exc)) from exc
        return CHECKPOINT_PREFIX + durable.id

    async def upload_file(self, ref: SandboxRef, path: str, data: bytes) -> None:
        """`upload_bytes`: the gateway's multipart upload (a relative path is root's home's)."""
        await cancellable(self.sdk.upload_bytes(ref.sandbox_id, path, bytes(data), posixpath.basename(path) or "file"))

    async def download_file(self, ref: SandboxRef, path: str) -> bytes:
        """`download_file` into a temporary file (the SDK writes to a local path), read back."""
        with tempfile.TemporaryDirectory(prefix="stampede-prime-") as folder:
            local = os.path.join(folder, "download")
            try:
                await cancellable(self.sdk.download_file(ref.sandbox_id, path, local))
            except APIError as exc:
                response = getattr(exc.__cause__, "response", None)
                if getattr(response, "status_code", None) == 404:
                    raise FileNotFoundError(f"no such file in the sandbox: {path}") from exc
                raise
            return await asyncio.to_thread(Path(local).read_bytes)

    async def terminate(self, ref: SandboxRef) -> None:
        """Done once the API confirmed the delete (a JSON object; 404: already gone). A transient failure (the
        SDK's own retries spent: 5xx, reset, timeout, an unreadable answer) is asked again, up to
        `terminate_attempts`, so one blip does not leave the sandbox alive until the end-of-run sweep."""

        async def delete_or_gone() -> None:
            try:
                await self.sdk.delete(ref.sandbox_id)
            except APIError as exc:
                if not str(exc).startswith("HTTP 404"):  # 404: already gone, terminate is idempotent
                    raise

        try:
            await self._asked_again(delete_or_gone)
        finally:
            if self.options.auth_cache == "memory":
                await self.sdk._auth_cache.invalidate(ref.sandbox_id)

    async def _asked_again(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """An idempotent control-plane call (delete, list, bulk delete) asked again after a transient failure, up
        to `terminate_attempts`: one blip must not leave a sandbox alive, nor end the sweep that reaps leftovers."""
        delay = _RETRY_FIRST_S
        for attempt in range(1, self.options.terminate_attempts + 1):
            try:
                return await call()
            except APIError as exc:
                if attempt == self.options.terminate_attempts or classify_prime(exc, Phase.TERMINATE) in (
                    FailureKind.AUTH,
                    FailureKind.INVALID_REQUEST,
                    FailureKind.QUOTA_EXHAUSTED,
                ):
                    raise
            except ProviderError as exc:  # a 429 surfaced past the SDK's retries
                if exc.kind is not FailureKind.RATE_LIMITED or attempt == self.options.terminate_attempts:
                    raise
                await asyncio.sleep(min(exc.retry_after or THROTTLE_DEFAULT_S, self.options.max_backoff_s))
                continue
            except (ValueError, *TRANSPORT_ERRORS, httpx.TimeoutException):
                if attempt == self.options.terminate_attempts:
                    raise
            await asyncio.sleep(delay)
            delay = min(2 * delay, _RETRY_MAX_S)
        raise AssertionError("unreachable")  # the loop returns or raises

    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        labels = label_strings(owner_labels(run_id, engine))
        return [
            SandboxRef(sandbox_id=sandbox.id, provider=self.name, run_id=run_id)
            async for sandbox in self._live_sandboxes(labels)
        ]

    async def list_all_owned(self) -> list[SandboxRef]:
        """Every live sandbox whose labels carry a run label (Prime filters by `key=value` only: we filter)."""
        refs: list[SandboxRef] = []
        async for sandbox in self._live_sandboxes():
            run_id = tagged_by_stampede(sandbox.labels)
            if run_id is not None:
                refs.append(SandboxRef(sandbox_id=sandbox.id, provider=self.name, run_id=run_id))
        return refs

    async def _live_sandboxes(self, labels: list[str] | None = None) -> AsyncIterator[Any]:
        """Every sandbox not terminated carrying all `labels`, page by page (a lost page is asked again)."""
        for page in range(1, ALL_OWNED_MAX_PAGES + 1):
            listed = await self._asked_again(
                functools.partial(
                    self.sdk.list,
                    labels=labels,
                    exclude_terminated=True,
                    page=page,
                    per_page=LIST_PAGE,
                    team_id=self.options.team_id,
                )
            )
            for sandbox in listed.sandboxes:
                yield sandbox
            if not listed.has_next:
                return

    async def cleanup(self, run_id: str, engine: str | None = None) -> int:
        labels = label_strings(owner_labels(run_id, engine))
        result = await self._asked_again(lambda: self.sdk.bulk_delete(labels=labels, team_id=self.options.team_id))
        return len(result.succeeded)

    def classify(self, exc: BaseException, phase: Phase | None = None) -> FailureKind:
        return classify_prime(exc, phase)

    def versions(self) -> Mapping[str, str]:
        return {"prime-sandboxes": prime_sandboxes.__version__}

    async def aclose(self) -> None:
        sdk, self._sdk = self._sdk, None
        if sdk is not None:
            await sdk.aclose()


def _max_attempts(timeout: float) -> int:
    """The SDK's `max_attempts` whose wall-clock budget covers `timeout` (5 x 1 s, then 2 s each)."""
    if timeout <= 5:
        return max(1, math.ceil(timeout))
    return 5 + math.ceil((timeout - 5) / 2)


def _keep_auth_cache_in_memory(sdk: AsyncSandboxClient) -> None:
    """Gateway tokens stay in this process: no reading or rewriting ~/.prime/sandbox_auth_cache.json."""
    cache = sdk._auth_cache

    async def no_save() -> None:
        return None

    cache._loaded = True
    cache._save_cache = no_save  # type: ignore[method-assign]
