"""The `stub` provider: a lean client for the Prime-like REST API (our embedded stub speaks it).

Lean on purpose: its wire is `providers.http1_client` (keep-alive HTTP/1.1 without a client-side queue, far
cheaper a request than aiohttp's path), status polled in batches of up to 100 ids per request (as Prime's own
SDK coalesces), and every HTTP answer mapped onto the failure taxonomy. Files go through the gateway's upload and
download routes; `snapshot` is Prime's filesystem checkpoint (`checkpoint:<id>`, which `create` starts from), so the
contract's default fork works here too. No streamed exec or background process: the lean client reads whole answers. It is the baseline the SDK-based adapters are compared against for per-rollout CPU.

Under a hostile transport (issue 17; the fronts' `[faults]`): every request has a timeout (`request_timeout_s`; a
status look `status_timeout_s`), a status look lost on the way is asked again soon and its cost stays inside the
recorded poll window (`ready_poll_s`), a 2xx whose body is not the JSON object the protocol promises is a
classified vendor error (never a success), a terminate the vendor did not confirm is asked again
(`terminate_attempts`), and a create's 429 holds every create client-wide for its Retry-After (`max_backoff_s`).

Readiness waits are `status_poller.py` (batched status looks, each sandbox on its own schedule).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import shlex
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from providers.base import (
    THROTTLE_MAX_WAIT_S,
    ExecResult,
    FailureKind,
    Phase,
    Provider,
    ProviderConfigError,
    ProviderError,
    ReadyObservation,
    SandboxRef,
    SandboxSpec,
    classify_common,
    owner_labels,
    tagged_by_stampede,
    vendor_error_kind,
)
from providers.http1_client import Body, Http1Client
from providers.options import Option, declare, declared_options, declared_values, integer, number, parse_options, text
from providers.preflight import preflight_errors
from providers.throttle_gate import ThrottleGate
from providers.vendors.prime.statuses import error_from_response, retry_after_of
from providers.vendors.stub.status_poller import StatusPoller

DEFAULT_IMAGE = "python:3.11-slim"
CHECKPOINT_PREFIX = "checkpoint:"  # `snapshot`'s answer: `create` starts from that checkpoint (as the prime adapter)
CHECKPOINT_WAIT_S = 300.0  # how long a checkpoint may take to become DURABLE (prime-sandboxes' own default)
CHECKPOINT_LOOK_FIRST_S = 0.05  # the first look at a pending checkpoint; twice as late each time after
CHECKPOINT_LOOK_MAX_S = 1.0

# errorType of a sandbox that ended before RUNNING -> kind; anything else that dies before ready is died_before_ready
_READY_ERROR_KINDS: dict[str, FailureKind] = {
    "PROVISIONING_TIMEOUT": FailureKind.READY_TIMEOUT,
    "GATEWAY_REACHABILITY_TIMEOUT": FailureKind.READY_TIMEOUT,
    "IMAGE_PULL_FAILED": FailureKind.IMAGE,
    "OOM_KILLED": FailureKind.OOM,
}


def label_strings(tags: Mapping[str, str]) -> list[str]:
    """Prime labels are plain strings; ours are `key=value`."""
    return [f"{key}={value}" for key, value in sorted(tags.items())]


@dataclass(frozen=True, slots=True)
class StubOptions:
    """Where the Prime-like API is and how the client paces itself; each tunable field is its option's one default."""

    base_url: str
    token: str
    shard_urls: tuple[str, ...] = ()
    poll_interval_s: float = declare(0.05, number, positive=True)  # the longest wait between two looks, short waits
    # a long wait is looked at every `poll_share` of its length (capped at poll_max_s): the poll window stays
    # that small a share of the TTI without a 960-wide backlog of 299 s starts being asked about 20 times a second
    poll_share: float = declare(0.01, number, positive=True)
    poll_max_s: float = declare(2.0, number, positive=True)
    request_timeout_s: float = declare(60.0, number, positive=True)
    # one status:batchGet look; a lost look is asked again and holds up only the sandboxes it asked about
    status_timeout_s: float = declare(10.0, number, positive=True)
    terminate_attempts: int = declare(4, integer, minimum=1)  # a terminate the vendor did not confirm is asked again
    max_backoff_s: float = declare(THROTTLE_MAX_WAIT_S, number, positive=True)  # the longest a Retry-After holds one
    team_id: str | None = declare(None, text)

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> StubOptions:
        values = parse_options("stub", options, STUB_OPTIONS)
        urls = [url.strip().rstrip("/") for url in (values["base_url"] or "").split(",")]
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ProviderConfigError(f"stub provider needs --base-url http(s)://host:port (got {url!r})")
        if not values["token"]:
            raise ProviderConfigError("stub provider needs a token (--token or STAMPEDE_TOKEN)")
        tuned = declared_values(cls, values)
        tuned["poll_max_s"] = max(tuned["poll_max_s"], tuned["poll_interval_s"])
        shard_urls = tuple(urls) if len(urls) > 1 else ()
        return cls(base_url=urls[0], token=values["token"], shard_urls=shard_urls, **tuned)


STUB_OPTIONS: dict[str, Option] = {
    # the Prime-like API (--base-url; --local: the embedded stub). Several, comma-separated: one vendor sharded over
    # processes (each its own sandboxes), creates spread round-robin and every later call sent to the sandbox's own
    "base_url": text(),
    "token": text(),  # its bearer token (--token, STAMPEDE_TOKEN)
    **declared_options(StubOptions),
}
"""The stub provider's options (`--provider-option K=V`): `parse_options` rejects any other key."""


def _refused_token(exc: BaseException) -> str | None:
    """The API's own words when it refused the token (the request already classified the 401 or 403)."""
    return str(exc.args[0]) if isinstance(exc, ProviderError) and exc.kind is FailureKind.AUTH else None


@dataclass(frozen=True, slots=True)
class GatewayAuth:
    token: str
    url: str  # {gateway_url}/{user_ns}/{job_id}


TERMINATE_ATTEMPT_S = 10.0  # one terminate request (at most request_timeout_s); an unconfirmed one is asked again
RETRY_FIRST_S = 0.1  # the first pause before asking again after a transient failure; doubled each time
RETRY_MAX_S = 2.0

_UNREADABLE_KINDS: dict[Phase, FailureKind] = {
    Phase.CREATE: FailureKind.CREATE_ERROR,
    Phase.READY: FailureKind.TRANSPORT,  # the status API failing is not the sandbox failing
    Phase.EXEC: FailureKind.EXEC_ERROR,
    Phase.TERMINATE: FailureKind.TRANSPORT,  # the vendor did not confirm: the sandbox may live
}
"""An answer we cannot read (not JSON, not an object, fields missing), by phase: a vendor error, never ours."""

_NOT_RETRIED = frozenset({FailureKind.AUTH, FailureKind.INVALID_REQUEST, FailureKind.QUOTA_EXHAUSTED})


def unreadable(phase: Phase, status: int, what: str) -> ProviderError:
    """A 2xx answer that is not what the protocol promises (garbage, truncated, the wrong content type)."""
    return ProviderError(_unreadable_kind(phase), f"HTTP {status} but not a JSON object: {what[:120]!r}")


def _unreadable_kind(phase: Phase | None) -> FailureKind:
    """An unreadable answer's kind: the table's, else the phase's vendor error (an upload's: `transfer_error`)."""
    phase = phase or Phase.CREATE
    return _UNREADABLE_KINDS.get(phase) or vendor_error_kind(phase)


ALL_OWNED_MAX_PAGES = 10_000  # 1,000,000 sandboxes: a bound, not a limit anyone meets


class StubProvider(Provider):
    """The Prime-like REST API over `Http1Client`."""

    name = "stub"

    def __init__(self, options: StubOptions) -> None:
        self.options = options
        self._http: Http1Client | None = None
        self._gateway: dict[str, GatewayAuth] = {}
        self._poller = StatusPoller(
            self._ask_statuses,
            options.poll_interval_s,
            options.poll_share,
            options.poll_max_s,
            shard_of=self.base_for if options.shard_urls else None,
        )
        self._create_gate = ThrottleGate(options.max_backoff_s)
        # a sharded vendor: each sandbox's own shard (only kept when there are shards, off the single-vendor path)
        self._shard_of: dict[str, str] = {}
        self._checkpoint_shard: dict[str, str] = {}  # a checkpoint's shard (that of the sandbox it copied)
        self._next_shard = itertools.cycle(options.shard_urls) if options.shard_urls else None

    @property
    def vendor_urls(self) -> tuple[str, ...]:
        return self.options.shard_urls or (self.options.base_url,)

    def base_for(self, sandbox_id: str) -> str:
        """The API base that owns this sandbox (the one vendor, or the shard that created it)."""
        return self._shard_of.get(sandbox_id, self.options.base_url) if self._next_shard else self.options.base_url

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> StubProvider:
        return cls(StubOptions.from_mapping(options))

    @property
    def http(self) -> Http1Client:
        if self._http is None:
            # No cap on connections: a client-side queue would silently serialise a 960-wide burst inside the
            # harness and show up as vendor latency.
            self._http = Http1Client(
                headers={"Authorization": f"Bearer {self.options.token}", "User-Agent": "stampede-stub-client"},
                connect_timeout_s=10.0,
            )
        return self._http

    async def request(
        self,
        method: str,
        path: str,
        phase: Phase,
        *,
        json: Any = None,
        params: Any = None,
        timeout: float | None = None,
        base: str | None = None,
    ) -> dict[str, Any]:
        url = f"{base or self.options.base_url}/api/v1{path}"
        answer = await self.http.request(
            method,
            url,
            body=None if json is None else _json_bytes(json),
            params=params,
            timeout=timeout if timeout is not None else self.options.request_timeout_s,
        )
        text = answer.text()
        body = _parsed(text)
        if answer.status >= 400:
            detail = body if body is not None else {"detail": text[:500]}
            raise error_from_response(answer.status, detail, phase, retry_after_of(answer.headers, detail))
        if answer.status == 204:
            return {}
        if not isinstance(body, dict):
            raise unreadable(phase, answer.status, text)
        return body

    async def request_retrying(
        self, method: str, path: str, phase: Phase, *, attempts: int, timeout: float | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """An idempotent request asked again (bounded) after a transient failure: a 5xx, a 429 (after its
        Retry-After, at most max_backoff_s), a reset, a timeout or an unreadable answer. The last failure is
        raised, classified."""
        delay = RETRY_FIRST_S
        for attempt in range(1, attempts + 1):
            try:
                return await self.request(method, path, phase, timeout=timeout, **kwargs)
            except ProviderError as exc:
                if exc.kind in _NOT_RETRIED or exc.args[0].startswith("HTTP 404") or attempt == attempts:
                    raise
                pause = min(exc.retry_after, self.options.max_backoff_s) if exc.retry_after else delay
            except (TimeoutError, OSError) as exc:
                if attempt == attempts:
                    raise ProviderError(
                        FailureKind.TRANSPORT, f"{method} {path}: {type(exc).__name__}: {exc}"
                    ) from None
                pause = delay
            await asyncio.sleep(pause)
            delay = min(2 * delay, RETRY_MAX_S)
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _ask_statuses(self, ids: list[str], base: str | None) -> dict[str, Any]:
        """One `status:batchGet` for the poller: its own short timeout, so a hung answer delays only these ids."""
        return await self.request(
            "POST",
            "/sandbox/status:batchGet",
            Phase.READY,
            json={"sandbox_ids": ids},
            timeout=self.options.status_timeout_s,
            base=base,
        )

    async def preflight(self) -> None:
        for base in self.vendor_urls:
            async with preflight_errors(
                base, self.classify, refused=_refused_token, credential="the token", vendor_errors=(OSError,)
            ):
                await self.request("GET", "/sandbox", Phase.CREATE, params={"page": 1, "per_page": 1}, base=base)

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        image = spec.image or DEFAULT_IMAGE
        checkpoint = image[len(CHECKPOINT_PREFIX) :] if image.startswith(CHECKPOINT_PREFIX) else None
        payload: dict[str, Any] = {
            "name": f"stampede-{spec.rollout_id}",
            # a checkpoint brings its own image and disk (Prime's SDK refuses either beside it)
            **({"checkpoint_id": checkpoint} if checkpoint else {"docker_image": image, "disk_size_gb": spec.disk_gb}),
            "start_command": {"executable": "tail", "args": ["-f", "/dev/null"]},
            "cpu_cores": spec.cpu,
            "memory_gb": spec.memory_mb / 1024,
            "timeout_minutes": max(1, math.ceil(spec.lifetime_s / 60)),
            "labels": label_strings(spec.tags()),
            "idempotency_key": uuid.uuid4().hex,
        }
        if spec.env:
            payload["environment_vars"] = dict(spec.env)
        if self.options.team_id:
            payload["team_id"] = self.options.team_id
        base = next(self._next_shard) if self._next_shard else None
        if checkpoint is not None and checkpoint in self._checkpoint_shard:
            base = self._checkpoint_shard[checkpoint]  # a checkpoint lives on the shard of the sandbox it copied
        async with self._create_gate.passage() as waited:
            try:
                phase = Phase.FORK if checkpoint is not None else Phase.CREATE  # a copy fails as the fork
                body = await self.request("POST", "/sandbox", phase, json=payload, base=base)
            except ProviderError as exc:
                if exc.kind is FailureKind.RATE_LIMITED:
                    self._create_gate.throttled(exc.retry_after)
                else:
                    self._create_gate.answered()
                raise
            except Exception:
                self._create_gate.answered()  # not a 429: nothing to hold the other creates for
                raise
            self._create_gate.answered()
        sandbox_id = body.get("id")
        if not isinstance(sandbox_id, str) or not sandbox_id:
            raise unreadable(Phase.CREATE, 200, str(body))
        if base is not None:
            self._shard_of[sandbox_id] = base
        auth = body.get("gatewayAuth")
        if isinstance(auth, dict):
            with contextlib.suppress(KeyError, TypeError):
                self._gateway[sandbox_id] = _gateway_auth(auth)
        meta = {"throttle_wait_s": waited} if waited else {}
        return SandboxRef(
            sandbox_id=sandbox_id, provider=self.name, run_id=spec.run_id, rollout_id=spec.rollout_id, meta=meta
        )

    async def wait_ready(self, ref: SandboxRef, timeout: float) -> ReadyObservation:
        try:
            async with asyncio.timeout(timeout):
                snapshot, observation = await self._poller.wait(ref.sandbox_id)
        except TimeoutError:
            raise ProviderError(FailureKind.READY_TIMEOUT, f"not RUNNING within {timeout:g}s") from None
        status = snapshot.get("status")
        if status != "RUNNING":
            error_type = snapshot.get("error_type") or ""
            kind = _READY_ERROR_KINDS.get(error_type, FailureKind.DIED_BEFORE_READY)
            message = snapshot.get("error_message") or f"sandbox ended {status} before it was ready"
            raise ProviderError(kind, f"{status}/{error_type or '-'}: {message}")
        if ref.sandbox_id not in self._gateway:
            self._gateway[ref.sandbox_id] = await self._gateway_for(ref, Phase.READY)
        return observation

    async def _gateway_for(self, ref: SandboxRef, phase: Phase) -> GatewayAuth:
        """The sandbox's gateway token (asked again after a transient failure; an unreadable one is the phase's)."""
        for attempt in range(1, 4):
            auth = await self.request_retrying(
                "POST",
                f"/sandbox/{quote(ref.sandbox_id)}/auth",
                phase,
                attempts=3,
                timeout=self._attempt_timeout,
                base=self.base_for(ref.sandbox_id),
            )
            try:
                return _gateway_auth(auth)
            except (KeyError, TypeError):
                if attempt == 3:
                    raise unreadable(phase, 200, str(auth)) from None
        raise AssertionError("unreachable")

    @property
    def _attempt_timeout(self) -> float:
        return min(self.options.request_timeout_s, TERMINATE_ATTEMPT_S)

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        gateway = self._gateway.get(ref.sandbox_id)
        if gateway is None:
            gateway = self._gateway[ref.sandbox_id] = await self._gateway_for(ref, Phase.EXEC)
        payload = {
            "command": shlex.join(argv),
            "timeout": max(1, math.ceil(timeout)),
            "sandbox_id": ref.sandbox_id,
            "working_dir": None,
            "env": {},
        }
        grace = min(5.0, self.options.request_timeout_s)  # past the command's own deadline, the gateway's answer
        try:
            answer = await self.http.request(
                "POST",
                f"{gateway.url}/exec",
                body=_json_bytes(payload),
                headers={"Authorization": f"Bearer {gateway.token}"},
                timeout=timeout + grace,
            )
            text, status = answer.text(), answer.status
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no answer within {timeout + grace:g}s") from None
        parsed = _parsed(text)
        body = parsed if parsed is not None else {"detail": text[:500]}
        if status >= 400:
            error = error_from_response(status, body, Phase.EXEC)
            if error.kind is FailureKind.DIED_DURING_EXEC:
                error = await self._explain_death(ref, error)
            raise error
        exit_code = body.get("exit_code") if isinstance(parsed, dict) else None
        if isinstance(exit_code, bool) or not isinstance(exit_code, int):
            raise unreadable(Phase.EXEC, status, text)
        stdout, stderr = str(body.get("stdout") or ""), str(body.get("stderr") or "")
        return ExecResult(exit_code=exit_code, stdout=stdout, stderr=stderr)

    async def snapshot(self, ref: SandboxRef) -> str:
        """Prime's filesystem checkpoint (`POST /sandbox/{id}/checkpoints`), looked at until DURABLE (at 50 ms, then
        twice as late each time, up to 1 s); `checkpoint:<id>` is what `create` starts from."""
        base = self._shard_of.get(ref.sandbox_id)
        body = await self.request(
            "POST", f"/sandbox/{quote(ref.sandbox_id, safe='')}/checkpoints", Phase.SNAPSHOT, base=base
        )
        checkpoint = body.get("id")
        if not isinstance(checkpoint, str) or not checkpoint:
            raise unreadable(Phase.SNAPSHOT, 200, str(body))
        delay = CHECKPOINT_LOOK_FIRST_S
        try:
            async with asyncio.timeout(CHECKPOINT_WAIT_S):
                while body.get("state") != "DURABLE":
                    if body.get("state") in ("FAILED", "DELETING"):
                        raise ProviderError(FailureKind.SNAPSHOT_ERROR, f"checkpoint {checkpoint}: {body.get('error')}")
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, CHECKPOINT_LOOK_MAX_S)
                    path = f"/sandbox/checkpoints/{quote(checkpoint, safe='')}"
                    body = await self.request("GET", path, Phase.SNAPSHOT, base=base)
        except TimeoutError:
            raise ProviderError(
                FailureKind.SNAPSHOT_ERROR, f"checkpoint {checkpoint} not durable within {CHECKPOINT_WAIT_S:g}s"
            ) from None
        if base is not None:
            self._checkpoint_shard[checkpoint] = base
        return CHECKPOINT_PREFIX + checkpoint

    async def upload_file(self, ref: SandboxRef, path: str, data: bytes) -> None:
        """The gateway's multipart upload (Prime's route, as prime-sandboxes sends it). The form is three parts sent
        back to back, the data never copied: an engine's 16 shared repository tars go to 960 sandboxes at once."""
        boundary = uuid.uuid4().hex
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="file"\r\n\r\n'
        form = (head.encode(), data, f"\r\n--{boundary}--\r\n".encode())
        await self._file_call(
            ref, "POST", "upload", path, Phase.UPLOAD, form, f"multipart/form-data; boundary={boundary}"
        )

    async def download_file(self, ref: SandboxRef, path: str) -> bytes:
        return await self._file_call(ref, "GET", "download", path, Phase.DOWNLOAD)

    async def _file_call(
        self,
        ref: SandboxRef,
        method: str,
        route: str,
        path: str,
        phase: Phase,
        body: Body | None = None,
        content_type: str = "",
    ) -> bytes:
        """One call of the gateway's files routes; its errors are the step's (`phase`: an upload's or download's)."""
        gateway = self._gateway.get(ref.sandbox_id)
        if gateway is None:
            gateway = self._gateway[ref.sandbox_id] = await self._gateway_for(ref, Phase.EXEC)
        try:
            answer = await self.http.request(
                method,
                f"{gateway.url}/{route}",
                body=body,
                content_type=content_type,
                params={"path": path, "sandbox_id": ref.sandbox_id},
                headers={"Authorization": f"Bearer {gateway.token}"},
                timeout=self.options.request_timeout_s,
            )
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"{route} {path}: no answer in time") from None
        if answer.status >= 400:
            parsed = _parsed(answer.text())
            error = error_from_response(answer.status, parsed if parsed is not None else answer.text()[:500], phase)
            if answer.status == 404:
                raise FileNotFoundError(f"no such file in the sandbox: {path}") from error
            raise error
        return answer.body

    async def _explain_death(self, ref: SandboxRef, error: ProviderError) -> ProviderError:
        """A sandbox that vanished mid-command: ask the control plane why (OOM is its own kind)."""
        try:
            context = await self.request(
                "GET", f"/sandbox/{quote(ref.sandbox_id)}/error-context", Phase.EXEC, base=self.base_for(ref.sandbox_id)
            )
        except Exception:
            return error
        if context.get("error_type") == "OOM_KILLED":
            return ProviderError(FailureKind.OOM, f"{error.args[0]} (OOM_KILLED: {context.get('error_message') or ''})")
        return error

    async def terminate(self, ref: SandboxRef) -> None:
        """Done only when the vendor confirmed (a JSON object, or 404: already gone); a 5xx, 429, reset, timeout or
        unreadable answer is asked again (`terminate_attempts`), so one blip does not leak a sandbox until the sweep."""
        self._gateway.pop(ref.sandbox_id, None)
        try:
            await self.request_retrying(
                "DELETE",
                f"/sandbox/{quote(ref.sandbox_id)}",
                Phase.TERMINATE,
                attempts=self.options.terminate_attempts,
                timeout=self._attempt_timeout,
                base=self.base_for(ref.sandbox_id),
            )
        except ProviderError as exc:
            if exc.args[0].startswith("HTTP 404"):
                self._shard_of.pop(ref.sandbox_id, None)
                return  # already gone: terminate is idempotent
            raise
        self._shard_of.pop(ref.sandbox_id, None)

    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        labels = label_strings(owner_labels(run_id, engine))
        return [
            self._listed(sandbox["id"], run_id, base)
            for base in self.vendor_urls
            async for sandbox in self._active_sandboxes(base, labels)
        ]

    async def _active_sandboxes(self, base: str, labels: Sequence[str] = ()) -> AsyncIterator[dict[str, Any]]:
        """Every active sandbox of one vendor (shard) carrying all `labels`, page by page (asked again on a blip)."""
        for page in range(1, ALL_OWNED_MAX_PAGES + 1):
            body = await self.request_retrying(
                "GET",
                "/sandbox",
                Phase.TERMINATE,
                attempts=self.options.terminate_attempts,
                timeout=self._attempt_timeout,
                base=base,
                params=[
                    ("page", page),
                    ("per_page", 100),
                    *(("labels", label) for label in labels),
                    ("is_active", "true"),
                ],
            )
            for sandbox in body.get("sandboxes", []):
                yield sandbox
            if not body.get("hasNext"):
                return

    def _listed(self, sandbox_id: str, run_id: str, base: str) -> SandboxRef:
        if self._next_shard:
            self._shard_of[sandbox_id] = base  # a later terminate goes to the shard that listed it
        return SandboxRef(sandbox_id=sandbox_id, provider=self.name, run_id=run_id)

    async def cleanup(self, run_id: str, engine: str | None = None) -> int:
        labels = label_strings(owner_labels(run_id, engine))
        # the sweep is the last chance to reap a run's leftovers: one blip must not end it (bulk delete is idempotent)
        reaped = 0
        for base in self.vendor_urls:
            body = await self.request_retrying(
                "DELETE",
                "/sandbox",
                Phase.TERMINATE,
                attempts=self.options.terminate_attempts,
                timeout=self._attempt_timeout,
                json={"labels": labels},
                base=base,
            )
            reaped += len(body.get("succeeded", []))
        return reaped

    async def list_all_owned(self) -> list[SandboxRef]:
        """Every active sandbox whose labels carry a run label (the API filters by `key=value` only: we filter)."""
        refs: list[SandboxRef] = []
        for base in self.vendor_urls:
            async for sandbox in self._active_sandboxes(base):
                run_id = tagged_by_stampede(sandbox.get("labels"))
                if run_id is not None:
                    refs.append(self._listed(sandbox["id"], run_id, base))
        return refs

    def classify(self, exc: BaseException, phase: Phase | None = None) -> FailureKind:
        if isinstance(exc, (KeyError, ValueError, TypeError)):
            # The API answered something we cannot read: a vendor error in this phase, not ours.
            return _unreadable_kind(phase)
        return classify_common(exc, phase)

    def versions(self) -> Mapping[str, str]:
        return {"http": "stampede http1_client"}

    async def aclose(self) -> None:
        await self._poller.close()
        if self._http is not None:
            await self._http.close()
            self._http = None


def _gateway_auth(auth: Mapping[str, Any]) -> GatewayAuth:
    return GatewayAuth(
        token=str(auth["token"]),
        url=f"{str(auth['gateway_url']).rstrip('/')}/{auth['user_ns']}/{auth['job_id']}",
    )


def _json_bytes(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def _parsed(text: str) -> Any:
    """The JSON of an answer's text, or None when it is not JSON (empty, garbage, HTML, cut short)."""
    try:
        return json.loads(text)
    except ValueError:
        return None
