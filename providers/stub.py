"""The `stub` provider: a lean aiohttp client for the Prime-like REST API (our embedded stub speaks it).

Lean on purpose: one shared connection pool sized for thousands of rollouts, status polled in batches of up to
100 ids per request (as Prime's own SDK coalesces), and every HTTP answer mapped onto the failure taxonomy.
It is the baseline the SDK-based adapters are compared against for per-rollout CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
import math
import shlex
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

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
    classify_common,
    owner_labels,
    tagged_by_stampede,
)
from providers.options import Option, number, parse_options, text
from providers.prime_statuses import error_from_response, retry_after_of

DEFAULT_IMAGE = "python:3.11-slim"
BATCH_LIMIT = 100
TERMINAL_STATUSES = frozenset({"ERROR", "TERMINATED", "TIMEOUT"})

# errorType of a sandbox that ended before RUNNING -> kind. Anything else that dies before ready is, by
# definition, died_before_ready.
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
    base_url: str
    token: str
    poll_interval_s: float = 0.05
    poll_share: float = 0.01
    poll_max_s: float = 2.0
    request_timeout_s: float = 60.0
    team_id: str | None = None

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> StubOptions:
        values = parse_options("stub", options, STUB_OPTIONS)
        base_url = (values["base_url"] or "").rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            raise ProviderConfigError(f"stub provider needs --base-url http(s)://host:port (got {base_url!r})")
        if not values["token"]:
            raise ProviderConfigError("stub provider needs a token (--token or STAMPEDE_TOKEN)")
        return cls(
            base_url=base_url,
            token=values["token"],
            poll_interval_s=values["poll_interval_s"],
            poll_share=values["poll_share"],
            poll_max_s=max(values["poll_max_s"], values["poll_interval_s"]),
            request_timeout_s=values["request_timeout_s"],
            team_id=values["team_id"],
        )


STUB_OPTIONS: dict[str, Option] = {
    "base_url": text(),  # the Prime-like API (--base-url; --local: the embedded stub)
    "token": text(),  # its bearer token (--token, STAMPEDE_TOKEN)
    "poll_interval_s": number(0.05, positive=True),  # the longest wait between two looks while a wait is short
    # a long wait is looked at every `poll_share` of its length (capped at poll_max_s): the poll window stays
    # that small a share of the TTI without a 960-wide backlog of 299 s starts being asked about 20 times a second
    "poll_share": number(0.01, positive=True),
    "poll_max_s": number(2.0, positive=True),
    "request_timeout_s": number(60.0, positive=True),
    "team_id": text(),
}
"""The stub provider's options (`--provider-option K=V`): `parse_options` rejects any other key."""


@dataclass(frozen=True, slots=True)
class GatewayAuth:
    token: str
    url: str  # {gateway_url}/{user_ns}/{job_id}


FIRST_LOOK_S = 0.01
"""A sandbox's first status look comes this long after its create was acknowledged; each later one waits twice
as long as the one before, up to the poll interval, and once the sandbox has waited long, a fixed share of its
wait so far (up to a ceiling). A fast vendor is seen ready within milliseconds; a slow start's poll window stays
the same small share of its TTI (the timing-error budget is relative too) while it costs a few looks a minute,
not twenty a second."""
COALESCE_S = 0.005  # sandboxes due this soon ride in the same batch request
MIN_ROUND_GAP_S = 0.005  # at most 200 batch rounds a second, however many sandboxes wait
LOOK_TIMEOUT_S = 10.0  # one status request; a lost one is asked again, nobody else waits for it


@dataclass(slots=True)
class _Waiting:
    """One sandbox being waited for: when to look next, and when it was last seen not ready."""

    futures: list[asyncio.Future[tuple[dict[str, Any], ReadyObservation]]]
    due: float
    delay: float
    seen_not_ready_at: float  # when the last look that found it not ready was sent (or the create returned)
    since: float  # when the wait began
    looks: int = 0
    in_flight: bool = False


class StatusPoller:
    """Coalesces readiness waits into `status:batchGet` requests of up to 100 ids, each sandbox on its own
    backoff schedule (FIRST_LOOK_S doubling up to the poll interval, then `share` of the wait so far, up to
    `max_s`).

    Requests are fire-and-forget tasks with their own timeout: one slow or hung answer delays only the
    sandboxes it asked about, and only until LOOK_TIMEOUT_S, never the rest of the fleet.
    """

    def __init__(self, provider: StubProvider, interval_s: float, share: float = 0.01, max_s: float = 2.0) -> None:
        self.provider = provider
        self.interval_s = interval_s
        self.share = share
        self.max_s = max(max_s, interval_s)
        self._waiting: dict[str, _Waiting] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self._backoff_until = 0.0
        # (due, seq, sandbox id): the next look of each sandbox; stale entries are skipped when reached
        self._schedule: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._wake_at = math.inf  # when the scheduler will look again unless woken earlier

    def _plan(self, sandbox_id: str, due: float) -> None:
        heapq.heappush(self._schedule, (due, next(self._seq), sandbox_id))
        if due < self._wake_at:
            self._wake.set()

    def _usable(self, entry: tuple[float, int, str]) -> bool:
        waiting = self._waiting.get(entry[2])
        return waiting is not None and not waiting.in_flight and waiting.due == entry[0]

    def _pop_due(self, limit: float) -> list[str]:
        """The sandboxes whose look is due by `limit`, each once (O(log n) a sandbox, never a scan of all)."""
        due: list[str] = []
        while self._schedule and self._schedule[0][0] <= limit:
            entry = heapq.heappop(self._schedule)
            if self._usable(entry):
                self._waiting[entry[2]].in_flight = True
                due.append(entry[2])
        return due

    def _next_due(self) -> float | None:
        while self._schedule and not self._usable(self._schedule[0]):
            heapq.heappop(self._schedule)
        return self._schedule[0][0] if self._schedule else None

    async def wait(self, sandbox_id: str) -> tuple[dict[str, Any], ReadyObservation]:
        """The first status snapshot that is RUNNING or terminal, and how promptly it was seen."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[dict[str, Any], ReadyObservation]] = loop.create_future()
        now = loop.time()
        waiting = self._waiting.get(sandbox_id)
        if waiting is None:
            first = min(FIRST_LOOK_S, self.interval_s)
            self._waiting[sandbox_id] = _Waiting(
                [future], due=now + first, delay=first, seen_not_ready_at=now, since=now
            )
            self._plan(sandbox_id, now + first)
        else:
            waiting.futures.append(future)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        try:
            return await future
        finally:
            waiting = self._waiting.get(sandbox_id)
            if waiting is not None:
                with contextlib.suppress(ValueError):
                    waiting.futures.remove(future)
                if not waiting.futures:
                    del self._waiting[sandbox_id]

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last_round = -math.inf
        try:
            while self._waiting:
                self._wake.clear()
                now = loop.time()
                if now >= self._backoff_until and now - last_round >= MIN_ROUND_GAP_S:
                    due = self._pop_due(now + COALESCE_S)
                    for start in range(0, len(due), BATCH_LIMIT):
                        task = loop.create_task(self._look(due[start : start + BATCH_LIMIT], now))
                        self._requests.add(task)
                        task.add_done_callback(self._requests.discard)
                    if due:
                        last_round = now
                next_due = self._next_due()
                self._wake_at = max(
                    next_due if next_due is not None else now + self.interval_s,
                    last_round + MIN_ROUND_GAP_S,
                    self._backoff_until,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=max(0.0, self._wake_at - loop.time()))
        finally:
            self._wake_at = math.inf
            if not self._waiting:
                self._schedule.clear()

    async def _look(self, ids: list[str], sent_at: float) -> None:
        """One batch request: resolve the sandboxes that settled, reschedule the rest."""
        loop = asyncio.get_running_loop()
        body: dict[str, Any] = {}
        try:
            body = await self.provider.request(
                "POST", "/sandbox/status:batchGet", Phase.READY, json={"sandbox_ids": ids}, timeout=LOOK_TIMEOUT_S
            )
        except ProviderError as exc:
            if exc.kind is FailureKind.AUTH:
                self._fail(ids, exc)
            if exc.retry_after:
                self._backoff_until = max(self._backoff_until, loop.time() + exc.retry_after)
        except (TimeoutError, aiohttp.ClientError, OSError):
            pass  # one lost look is not a failed rollout; the rollout's own deadline still holds
        received_at = loop.time()
        settled: set[str] = set()
        for snapshot in body.get("statuses", []):
            status = snapshot.get("status")
            sandbox_id = snapshot.get("sandbox_id")
            waiting = self._waiting.get(sandbox_id)
            if waiting is None:
                continue
            waiting.looks += 1
            if status == "RUNNING" or status in TERMINAL_STATUSES:
                observation = ReadyObservation(received_at - waiting.seen_not_ready_at, waiting.looks)
                self._resolve(waiting, (snapshot, observation))
                settled.add(sandbox_id)
            else:
                waiting.seen_not_ready_at = sent_at
        for error in body.get("errors", []):
            sandbox_id = error.get("sandbox_id")
            settled.add(sandbox_id)
            self._fail(
                [sandbox_id],
                ProviderError(FailureKind.DIED_BEFORE_READY, f"{error.get('code')}: {error.get('message')}"),
            )
        for sandbox_id in ids:
            waiting = self._waiting.get(sandbox_id)
            if waiting is not None and sandbox_id not in settled:
                waiting.in_flight = False
                waiting.delay = self.next_delay(waiting.delay, received_at - waiting.since)
                waiting.due = received_at + waiting.delay
                self._plan(sandbox_id, waiting.due)

    def next_delay(self, delay: float, waited: float) -> float:
        """The gap before the next look at a sandbox not ready after `waited` seconds (see FIRST_LOOK_S)."""
        return min(max(min(2 * delay, self.interval_s), self.share * waited), self.max_s)

    @staticmethod
    def _resolve(waiting: _Waiting, result: tuple[dict[str, Any], ReadyObservation]) -> None:
        for future in waiting.futures:
            if not future.done():
                future.set_result(result)

    def _fail(self, ids: Sequence[str], exc: BaseException) -> None:
        for sandbox_id in ids:
            waiting = self._waiting.get(sandbox_id)
            for future in waiting.futures if waiting is not None else ():
                if not future.done():
                    future.set_exception(exc)

    async def close(self) -> None:
        for task in [self._task, *self._requests]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


ALL_OWNED_MAX_PAGES = 10_000  # 1,000,000 sandboxes: a bound, not a limit anyone meets


class StubProvider(Provider):
    """The Prime-like REST API through plain aiohttp."""

    name = "stub"

    def __init__(self, options: StubOptions) -> None:
        self.options = options
        self._session: aiohttp.ClientSession | None = None
        self._gateway: dict[str, GatewayAuth] = {}
        self._poller = StatusPoller(self, options.poll_interval_s, options.poll_share, options.poll_max_s)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> StubProvider:
        return cls(StubOptions.from_mapping(options))

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # limit=0: no client-side queue. aiohttp's default of 100 would silently serialise a 960-wide
            # burst inside the harness and show up as vendor latency.
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.options.request_timeout_s, sock_connect=10),
                headers={"Authorization": f"Bearer {self.options.token}", "User-Agent": "stampede-stub-client"},
            )
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        phase: Phase,
        *,
        json: Any = None,
        params: Any = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        url = f"{self.options.base_url}/api/v1{path}"
        limit = aiohttp.ClientTimeout(total=timeout, sock_connect=10) if timeout is not None else None
        async with self.session.request(method, url, json=json, params=params, timeout=limit) as response:
            body = await _json_or_text(response)
            if response.status >= 400:
                raise error_from_response(response.status, body, phase, retry_after_of(response.headers, body))
            return body if isinstance(body, dict) else {}

    async def preflight(self) -> None:
        try:
            await self.request("GET", "/sandbox", Phase.CREATE, params={"page": 1, "per_page": 1})
        except ProviderError as exc:
            if exc.kind is FailureKind.AUTH:
                raise ProviderError(
                    FailureKind.AUTH, f"{self.options.base_url} refused the token ({exc.args[0]})"
                ) from None
            raise
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ProviderError(FailureKind.TRANSPORT, f"{self.options.base_url} is unreachable: {exc}") from None

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        payload: dict[str, Any] = {
            "name": f"stampede-{spec.rollout_id}",
            "docker_image": spec.image or DEFAULT_IMAGE,
            "start_command": {"executable": "tail", "args": ["-f", "/dev/null"]},
            "cpu_cores": spec.cpu,
            "memory_gb": spec.memory_mb / 1024,
            "disk_size_gb": spec.disk_gb,
            "timeout_minutes": max(1, math.ceil(spec.lifetime_s / 60)),
            "labels": label_strings(spec.tags()),
            "idempotency_key": uuid.uuid4().hex,
        }
        if spec.env:
            payload["environment_vars"] = dict(spec.env)
        if self.options.team_id:
            payload["team_id"] = self.options.team_id
        body = await self.request("POST", "/sandbox", Phase.CREATE, json=payload)
        sandbox_id = body["id"]
        auth = body.get("gatewayAuth")
        if isinstance(auth, dict):
            self._gateway[sandbox_id] = _gateway_auth(auth)
        return SandboxRef(sandbox_id=sandbox_id, provider=self.name, run_id=spec.run_id, rollout_id=spec.rollout_id)

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
            auth = await self.request("POST", f"/sandbox/{quote(ref.sandbox_id)}/auth", Phase.READY)
            self._gateway[ref.sandbox_id] = _gateway_auth(auth)
        return observation

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        gateway = self._gateway.get(ref.sandbox_id)
        if gateway is None:
            auth = await self.request("POST", f"/sandbox/{quote(ref.sandbox_id)}/auth", Phase.EXEC)
            gateway = self._gateway[ref.sandbox_id] = _gateway_auth(auth)
        payload = {
            "command": shlex.join(argv),
            "timeout": max(1, math.ceil(timeout)),
            "sandbox_id": ref.sandbox_id,
            "working_dir": None,
            "env": {},
        }
        try:
            async with self.session.post(
                f"{gateway.url}/exec",
                json=payload,
                headers={"Authorization": f"Bearer {gateway.token}"},
                timeout=aiohttp.ClientTimeout(total=timeout + 5, sock_connect=10),
            ) as response:
                body = await _json_or_text(response)
                status = response.status
        except TimeoutError:
            raise ProviderError(FailureKind.EXEC_TIMEOUT, f"no answer within {timeout + 5:g}s") from None
        if status >= 400:
            error = error_from_response(status, body, Phase.EXEC)
            if error.kind is FailureKind.DIED_DURING_EXEC:
                error = await self._explain_death(ref, error)
            raise error
        return ExecResult(
            exit_code=int(body["exit_code"]), stdout=body.get("stdout", ""), stderr=body.get("stderr", "")
        )

    async def _explain_death(self, ref: SandboxRef, error: ProviderError) -> ProviderError:
        """A sandbox that vanished mid-command: ask the control plane why (OOM is its own kind)."""
        try:
            context = await self.request("GET", f"/sandbox/{quote(ref.sandbox_id)}/error-context", Phase.EXEC)
        except Exception:
            return error
        if context.get("error_type") == "OOM_KILLED":
            return ProviderError(FailureKind.OOM, f"{error.args[0]} (OOM_KILLED: {context.get('error_message') or ''})")
        return error

    async def terminate(self, ref: SandboxRef) -> None:
        self._gateway.pop(ref.sandbox_id, None)
        try:
            await self.request("DELETE", f"/sandbox/{quote(ref.sandbox_id)}", Phase.TERMINATE)
        except ProviderError as exc:
            if "HTTP 404" in exc.args[0]:
                return  # already gone: terminate is idempotent
            raise

    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        refs: list[SandboxRef] = []
        page = 1
        while True:
            body = await self.request(
                "GET",
                "/sandbox",
                Phase.TERMINATE,
                params=[
                    ("page", page),
                    ("per_page", 100),
                    *(("labels", label) for label in label_strings(owner_labels(run_id, engine))),
                    ("is_active", "true"),
                ],
            )
            for sandbox in body.get("sandboxes", []):
                refs.append(SandboxRef(sandbox_id=sandbox["id"], provider=self.name, run_id=run_id))
            if not body.get("hasNext"):
                return refs
            page += 1

    async def cleanup(self, run_id: str, engine: str | None = None) -> int:
        labels = label_strings(owner_labels(run_id, engine))
        body = await self.request("DELETE", "/sandbox", Phase.TERMINATE, json={"labels": labels})
        return len(body.get("succeeded", []))

    async def list_all_owned(self) -> list[SandboxRef]:
        """Every active sandbox whose labels carry a run label (the API filters by `key=value` only: we filter)."""
        refs: list[SandboxRef] = []
        for page in range(1, ALL_OWNED_MAX_PAGES + 1):
            params = [("page", page), ("per_page", 100), ("is_active", "true")]
            body = await self.request("GET", "/sandbox", Phase.TERMINATE, params=params)
            for sandbox in body.get("sandboxes", []):
                run_id = tagged_by_stampede(sandbox.get("labels"))
                if run_id is not None:
                    refs.append(SandboxRef(sandbox_id=sandbox["id"], provider=self.name, run_id=run_id))
            if not body.get("hasNext"):
                break
        return refs

    def classify(self, exc: BaseException, phase: Phase | None = None) -> FailureKind:
        if isinstance(exc, aiohttp.ClientResponseError):
            return error_from_response(exc.status, {"detail": exc.message}, phase or Phase.CREATE).kind
        if isinstance(exc, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
            return FailureKind.TRANSPORT
        if isinstance(exc, (KeyError, ValueError, aiohttp.ContentTypeError)):
            # The API answered something we cannot read: a vendor error in this phase, not ours.
            return {
                Phase.CREATE: FailureKind.CREATE_ERROR,
                Phase.EXEC: FailureKind.EXEC_ERROR,
            }.get(phase or Phase.CREATE, FailureKind.UNKNOWN)
        return classify_common(exc, phase)

    def versions(self) -> Mapping[str, str]:
        return {"aiohttp": aiohttp.__version__}

    async def aclose(self) -> None:
        await self._poller.close()
        if self._session is not None:
            await self._session.close()
            self._session = None


def _gateway_auth(auth: Mapping[str, Any]) -> GatewayAuth:
    return GatewayAuth(
        token=str(auth["token"]),
        url=f"{str(auth['gateway_url']).rstrip('/')}/{auth['user_ns']}/{auth['job_id']}",
    )


async def _json_or_text(response: aiohttp.ClientResponse) -> Any:
    text = await response.text()
    if not text:
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return {"detail": text[:500]}
