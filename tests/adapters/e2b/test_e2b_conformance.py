"""E2B's own SDK (e2b 2.56.0 or a later 2.x), unchanged, as the judge of the local E2B: sync `Sandbox` and async `AsyncSandbox`.

The SDK is pointed at the front the documented way (`E2B_API_KEY`, `E2B_API_URL`, `E2B_SANDBOX_URL`): create,
is_running, get_info, commands (stdout, stderr, exit codes, env, working dir, a command past its timeout, a
background command listed and killed), set_timeout, list by metadata (paged), kill; then the SDK's own
exceptions for 401, the create-rate 429, the concurrent-sandbox 429, no capacity, sandboxes that fail to start,
and commands whose sandbox dies under them. The sync client runs in worker threads so the in-process front keeps
serving. Then the `e2b` provider: its classification table, the contract walked against the front, and whole
`stampede run --provider e2b --local` runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    InvalidArgumentException,
    NotFoundException,
    RateLimitException,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
    SandboxNotRunningException,
    SandboxQuery,
    SandboxUnreachableException,
    ServiceBusyException,
    TemplateException,
    TimeoutException,
)
from e2b.api import client_async as sdk_transports

from providers.base import (
    INVOCATION,
    FailureKind,
    Phase,
    ProviderConfigError,
    ProviderError,
    ReadyObservation,
    SandboxSpec,
)
from providers.sim.e2b.server import E2BSettings, RunningE2B, start_e2b
from providers.vendors.e2b import E2BProvider, classify_e2b, sandbox_timeout, sdk_supported
from tests.support.live_lifecycle import check_live_lifecycle
from tests.support.local_runs import run_local

TOKEN = "e2b_conformance"
FLAVOURS = ("sync", "async")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def sdk_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing of the user's E2B configuration is read."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DOMAIN", "E2B_DEBUG", "E2B_ACCESS_TOKEN"):
        monkeypatch.delenv(name, raising=False)


class Sdk:
    """One SDK flavour: `await sdk(fn, ...)` runs a sync call in a thread, an async one on the loop."""

    def __init__(self, flavour: str) -> None:
        self.flavour = flavour
        self.Sandbox: Any = AsyncSandbox if flavour == "async" else Sandbox

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.flavour == "async":
            return await fn(*args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def create(self, **kwargs: Any) -> Any:
        return await self(self.Sandbox.create, **kwargs)

    async def listed(self, **kwargs: Any) -> list[Any]:
        pages = self.Sandbox.list(**kwargs)
        found: list[Any] = []
        while pages.has_next:
            found.extend(await self(pages.next_items))
        return found


Open = Callable[..., Awaitable[tuple[RunningE2B, Sdk]]]


@pytest.fixture
async def open_e2b(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Open]:
    """`await open_e2b(flavour, **profile_overrides)` -> an in-process local E2B and the SDK pointed at it."""
    opened: list[RunningE2B] = []

    async def open_(flavour: str, **overrides: Any) -> tuple[RunningE2B, Sdk]:
        e2b = await start_e2b(E2BSettings(profile="ideal", seed=5, token=TOKEN, overrides=tuple(overrides.items())))
        opened.append(e2b)
        for name, value in e2b.sdk_environment().items():
            monkeypatch.setenv(name, value)
        return e2b, Sdk(flavour)

    yield open_
    for e2b in opened:
        await e2b.close()


# --- the SDK against the front -------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_lifecycle(flavour: str, open_e2b: Open) -> None:
    e2b, sdk = await open_e2b(flavour)
    sandbox = await sdk.create(metadata={"run": "a", "odd key": "x=y&z"}, envs={"GREETING": "hello"}, timeout=120)
    other = await sdk.create(metadata={"run": "b"})
    assert await sdk(sandbox.is_running) is True
    info = await sdk(sandbox.get_info)
    assert (info.sandbox_id, info.template_id, info.state) == (sandbox.sandbox_id, "base", "running")
    assert info.metadata == {"run": "a", "odd key": "x=y&z"}
    assert (info.end_at - info.started_at).total_seconds() == pytest.approx(120, abs=0.01)

    result = await sdk(sandbox.commands.run, "echo $GREETING; echo oops >&2")
    assert (result.exit_code, result.stdout, result.stderr, result.error) == (0, "hello\n", "oops\n", None)
    with pytest.raises(CommandExitException) as failed:
        await sdk(sandbox.commands.run, "echo partial; exit 3")
    assert (failed.value.exit_code, failed.value.stdout, failed.value.error) == (3, "partial\n", "exit status 3")
    here = await sdk(sandbox.commands.run, "pwd; echo $EXTRA", cwd="/tmp", envs={"EXTRA": "more"})
    assert here.stdout == "/tmp\nmore\n"

    assert [s.sandbox_id for s in await sdk.listed(query=SandboxQuery(metadata={"odd key": "x=y&z"}))] == [
        sandbox.sandbox_id
    ]
    paged = await sdk.listed(limit=1)
    assert {s.sandbox_id for s in paged} == {sandbox.sandbox_id, other.sandbox_id} and len(paged) == 2

    await sdk(sandbox.set_timeout, 30)
    shorter = await sdk(sandbox.get_info)
    assert shorter.end_at < info.end_at
    assert await sdk(sandbox.kill) is True
    assert await sdk(sdk.Sandbox.kill, sandbox.sandbox_id) is False  # already gone
    assert await sdk(sandbox.is_running) is False
    with pytest.raises(SandboxNotFoundException):
        await sdk(sandbox.get_info)
    with pytest.raises(SandboxNotRunningException):
        await sdk(sandbox.commands.run, "true")
    assert [s.sandbox_id for s in await sdk.listed()] == [other.sandbox_id]
    assert {row["status"] for row in e2b.simulator.truth()} == {"TERMINATED", "RUNNING"}


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_a_command_past_its_timeout(flavour: str, open_e2b: Open) -> None:
    _, sdk = await open_e2b(flavour)
    sandbox = await sdk.create()
    started = time.monotonic()
    with pytest.raises(TimeoutException) as timed_out:
        await sdk(sandbox.commands.run, "sleep 30", timeout=0.5)
    assert not isinstance(timed_out.value, (SandboxNotRunningException, SandboxUnreachableException))
    assert time.monotonic() - started < 15  # its 0.5 s timeout ended it, not the 30 s command
    assert (await sdk(sandbox.commands.run, "echo still here")).stdout == "still here\n"


async def test_a_background_command_is_listed_and_killed(open_e2b: Open) -> None:
    _, sdk = await open_e2b("async")
    sandbox = await sdk.create()
    handle = await sandbox.commands.run("sleep 30", background=True)
    assert [p.pid for p in await sandbox.commands.list()] == [handle.pid]
    assert await handle.kill() is True
    with pytest.raises(CommandExitException) as killed:
        await handle.wait()
    assert (killed.value.exit_code, killed.value.error) == (-1, "signal: killed")
    assert await sandbox.commands.list() == []
    assert await sandbox.commands.kill(handle.pid) is False


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_wrong_api_key_is_authentication(flavour: str, open_e2b: Open, monkeypatch: pytest.MonkeyPatch) -> None:
    _, sdk = await open_e2b(flavour)
    monkeypatch.setenv("E2B_API_KEY", "e2b_wrong")
    with pytest.raises(AuthenticationException):
        await sdk.create()


async def test_envd_wants_the_sandboxes_own_access_token(open_e2b: Open) -> None:
    e2b, sdk = await open_e2b("async")
    sandbox = await sdk.create()
    headers = {"E2b-Sandbox-Id": sandbox.sandbox_id, "Content-Type": "application/json", "X-Access-Token": "nope"}
    async with httpx.AsyncClient(base_url=e2b.url) as client:
        refused = await client.post("/process.Process/List", headers=headers, content=b"{}")
        proto = await client.post(
            "/process.Process/List",
            headers={**headers, "X-Access-Token": sandbox._envd_access_token, "Content-Type": "application/proto"},
        )
        gone = await client.get("/health", headers={"E2b-Sandbox-Id": "sb-none"})
    assert refused.status_code == 401
    assert proto.status_code == 415  # envd here speaks the SDK's JSON codec only
    assert gone.status_code == 502 and "was not found" in gone.json()["message"]


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_create_rate_limit_is_a_429_the_sdk_raises(flavour: str, open_e2b: Open) -> None:
    _, sdk = await open_e2b(flavour, **{"create_rate.per_s": 0.01, "create_rate.burst": 1.0})
    await sdk.create()
    with pytest.raises(RateLimitException) as throttled:
        await sdk.create()  # Retry-After (100 s) is past the request's deadline: the SDK does not retry it
    assert "Sandbox creation rate limit exceeded" in str(throttled.value)
    assert classify_e2b(throttled.value, Phase.CREATE) is FailureKind.RATE_LIMITED


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_concurrent_sandbox_cap_is_a_429_the_sdk_raises(flavour: str, open_e2b: Open) -> None:
    _, sdk = await open_e2b(flavour, **{"quota.max_active": 1})
    first = await sdk.create()
    with pytest.raises(RateLimitException) as capped:
        await sdk.create()
    assert "maximum number of concurrent E2B sandboxes (1)" in str(capped.value)
    assert classify_e2b(capped.value, Phase.CREATE) is FailureKind.QUOTA_EXHAUSTED
    await sdk(first.kill)
    await sdk.create()  # the slot is free again


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_no_capacity_and_sandboxes_that_fail_to_start(flavour: str, open_e2b: Open) -> None:
    _, full = await open_e2b(flavour, **{"pool.slots_per_node": 1, "pool.max_queue": 0})
    await full.create()
    with pytest.raises(ServiceBusyException) as busy:
        await full.create()
    assert classify_e2b(busy.value, Phase.CREATE) is FailureKind.CAPACITY

    _, slow = await open_e2b(flavour, **{"startup.deadline_s": 0.2, "boot.median_s": 5.0})
    with pytest.raises(SandboxException) as late:
        await slow.create()
    assert late.value.status_code == 504 and "Failed to place sandbox" in str(late.value)
    assert classify_e2b(late.value, Phase.CREATE) is FailureKind.READY_TIMEOUT

    _, crashing = await open_e2b(flavour, **{"errors.boot_crash_prob": 1.0})
    with pytest.raises(SandboxException) as crashed:
        await crashing.create()
    assert crashed.value.status_code == 500
    assert classify_e2b(crashed.value, Phase.CREATE) is FailureKind.CREATE_ERROR


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_commands_whose_sandbox_dies_or_fails(flavour: str, open_e2b: Open) -> None:
    _, dying = await open_e2b(flavour, **{"errors.exec_oom_prob": 1.0})
    sandbox = await dying.create()
    with pytest.raises(SandboxNotRunningException) as died:
        await dying(sandbox.commands.run, "echo hi")
    assert classify_e2b(died.value, Phase.EXEC) is FailureKind.DIED_DURING_EXEC

    _, flaky = await open_e2b(flavour, **{"errors.exec_error_prob": 1.0})
    sandbox = await flaky.create()
    with pytest.raises(SandboxException) as failed:
        await flaky(sandbox.commands.run, "echo hi")
    assert classify_e2b(failed.value, Phase.EXEC) is FailureKind.EXEC_ERROR
    assert await flaky(sandbox.is_running) is True


async def test_a_sandbox_killed_under_a_running_command(open_e2b: Open) -> None:
    _, sdk = await open_e2b("async")
    sandbox = await sdk.create()
    running = asyncio.ensure_future(sandbox.commands.run("sleep 10"))
    await asyncio.sleep(0.2)
    await AsyncSandbox.kill(sandbox.sandbox_id)
    with pytest.raises(SandboxNotRunningException):
        await asyncio.wait_for(running, 5)


# --- the e2b provider ------------------------------------------------------------------------------

_TIMEOUT = TimeoutException("the call's deadline expired: This error is likely due to exceeding 'timeout'")
_CANCELED = TimeoutException("x: The request was cancelled by the server or a proxy while it was in flight")
CLASSIFICATION: list[tuple[BaseException, Phase, FailureKind]] = [
    (AuthenticationException("401: Unauthorized"), Phase.CREATE, FailureKind.AUTH),
    (AuthenticationException("unauthorized access"), Phase.EXEC, FailureKind.AUTH),
    (RateLimitException("429: Rate limit exceeded - Sandbox creation rate"), Phase.CREATE, FailureKind.RATE_LIMITED),
    (
        RateLimitException("429: Rate limit exceeded - the maximum number of concurrent E2B sandboxes"),
        Phase.CREATE,
        FailureKind.QUOTA_EXHAUSTED,
    ),
    (RateLimitException("resource exhausted: Rate limit exceeded"), Phase.EXEC, FailureKind.RATE_LIMITED),
    (ServiceBusyException("503: Service temporarily unavailable"), Phase.CREATE, FailureKind.CAPACITY),
    (ServiceBusyException("503"), Phase.TERMINATE, FailureKind.TRANSPORT),
    (SandboxNotRunningException("was not found"), Phase.EXEC, FailureKind.DIED_DURING_EXEC),
    (SandboxNotRunningException("was not found"), Phase.READY, FailureKind.DIED_BEFORE_READY),
    (SandboxNotFoundException("Sandbox x not found"), Phase.EXEC, FailureKind.DIED_DURING_EXEC),
    (SandboxUnreachableException("port is not open"), Phase.EXEC, FailureKind.TRANSPORT),
    (_TIMEOUT, Phase.EXEC, FailureKind.EXEC_TIMEOUT),
    (_TIMEOUT, Phase.CREATE, FailureKind.READY_TIMEOUT),
    (_TIMEOUT, Phase.TERMINATE, FailureKind.TRANSPORT),
    (_CANCELED, Phase.EXEC, FailureKind.DIED_DURING_EXEC),
    (TemplateException("update the template"), Phase.CREATE, FailureKind.IMAGE),
    (InvalidArgumentException("bad"), Phase.EXEC, FailureKind.INVALID_REQUEST),
    (NotFoundException("process not found"), Phase.EXEC, FailureKind.EXEC_ERROR),
    (SandboxException("400: templateID is required", status_code=400), Phase.CREATE, FailureKind.INVALID_REQUEST),
    (SandboxException("404: template 'x' not found", status_code=404), Phase.CREATE, FailureKind.IMAGE),
    (SandboxException("500: Failed to place sandbox", status_code=500), Phase.CREATE, FailureKind.CREATE_ERROR),
    (SandboxException("504: Failed to place sandbox", status_code=504), Phase.CREATE, FailureKind.READY_TIMEOUT),
    (SandboxException("500: boom", status_code=500), Phase.TERMINATE, FailureKind.TRANSPORT),
    (SandboxException("internal: error running the process"), Phase.EXEC, FailureKind.EXEC_ERROR),
    (ConnectError(Code.UNAUTHENTICATED, "x"), Phase.EXEC, FailureKind.AUTH),
    (ConnectError(Code.DEADLINE_EXCEEDED, "x"), Phase.EXEC, FailureKind.EXEC_TIMEOUT),
    (httpx.ConnectError("refused"), Phase.CREATE, FailureKind.TRANSPORT),
    (httpx.ConnectTimeout("slow"), Phase.CREATE, FailureKind.TRANSPORT),
    (httpx.ReadTimeout("slow"), Phase.CREATE, FailureKind.READY_TIMEOUT),
    (httpx.ReadTimeout("slow"), Phase.EXEC, FailureKind.EXEC_TIMEOUT),
    (ConnectionRefusedError(), Phase.CREATE, FailureKind.TRANSPORT),
    (TimeoutError(), Phase.CREATE, FailureKind.READY_TIMEOUT),
    (Exception("Command ended without an end event"), Phase.EXEC, FailureKind.EXEC_ERROR),
    (ProviderError(FailureKind.EXEC_TIMEOUT, "x"), Phase.EXEC, FailureKind.EXEC_TIMEOUT),
    (ValueError("ours"), Phase.EXEC, FailureKind.UNKNOWN),
]


@pytest.mark.parametrize(("exc", "phase", "kind"), CLASSIFICATION, ids=lambda v: type(v).__name__)
def test_classification_table(exc: BaseException, phase: Phase, kind: FailureKind) -> None:
    assert classify_e2b(exc, phase) is kind


def test_options_are_checked_and_debug_mode_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ProviderConfigError, match="no API key"):
        E2BProvider.from_options({})
    with pytest.raises(ProviderConfigError, match="unknown option"):
        E2BProvider.from_options({"api_key": "k", "retries": "2"})
    with pytest.raises(ProviderConfigError, match="create_retries must be"):
        E2BProvider.from_options({"api_key": "k", "create_retries": "-1"})
    monkeypatch.setenv("E2B_DEBUG", "true")
    with pytest.raises(ProviderConfigError, match="E2B_DEBUG"):
        E2BProvider.from_options({"api_key": "k"})
    monkeypatch.delenv("E2B_DEBUG")
    monkeypatch.setenv("E2B_API_KEY", "from-env")
    provider = E2BProvider.from_options({})
    assert provider.options.connection == {"debug": False} and provider.options.where == "https://api.e2b.app"
    assert (sandbox_timeout(0.2), sandbox_timeout(600.5), sandbox_timeout(float("inf"))) == (1, 601, 86_400)


def test_any_e2b_in_the_extras_range_is_accepted_and_others_refused() -> None:
    # the [e2b] extra's range (>=2.56,<3): 2.56.0 and 2.63.0 both pass this suite against the local E2B
    assert [sdk_supported(v) for v in ("2.56.0", "2.63.0", "2.99.1rc1")] == [True, True, True]
    assert [sdk_supported(v) for v in ("2.55.9", "3.0.0", "1.9", "dev")] == [False, False, False, False]
    assert E2BProvider.from_options({"api_key": "k"}).versions() == {"e2b": metadata.version("e2b")}


def test_the_sdks_connection_cap_is_widened_unless_the_user_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdk_transports, "max_connections", sdk_transports.max_connections)  # restored afterwards
    assert E2BProvider.from_options({"api_key": "k"}).options.max_connections == 1000
    E2BProvider.from_options({"api_key": "k", "max_connections": "1500"})
    assert sdk_transports.max_connections == 1500
    monkeypatch.setenv("E2B_MAX_CONNECTIONS", "300")
    assert E2BProvider.from_options({"api_key": "k"}).options.max_connections is None
    assert sdk_transports.max_connections == 1500  # left as it was: the user's setting is the SDK's to read


def _provider(e2b: RunningE2B, **options: Any) -> E2BProvider:
    return E2BProvider.from_options({"base_url": e2b.url, "token": e2b.token, "sandbox_url": e2b.url, **options})


async def test_the_provider_walks_the_contract_against_the_front(open_e2b: Open) -> None:
    e2b, _ = await open_e2b("async")
    await check_live_lifecycle(_provider(e2b), 10)  # the live tests' walk: two sandboxes, one command, cleanup
    provider = _provider(e2b)
    ref = await provider.create(SandboxSpec(run_id="r", rollout_id="x", engine="e1", lifetime_s=90))
    assert await provider.wait_ready(ref, 5) == ReadyObservation(poll_window_s=0.0, polls=0)
    with pytest.raises(TimeoutException) as timed_out:
        await provider.exec(ref, ["sleep", "5"], 0.3)
    assert provider.classify(timed_out.value, Phase.EXEC) is FailureKind.EXEC_TIMEOUT
    (listed,) = await provider.list_owned("r", "e1")
    assert listed.rollout_id == "x" and listed.handle is None
    assert (await provider.exec(listed, ["echo", "by id"], 5)).stdout == "by id\n"  # no SDK handle: connect by id
    assert await provider.list_owned("r", "e2") == []
    assert provider.versions() == {"e2b": metadata.version("e2b")}
    sb = e2b.simulator.get(ref.sandbox_id)
    assert sb.lifetime_s == 90 and dict(sb.meta["e2b_metadata"]) == {
        "stampede-run": "r",
        "stampede-rollout": "x",
        "stampede-engine": "e1",
        "stampede-invocation": INVOCATION,
    }
    assert await provider.cleanup("r") == 1 and await provider.list_owned("r") == []


async def test_the_provider_surfaces_throttling_at_once_unless_told_to_retry(open_e2b: Open) -> None:
    e2b, _ = await open_e2b("async", **{"create_rate.per_s": 2.0, "create_rate.burst": 1.0})
    provider = _provider(e2b)
    await provider.create(SandboxSpec(run_id="r", rollout_id="a"))
    with pytest.raises(RateLimitException) as throttled:
        await provider.create(SandboxSpec(run_id="r", rollout_id="b"))
    assert provider.classify(throttled.value, Phase.CREATE) is FailureKind.RATE_LIMITED
    started = time.monotonic()
    await _provider(e2b, create_retries=3).create(SandboxSpec(run_id="r", rollout_id="c"))  # Retry-After: 1 s
    assert time.monotonic() - started >= 0.9
    with pytest.raises(ProviderError, match="refused the API key"):
        await E2BProvider.from_options({"base_url": e2b.url, "token": "wrong", "sandbox_url": e2b.url}).preflight()


# --- the front as its own process, and whole runs ------------------------------------------------------


@pytest.mark.slow
def test_a_ramp_through_the_real_sdk_has_only_classified_failures(tmp_path: Path) -> None:
    run = run_local("e2b", tmp_path, "--stages", "20,40", "--hold", "5")
    rollouts, truth, manifest = run.rollouts, run.truth, run.manifest
    assert len(rollouts) >= 60 and (rollouts["outcome"] == "ok").sum() >= 60
    assert set(rollouts["failure_kind"].dropna()) <= {"rate_limited", "quota_exhausted"}  # e2b-like: 5 creates/s
    assert set(rollouts["sdk_version"]) == {f"e2b={metadata.version('e2b')}"} and manifest["profile"] == "e2b-like"
    assert set(truth["id"]) == set(rollouts["sandbox_id"].dropna())  # no sandbox the harness does not know of
    assert set(truth["status"]) == {"TERMINATED"}  # and every one of them killed
    ok = rollouts[rollouts["outcome"] == "ok"]
    assert (ok["ready_poll_s"] == 0).all() and ok["tti_s"].notna().all()
    assert "unknown failures 0; harness failures 0" in run.stdout
