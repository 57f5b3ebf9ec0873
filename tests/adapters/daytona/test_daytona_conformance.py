"""Daytona's own SDK (daytona 0.226.1), unchanged, as the judge of the local Daytona: sync and async clients.

The SDK is pointed at the local front the way a user points it anywhere (`DAYTONA_API_URL`, `DAYTONA_API_KEY`,
`DAYTONA_TARGET`); it finds the toolbox from the sandbox's `toolboxProxyUrl` and its events at
`{api}/socket.io/`. Every call the `daytona` provider makes is exercised with `Daytona` (in worker threads, so
the in-process front keeps serving) and `AsyncDaytona`: create (labels, auto-stop, auto-delete, TTL), the
readiness wait, get, list by labels, `process.exec` (stdout and stderr in one stream, exit code, a command
that times out), sessions (stdout and stderr apart), delete; then the SDK's error classes for 401, the
create rate (429), the resource pool (403), no runner (400) and sandboxes that fail to start. Then the
provider itself, its classification table, and a whole `stampede run --provider daytona --local`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from daytona import (
    AsyncDaytona,
    AsyncSandbox,
    CreateSandboxFromSnapshotParams,
    Daytona,
    DaytonaAuthenticationError,
    DaytonaBadRequestError,
    DaytonaError,
    DaytonaForbiddenError,
    DaytonaNotFoundError,
    DaytonaProcessExecutionTimeoutError,
    DaytonaRateLimitError,
    ListSandboxesQuery,
    SessionExecuteRequest,
)

from providers.base import FailureKind, Phase, ProviderConfigError, ProviderError, SandboxSpec
from providers.sim.core.profile import ProfileError, load_profile
from providers.sim.daytona.server import DaytonaSettings, RunningDaytona, start_daytona
from providers.vendors.daytona.errors import classify_daytona
from providers.vendors.daytona.provider import DaytonaProvider
from tests.support.local_runs import run_local

TOKEN = "conformance-token"
FLAVOURS = ("sync", "async")
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def sdk_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing of the user's (a `.env`, a JWT) is read; each test points the SDK at its own front."""
    monkeypatch.chdir(tmp_path)
    for name in ("DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID", "DAYTONA_SERVER_URL", "DAYTONA_OTEL_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DAYTONA_API_KEY", TOKEN)
    monkeypatch.setenv("DAYTONA_TARGET", "us")


class Sdk:
    """One SDK client of either flavour; `await sdk.call(fn, ...)` runs a bound method of it or its sandboxes."""

    def __init__(self, flavour: str) -> None:
        self.flavour = flavour
        self.client: Any = AsyncDaytona() if flavour == "async" else Daytona()

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.flavour == "async":
            return await fn(*args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def listed(self, labels: dict[str, str]) -> list[str]:
        query = ListSandboxesQuery(labels=labels)
        if self.flavour == "async":
            return [s.id async for s in self.client.list(query)]
        return await asyncio.to_thread(lambda: [s.id for s in self.client.list(query)])

    async def close(self) -> None:
        if self.flavour == "async":
            await self.client.close()
        elif self.client._event_dispatcher is not None:  # the sync client has no close(): its event thread
            await asyncio.to_thread(self.client._event_dispatcher.disconnect)


Open = Callable[..., Awaitable[tuple[RunningDaytona, Sdk]]]


@pytest.fixture
async def open_front(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Open]:
    """`await open_front(flavour, **profile_overrides)` -> an in-process local Daytona and an SDK client on it."""
    opened: list[tuple[RunningDaytona, Sdk]] = []

    async def open_(flavour: str, api_key: str = TOKEN, **overrides: Any) -> tuple[RunningDaytona, Sdk]:
        front = await start_daytona(DaytonaSettings(seed=3, token=TOKEN, overrides=tuple(overrides.items())))
        monkeypatch.setenv("DAYTONA_API_URL", front.api_url)
        monkeypatch.setenv("DAYTONA_API_KEY", api_key)
        sdk = Sdk(flavour)
        opened.append((front, sdk))
        return front, sdk

    yield open_
    for front, sdk in opened:
        await sdk.close()
        await front.close()


def params(labels: dict[str, str], **extra: Any) -> CreateSandboxFromSnapshotParams:
    return CreateSandboxFromSnapshotParams(labels=labels, auto_stop_interval=5, auto_delete_interval=0, **extra)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_lifecycle(flavour: str, open_front: Open) -> None:
    front, sdk = await open_front(flavour)
    sandbox = await sdk.call(
        sdk.client.create, params({"run": "a", "role": "x"}, env_vars={"GREETING": "hello"}, ttl_minutes=30), timeout=30
    )
    other = await sdk.call(sdk.client.create, params({"run": "b"}), timeout=30)
    assert sandbox.state == "started" and sandbox.labels["run"] == "a" and sandbox.labels["role"] == "x"
    assert sandbox.auto_stop_interval == 5 and sandbox.auto_delete_interval == 0 and sandbox.auto_destroy_at
    assert (sandbox.cpu, sandbox.memory, sandbox.disk) == (1, 1, 3)  # the default snapshot's size
    assert sandbox.toolbox_proxy_url == front.toolbox_url
    assert (await sdk.call(sdk.client.get, sandbox.id)).state == "started"

    assert await sdk.listed({"run": "a"}) == [sandbox.id]
    assert await sdk.listed({"run": "a", "role": "x"}) == [sandbox.id]
    assert await sdk.listed({"run": "a", "role": "y"}) == []

    # process.exec: one stream, as the daemon answers it (stdout, then stderr here)
    result = await sdk.call(sandbox.process.exec, "echo $GREETING; echo oops >&2; exit 7")
    assert (result.exit_code, result.result) == (7, "hello\noops\n")
    result = await sdk.call(sandbox.process.exec, "pwd; echo $EXTRA", cwd="/tmp", env={"EXTRA": "1"})
    assert (result.exit_code, result.result) == (0, "/tmp\n1\n")
    # sessions: stdout and stderr apart
    await sdk.call(sandbox.process.create_session, "s1")
    run = await sdk.call(
        sandbox.process.execute_session_command, "s1", SessionExecuteRequest(command="echo out; echo err >&2; exit 4")
    )
    assert (run.exit_code, run.stdout, run.stderr, run.output) == (4, "out\n", "err\n", "out\nerr\n")
    assert (await sdk.call(sandbox.process.get_session_command, "s1", run.cmd_id)).exit_code == 4

    await sdk.call(sdk.client.delete, sandbox)
    with pytest.raises(DaytonaNotFoundError):  # gone, as on the real API: not a body in state "destroyed"
        await sdk.call(sdk.client.get, sandbox.id)
    assert await sdk.listed({"run": "a"}) == []
    with pytest.raises(DaytonaNotFoundError):
        await sdk.call(sandbox.process.exec, "true")
    assert [s.id for s in [other]] == await sdk.listed({"run": "b"})


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_a_command_that_outlives_its_timeout(flavour: str, open_front: Open) -> None:
    _, sdk = await open_front(flavour)
    sandbox = await sdk.call(sdk.client.create, params({"run": "t"}), timeout=30)
    started = time.monotonic()
    with pytest.raises(DaytonaProcessExecutionTimeoutError) as info:
        await sdk.call(sandbox.process.exec, "sleep 30", timeout=1)
    assert 0.9 < time.monotonic() - started < 15  # its 1 s timeout ended it, not the 30 s command
    assert info.value.status_code == 408 and info.value.code == "PROCESS_EXECUTION_TIMEOUT"
    assert classify_daytona(info.value, Phase.EXEC) is FailureKind.EXEC_TIMEOUT
    assert (await sdk.call(sandbox.process.exec, "echo still here")).result == "still here\n"


async def test_readiness_arrives_as_an_event_not_a_poll(open_front: Open, monkeypatch: pytest.MonkeyPatch) -> None:
    # A boot of 0.4 s: the SDK's first look (right after the POST) sees `starting`, its next poll comes a
    # second later; the `sandbox.state.updated` event is what lets create return before that. The polls after
    # the first are made to learn nothing, so only the event can end the wait: no race between the event and a
    # poll a second later, which a busy machine could tip either way.
    _, sdk = await open_front("async", **{"boot.median_s": 0.4, "boot.sigma": 0.0, "boot.load_delay_s": 0.0})
    await sdk.client.create(params({"run": "warm"}), timeout=30)  # the event stream is connected by now
    assert sdk.client._event_dispatcher.is_connected
    looks: list[str] = []
    refresh = AsyncSandbox.refresh_data

    async def first_look_only(sandbox: AsyncSandbox, *args: Any, **kwargs: Any) -> None:
        looks.append(sandbox.state)
        if len(looks) == 1:
            await refresh(sandbox, *args, **kwargs)

    monkeypatch.setattr(AsyncSandbox, "refresh_data", first_look_only)  # raises if the SDK renamed it
    started = time.monotonic()
    sandbox = await sdk.client.create(params({"run": "e"}), timeout=30)
    assert sandbox.state == "started" and time.monotonic() - started > 0.35


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_the_create_rate_is_a_429(flavour: str, open_front: Open) -> None:
    _, sdk = await open_front(flavour, **{"create_rate.per_s": 0.01, "create_rate.burst": 1.0})
    await sdk.call(sdk.client.create, params({"run": "r"}), timeout=30)
    with pytest.raises(DaytonaRateLimitError) as info:
        await sdk.call(sdk.client.create, params({"run": "r"}), timeout=30)
    assert info.value.status_code == 429 and info.value.code == "RATE_LIMIT_EXCEEDED"
    assert int(info.value.headers["Retry-After-sandbox-create"]) >= 1
    assert classify_daytona(info.value, Phase.CREATE) is FailureKind.RATE_LIMITED


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        ("resource_pool.cpu", "Total CPU limit exceeded. Maximum allowed: 2."),
        ("resource_pool.memory_gb", "Total memory limit exceeded. Maximum allowed: 2GiB."),
        ("resource_pool.disk_gb", "Total disk limit exceeded. Maximum allowed: 6GiB."),
    ],
)
async def test_the_resource_pool_is_a_403_not_a_429(
    flavour: str, resource: str, expected: str, open_front: Open
) -> None:
    limit = 6 if resource.endswith("disk_gb") else 2  # a default sandbox holds 1 vCPU, 1 GiB, 3 GiB of disk
    front, sdk = await open_front(flavour, **{resource: limit})
    first = [await sdk.call(sdk.client.create, params({"run": "q"}), timeout=30) for _ in range(2)]
    with pytest.raises(DaytonaForbiddenError) as info:
        await sdk.call(sdk.client.create, params({"run": "q"}), timeout=30)
    assert info.value.status_code == 403 and expected in info.value.message
    assert classify_daytona(info.value, Phase.CREATE) is FailureKind.QUOTA_EXHAUSTED
    await sdk.call(sdk.client.delete, first[0])  # a deleted sandbox gives its share back
    await sdk.call(sdk.client.create, params({"run": "q"}), timeout=30)
    assert front.simulator.stats()["rejected"] == {"QUOTA_EXHAUSTED": 1}


async def test_no_runner_is_a_400_and_a_bad_key_a_401(open_front: Open) -> None:
    _, sdk = await open_front(
        "async", **{"pool.initial_nodes": 1, "pool.slots_per_node": 1, "pool.max_nodes": 1, "pool.max_queue": 0}
    )
    await sdk.client.create(params({"run": "c"}), timeout=30)
    with pytest.raises(DaytonaBadRequestError, match="No available runners") as info:
        await sdk.client.create(params({"run": "c"}), timeout=30)
    assert classify_daytona(info.value, Phase.CREATE) is FailureKind.CAPACITY
    _, sdk = await open_front("async", api_key="wrong-key")
    with pytest.raises(DaytonaAuthenticationError) as auth:
        await sdk.client.create(params({"run": "c"}), timeout=30)
    assert auth.value.status_code == 401 and classify_daytona(auth.value, Phase.CREATE) is FailureKind.AUTH


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"boot.median_s": 60.0, "startup.deadline_s": 0.5}, FailureKind.READY_TIMEOUT),  # never started in time
        ({"errors.boot_crash_prob": 1.0}, FailureKind.DIED_BEFORE_READY),  # crashed while starting
    ],
)
async def test_a_sandbox_that_fails_to_start(
    overrides: dict[str, float], expected: FailureKind, open_front: Open
) -> None:
    front, sdk = await open_front("async", **overrides)
    with pytest.raises(DaytonaError, match="entered error state"):
        await sdk.client.create(params({"run": "f"}), timeout=30)
    (failed,) = front.simulator.list(labels=("run=f",))
    assert (await sdk.client.get(failed.id)).error_reason == failed.error_message  # the reason is on the sandbox
    # the SDK learnt `error` from an event (no reason in it): the provider asks for the reason before it classifies
    provider = DaytonaProvider.from_options({"base_url": front.api_url, "token": TOKEN})
    try:
        ref = await provider.create(SandboxSpec(run_id="run-f", rollout_id="r1"))
        with pytest.raises(ProviderError) as info:
            await provider.wait_ready(ref, 30)
        assert info.value.kind is expected and failed.error_message in str(info.value)
    finally:
        await provider.aclose()


def test_the_resource_pool_is_an_optional_profile_section() -> None:
    daytona = load_profile("daytona-like")
    assert daytona.resource_pool is not None and daytona.quota.max_active == float("inf")
    assert [key for key in daytona.numeric_fields() if not daytona.sources.get(key)] == []
    prime = load_profile("prime-like")
    assert prime.resource_pool is None and "resource_pool.cpu" not in prime.numeric_fields()
    tier3 = prime.with_overrides({"resource_pool.cpu": "250"})
    assert tier3.resource_pool is not None and tier3.resource_pool.cpu == 250
    assert tier3.resource_pool.memory_gb == float("inf")
    with pytest.raises(ProfileError, match="cpu must be > 0"):
        prime.with_overrides({"resource_pool.cpu": "0"})


# --- the provider -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("exec_api", ["exec", "session"])
async def test_the_provider_walks_the_contract(exec_api: str, open_front: Open) -> None:
    front, _ = await open_front("async")
    provider = DaytonaProvider.from_options({"base_url": front.api_url, "token": TOKEN, "exec_api": exec_api})
    try:
        await provider.preflight()
        ref = await provider.create(SandboxSpec(run_id="run-1", rollout_id="r1", engine="e1", lifetime_s=600))
        spare = await provider.create(SandboxSpec(run_id="run-1", rollout_id="r2", engine="e2"))
        assert {"stampede-engine=e1", "stampede-rollout=r1", "stampede-run=run-1"} <= set(
            front.simulator.get(ref.sandbox_id).labels
        )
        observed = await provider.wait_ready(ref, 30)
        assert observed is not None and observed.polls >= 1 and observed.poll_window_s is not None
        result = await provider.exec(ref, ["sh", "-c", "echo out; echo err >&2; exit 3"], 10)
        expected = ("out\nerr\n", "") if exec_api == "exec" else ("out\n", "err\n")
        assert (result.exit_code, result.stdout, result.stderr) == (3, *expected)
        with pytest.raises((ProviderError, DaytonaError)) as info:
            await provider.exec(ref, ["sleep", "30"], 1)
        assert provider.classify(info.value, Phase.EXEC) is FailureKind.EXEC_TIMEOUT
        assert (await provider.exec(ref, ["echo", "again"], 10)).stdout == "again\n"
        assert {r.sandbox_id for r in await provider.list_owned("run-1", "e2")} == {spare.sandbox_id}
        await provider.terminate(ref)
        await provider.terminate(ref)  # idempotent
        assert {r.sandbox_id for r in await provider.list_owned("run-1")} == {spare.sandbox_id}
        assert await provider.cleanup("run-1") == 1 and await provider.list_owned("run-1") == []
        assert provider.versions() == {"daytona": "0.226.1"}
    finally:
        await provider.aclose()


async def test_the_provider_splits_create_at_the_acknowledgement(open_front: Open) -> None:
    front, _ = await open_front("async", **{"boot.median_s": 2.0, "boot.sigma": 0.0, "boot.load_delay_s": 0.0})
    provider = DaytonaProvider.from_options({"base_url": front.api_url, "token": TOKEN})
    try:
        ref = await provider.create(SandboxSpec(run_id="run-2", rollout_id="r1"))
        # the POST answered at once: when create returns, the vendor itself still says the 2 s boot is under way.
        # Asked of the vendor, not timed on the client: a client-side gap between create and ready shrank to 0.43 s
        # of a 0.5 s boot in one CI run, the answer's own trip on a busy machine overlapping the boot
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.get(f"{front.api_url}/sandbox/{ref.sandbox_id}") as answer:
                state = (await answer.json())["state"]
        assert state in ("creating", "starting"), state
        await provider.wait_ready(ref, 30)
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.get(f"{front.api_url}/sandbox/{ref.sandbox_id}") as answer:
                assert (await answer.json())["state"] == "started"
        with pytest.raises(ProviderError) as info:  # a start still waited for, cut short by the harness
            await provider.wait_ready(await provider.create(SandboxSpec(run_id="run-2", rollout_id="r2")), 0.1)
        assert info.value.kind is FailureKind.READY_TIMEOUT
        assert await provider.cleanup("run-2") == 2
    finally:
        await provider.aclose()


def test_options_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    cases = [
        ({}, "no API key; set DAYTONA_API_KEY"),
        ({"base_url": "http://127.0.0.1:1/api"}, "base_url needs a token"),
        ({"base_url": "127.0.0.1:1", "token": "t"}, "base_url must be http(s)://"),
        ({"api_key": "k", "exec_api": "pty"}, "exec_api must be exec or session"),
        ({"api_key": "k", "snapshot": "s", "image": "i"}, "give snapshot or image, not both"),
        ({"api_key": "k", "nope": 1}, "unknown option(s) nope"),
    ]
    for options, expected in cases:
        with pytest.raises(ProviderConfigError) as info:
            DaytonaProvider.from_options(options)
        assert expected in str(info.value) and "\n" not in str(info.value), options


def _error(cls: type[DaytonaError], message: str, status: int | None = None, code: str | None = None) -> DaytonaError:
    return cls(message, status_code=status, code=code)


def test_classification_table() -> None:
    from daytona import (
        DaytonaBadGatewayError,
        DaytonaConflictError,
        DaytonaConnectionError,
        DaytonaConnectionTimeoutError,
        DaytonaGoneError,
        DaytonaInternalServerError,
        DaytonaQueueTimeoutError,
        DaytonaServiceUnavailableError,
        DaytonaSpotEvictedError,
        DaytonaTimeoutError,
        DaytonaUnprocessableEntityError,
    )

    C, R, E, _T = Phase.CREATE, Phase.READY, Phase.EXEC, Phase.TERMINATE
    K = FailureKind
    quota = "Failed to create sandbox: Total memory limit exceeded. Maximum allowed: 10GiB.\nTo increase..."
    cases: list[tuple[BaseException, Phase | None, FailureKind]] = [
        (_error(DaytonaRateLimitError, "ThrottlerException: Too Many Requests", 429), C, K.RATE_LIMITED),
        (_error(DaytonaForbiddenError, "Total CPU limit exceeded. Maximum allowed: 500.", 403), C, K.QUOTA_EXHAUSTED),
        (_error(DaytonaForbiddenError, quota, 403), C, K.QUOTA_EXHAUSTED),
        (
            _error(DaytonaForbiddenError, "Total disk limit exceeded. Maximum allowed: 30GiB.", 403),
            C,
            K.QUOTA_EXHAUSTED,
        ),
        (
            _error(DaytonaForbiddenError, "CPU request 64 exceeds maximum allowed per sandbox (4).", 403),
            C,
            K.INVALID_REQUEST,
        ),
        (_error(DaytonaForbiddenError, "Forbidden", 403), C, K.AUTH),
        (_error(DaytonaAuthenticationError, "Unauthorized", 401), C, K.AUTH),
        (_error(DaytonaBadRequestError, "No available runners", 400), C, K.CAPACITY),
        (_error(DaytonaBadRequestError, "Snapshot foo not found. Did you add it?", 400), C, K.IMAGE),
        (_error(DaytonaBadRequestError, "labels must be an object", 400), C, K.INVALID_REQUEST),
        (_error(DaytonaBadRequestError, "auto_stop_interval must be a non-negative integer"), C, K.INVALID_REQUEST),
        (_error(DaytonaUnprocessableEntityError, "bad", 422), C, K.INVALID_REQUEST),
        (_error(DaytonaConflictError, "Sandbox with name x already exists", 409), C, K.INVALID_REQUEST),
        (_error(DaytonaConflictError, "Sandbox s is not started (state: error): boom", 409), E, K.DIED_DURING_EXEC),
        (_error(DaytonaInternalServerError, "An unexpected error occurred.", 500), C, K.CREATE_ERROR),
        (_error(DaytonaServiceUnavailableError, "unavailable", 503), C, K.CREATE_ERROR),
        (_error(DaytonaNotFoundError, "Sandbox not found", 404), R, K.DIED_BEFORE_READY),
        (_error(DaytonaNotFoundError, "Sandbox not found", 404), E, K.DIED_DURING_EXEC),
        (_error(DaytonaNotFoundError, "Region not found", 404), C, K.INVALID_REQUEST),
        (_error(DaytonaGoneError, "session ended", 410), E, K.EXEC_ERROR),
        (
            _error(
                DaytonaProcessExecutionTimeoutError, "Command execution timed out", 408, "PROCESS_EXECUTION_TIMEOUT"
            ),
            E,
            K.EXEC_TIMEOUT,
        ),
        (_error(DaytonaBadGatewayError, "Sandbox s was OOM killed: out of memory", 502), E, K.OOM),
        (_error(DaytonaBadGatewayError, "Sandbox s stopped during the command: crash", 502), E, K.DIED_DURING_EXEC),
        (_error(DaytonaBadGatewayError, "Command failed: transient", 502), E, K.EXEC_ERROR),
        (
            _error(DaytonaQueueTimeoutError, "Sandbox s was destroyed after waiting 5 minutes for a runner"),
            R,
            K.CAPACITY,
        ),
        (_error(DaytonaSpotEvictedError, "Sandbox s was evicted by spot preemption"), E, K.DIED_DURING_EXEC),
        (_error(DaytonaTimeoutError, "Function 'create' exceeded timeout of 60 seconds."), R, K.READY_TIMEOUT),
        (_error(DaytonaTimeoutError, "Gateway Timeout", 504), C, K.TRANSPORT),
        (_error(DaytonaConnectionTimeoutError, "read timed out"), E, K.EXEC_TIMEOUT),
        (_error(DaytonaConnectionTimeoutError, "connect timed out"), C, K.TRANSPORT),
        (_error(DaytonaConnectionError, "Cannot connect to host"), C, K.TRANSPORT),
        (
            _error(
                DaytonaError,
                "Failure during waiting for sandbox to start: Sandbox s entered error state: "
                "SandboxState.ERROR, error reason: Sandbox did not start within 120s",
            ),
            R,
            K.READY_TIMEOUT,
        ),
        (
            _error(DaytonaError, "Sandbox s entered error state: error, error reason: container exited"),
            R,
            K.DIED_BEFORE_READY,
        ),
        (_error(DaytonaError, "Sandbox s entered error state: build_failed, error reason: x"), R, K.IMAGE),
        (_error(DaytonaError, "Failed to execute command: Daytona client is closed"), E, K.HARNESS),
        (_error(DaytonaError, "something else"), E, K.EXEC_ERROR),
        (aiohttp.ClientConnectionError("reset"), E, K.TRANSPORT),
        (aiohttp.ServerTimeoutError("read"), E, K.EXEC_TIMEOUT),
        (TimeoutError(), R, K.READY_TIMEOUT),
        (ConnectionResetError(), C, K.TRANSPORT),
        (ProviderError(K.EXEC_TIMEOUT, "no answer"), E, K.EXEC_TIMEOUT),
        (ValueError("ours"), C, K.UNKNOWN),
    ]
    for exc, phase, expected in cases:
        assert classify_daytona(exc, phase) is expected, (type(exc).__name__, str(exc), phase)


# --- the standalone server and the whole harness -----------------------------------------------------------


@pytest.mark.slow
def test_a_local_run_through_the_real_sdk(tmp_path: Path) -> None:
    run = run_local("daytona", tmp_path, "--stages", "20,40", "--hold", "5")
    rollouts, truth, manifest = run.rollouts, run.truth, run.manifest
    assert len(rollouts) >= 60 and manifest["profile"] == "daytona-like" and manifest["local_vendor"] is True
    assert manifest["provider_versions"] == {"daytona": "0.226.1"}
    assert not set(rollouts["failure_kind"].dropna()) & {"unknown", "harness"}
    assert (rollouts["outcome"] == "ok").mean() > 0.95
    assert set(truth["id"]) == set(rollouts["sandbox_id"].dropna())  # one vendor sandbox per rollout
    assert set(truth["status"]) <= {"TERMINATED", "ERROR", "TIMEOUT"}  # and none left running
    assert "unknown failures 0; harness failures 0" in run.stdout
