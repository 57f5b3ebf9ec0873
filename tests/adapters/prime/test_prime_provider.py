"""The `prime` provider (Prime's SDK inside) against the real Prime-like stub: lifecycle, every failure kind, runs.

Each failure is produced by the stub the way the vendor would produce it (profile overrides, the
simulator ending a sandbox behind the client's back) and must reach the provider's `classify` as the
right kind. The few SDK answers the stub cannot produce (402 billing, client-side transport faults,
undecodable responses) are classified from the SDK's own exception objects.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pandas as pd
import prime_sandboxes
import pydantic
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from prime_sandboxes import (
    APIError,
    APITimeoutError,
    CommandTimeoutError,
    PaymentRequiredError,
    Sandbox,
    SandboxNotRunningError,
    SandboxTimeoutError,
)
from prime_sandboxes.core import client as sdk_core

from harness.results.read.dataset import load_truth
from providers import create_provider
from providers.base import FailureKind, Phase, ProviderConfigError, ProviderError, SandboxRef, SandboxSpec
from providers.sim.prime.api import RunningStub, StubSettings, start_stub
from providers.vendors.prime.errors import classify_prime
from providers.vendors.prime.provider import PrimeProvider
from tests.support.prime_status_cases import PRIME_STATUS_CASES
from tests.support.submits import wait_for_first_submit

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def private_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ~/.prime of the user's is read or written; no PRIME_* of theirs applies."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("PRIME_API_KEY", "PRIME_TEAM_ID", "PRIME_CONTEXT", "PRIME_API_BASE_URL", "PRIME_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def spec(rollout: str = "r1", run: str = "run-1", **extra: Any) -> SandboxSpec:
    return SandboxSpec(run_id=run, rollout_id=rollout, lifetime_s=600, **extra)


Open = Callable[..., Awaitable[tuple[RunningStub, PrimeProvider]]]


@pytest.fixture
async def open_stub() -> AsyncIterator[Open]:
    """`await open_stub(token=..., options=..., **profile_overrides)`: an in-process stub and a provider on it."""
    opened: list[tuple[RunningStub, PrimeProvider]] = []

    async def open_(token: str | None = None, options: dict[str, str] | None = None, **overrides: Any):
        stub = await start_stub(StubSettings(profile="ideal", seed=3, overrides=tuple(overrides.items())))
        provider = PrimeProvider.from_options({"base_url": stub.url, "token": token or stub.token, **(options or {})})
        opened.append((stub, provider))
        return stub, provider

    yield open_
    for stub, provider in opened:
        await provider.aclose()
        await stub.close()


async def expect(kind: FailureKind, provider: PrimeProvider, phase: Phase, call: Awaitable[Any]) -> BaseException:
    """The call fails, and the provider classifies the failure as `kind` (as the harness would)."""
    with pytest.raises(Exception) as info:
        await call
    assert provider.classify(info.value, phase) is kind, repr(info.value)
    return info.value


async def test_lifecycle_labels_exec_and_idempotent_terminate(open_stub: Open, private_home: Path) -> None:
    stub, provider = await open_stub()
    await provider.preflight()
    assert provider.versions() == {"prime-sandboxes": "0.5.1"}
    ref = await provider.create(spec(env={"WHO": "stampede"}, network=False))
    await provider.wait_ready(ref, timeout=10)
    result = await provider.exec(ref, ["echo", "hello world"], timeout=10)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "hello world\n", "")
    result = await provider.exec(ref, ["sh", "-c", "echo $WHO; echo oops >&2; exit 3"], timeout=10)
    assert (result.exit_code, result.stdout, result.stderr) == (3, "stampede\n", "oops\n")
    result = await provider.exec(ref, ["nosuchcommand"], timeout=10)
    assert result.exit_code == 127 and "not found" in result.stderr
    sandbox = stub.simulator.get(ref.sandbox_id)
    assert {"stampede-run=run-1", "stampede-rollout=r1"} <= set(sandbox.labels)
    assert sandbox.meta["network_allowlist"] == []  # network=False: no egress
    assert [r.sandbox_id for r in await provider.list_owned("run-1")] == [ref.sandbox_id]
    assert await provider.list_owned("other-run") == []
    await provider.terminate(ref)
    await provider.terminate(ref)  # idempotent
    assert await provider.list_owned("run-1") == []
    assert not (private_home / ".prime" / "sandbox_auth_cache.json").exists()  # auth_cache=memory


async def test_auth_cache_file_is_the_sdk_as_shipped(open_stub: Open, private_home: Path) -> None:
    _stub, provider = await open_stub(options={"auth_cache": "file"})
    ref = await provider.create(spec())
    cache = json.loads((private_home / ".prime" / "sandbox_auth_cache.json").read_text())
    assert set(cache) == {ref.sandbox_id}


async def test_many_sandboxes_list_in_pages_and_cleanup_reaps_by_label(open_stub: Open) -> None:
    _stub, provider = await open_stub()
    refs = await asyncio.gather(*(provider.create(spec(f"r{i}")) for i in range(230)))
    await asyncio.gather(*(provider.wait_ready(ref, timeout=30) for ref in refs))
    await provider.create(spec("elsewhere", run="run-2"))
    assert len(await provider.list_owned("run-1")) == 230  # pages of 100
    assert await provider.cleanup("run-1") == 230
    assert await provider.list_owned("run-1") == []
    assert len(await provider.list_owned("run-2")) == 1


async def test_throttle_and_quota_surface_at_once_despite_the_sdks_retries(open_stub: Open) -> None:
    stub, provider = await open_stub(**{"create_rate.per_s": 0.01, "create_rate.burst": 1.0})
    await provider.create(spec("a"))
    started = time.monotonic()
    error = await expect(FailureKind.RATE_LIMITED, provider, Phase.CREATE, provider.create(spec("b")))
    assert time.monotonic() - started < 8  # not the SDK's 10 s + 30 s (8 s: room for a busy machine)
    assert isinstance(error, ProviderError) and error.retry_after is not None and error.retry_after >= 1
    assert stub.simulator.stats()["create_attempts"] == 2
    stub, provider = await open_stub(**{"quota.max_active": 1})
    await provider.create(spec("a"))
    await expect(FailureKind.QUOTA_EXHAUSTED, provider, Phase.CREATE, provider.create(spec("b")))


async def test_retry_429_keeps_the_sdks_retries_and_counts_them(
    open_stub: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sdk_core._PLATFORM_RETRY_WAIT, "_rate_limit_delays", (0.2, 0.2))  # instead of 10 s, 30 s
    _, provider = await open_stub(options={"retry_429": "1"}, **{"create_rate.per_s": 10.0, "create_rate.burst": 1.0})
    await provider.create(spec("a"))
    ref = await provider.create(spec("b"))  # 429, then the SDK's retry finds a fresh token
    assert ref.meta == {"throttled_429": 1}
    _stub, provider = await open_stub(options={"retry_429": "1"}, **{"quota.max_active": 1})
    await provider.create(spec("a"))
    error = await expect(FailureKind.QUOTA_EXHAUSTED, provider, Phase.CREATE, provider.create(spec("b")))
    assert str(error).startswith("HTTP 429: Sandbox limit reached")  # the SDK's APIError after 3 attempts


async def test_capacity_transient_5xx_and_invalid_requests_on_create(open_stub: Open) -> None:
    _, provider = await open_stub(
        **{"pool.initial_nodes": 1, "pool.slots_per_node": 1, "pool.max_nodes": 1, "pool.max_queue": 0}
    )
    await provider.create(spec("a"))
    await expect(FailureKind.CAPACITY, provider, Phase.CREATE, provider.create(spec("b")))
    _, provider = await open_stub(**{"errors.create_transient_prob": 1.0})
    error = await expect(FailureKind.CREATE_ERROR, provider, Phase.CREATE, provider.create(spec()))
    assert str(error).startswith("HTTP 5")
    _stub, provider = await open_stub()
    await expect(FailureKind.INVALID_REQUEST, provider, Phase.CREATE, provider.create(spec(cpu=0)))  # the API's 422
    await expect(FailureKind.INVALID_REQUEST, provider, Phase.CREATE, provider.create(spec(disk_gb=-1)))


async def test_sandboxes_that_never_become_ready(open_stub: Open) -> None:
    _, provider = await open_stub(**{"errors.boot_crash_prob": 1.0})
    ref = await provider.create(spec())
    await expect(FailureKind.DIED_BEFORE_READY, provider, Phase.READY, provider.wait_ready(ref, timeout=10))
    _, provider = await open_stub(**{"boot.median_s": 60.0, "startup.deadline_s": 0.2})
    ref = await provider.create(spec())
    await expect(FailureKind.READY_TIMEOUT, provider, Phase.READY, provider.wait_ready(ref, timeout=10))  # vendor's
    ref = await provider.create(spec("slow"))
    await expect(FailureKind.READY_TIMEOUT, provider, Phase.READY, provider.wait_ready(ref, timeout=0.1))  # ours
    _, provider = await open_stub(
        **{"pool.initial_nodes_warm": False, "image.pull_median_s": 0.05, "image.pull_failure_prob": 1.0}
    )
    ref = await provider.create(spec())
    await expect(FailureKind.IMAGE, provider, Phase.READY, provider.wait_ready(ref, timeout=10))
    _stub, provider = await open_stub(**{"errors.exec_error_prob": 1.0})  # RUNNING, but the gateway fails it
    ref = await provider.create(spec())
    await expect(FailureKind.READY_TIMEOUT, provider, Phase.READY, provider.wait_ready(ref, timeout=1.5))


async def test_exec_timeout_oom_death_and_gateway_errors(open_stub: Open) -> None:
    stub, provider = await open_stub()
    ref = await provider.create(spec(memory_mb=64))
    await provider.wait_ready(ref, timeout=10)
    await expect(FailureKind.EXEC_TIMEOUT, provider, Phase.EXEC, provider.exec(ref, ["sleep", "30"], timeout=1))
    error = await expect(FailureKind.OOM, provider, Phase.EXEC, provider.exec(ref, ["memhog", "512"], timeout=10))
    assert "limit 64 MiB" in str(error)
    other = await provider.create(spec("b"))
    await provider.wait_ready(other, timeout=10)
    stub.simulator.terminate(other.sandbox_id)  # gone behind our back (reaped, crashed, preempted)
    await expect(FailureKind.DIED_DURING_EXEC, provider, Phase.EXEC, provider.exec(other, ["true"], timeout=10))
    third = await provider.create(spec("c"))
    await provider.wait_ready(third, timeout=10)
    stub.simulator.profile = stub.simulator.profile.with_overrides({"errors.exec_error_prob": 1.0})
    await expect(FailureKind.EXEC_ERROR, provider, Phase.EXEC, provider.exec(third, ["true"], timeout=10))


async def test_cancellation_stays_cancellation_through_the_sdk(open_stub: Open) -> None:
    """connectrpc turns a cancelled stream into an error; the provider must hand back CancelledError."""
    _, provider = await open_stub()
    ref = await provider.create(spec())
    await provider.wait_ready(ref, timeout=10)
    task = asyncio.create_task(provider.exec(ref, ["sleep", "30"], timeout=60))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(TimeoutError):  # an outer deadline (the harness's watchdog) still fires as one
        async with asyncio.timeout(0.3):
            await provider.exec(ref, ["sleep", "30"], timeout=60)
    assert (await provider.exec(ref, ["echo", "still fine"], timeout=10)).stdout == "still fine\n"
    _, slow = await open_stub(**{"boot.median_s": 60.0})
    other = await slow.create(spec("b"))
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.5):  # past the first status polls
            await slow.wait_ready(other, timeout=60)


async def test_bad_token_and_unreachable_endpoint(open_stub: Open) -> None:
    _stub, provider = await open_stub(token="wrong")
    error = await expect(FailureKind.AUTH, provider, Phase.CREATE, provider.preflight())
    assert "refused the API key" in str(error)
    await expect(FailureKind.AUTH, provider, Phase.CREATE, provider.create(spec()))
    provider = PrimeProvider.from_options({"base_url": "http://127.0.0.1:9", "token": "t", "preflight_timeout": "20"})
    try:
        error = await expect(FailureKind.TRANSPORT, provider, Phase.CREATE, provider.preflight())
        assert "unreachable" in str(error)
        await expect(FailureKind.TRANSPORT, provider, Phase.CREATE, provider.create(spec()))
        ref = SandboxRef(sandbox_id="sb-x", provider="prime", run_id="run-1")
        await expect(FailureKind.TRANSPORT, provider, Phase.EXEC, provider.exec(ref, ["true"], timeout=5))
    finally:
        await provider.aclose()


def _raised(exc: BaseException, cause: BaseException) -> BaseException:
    """`exc` as the SDK raises it: `raise exc from cause`."""
    try:
        raise exc from cause
    except BaseException as raised:
        return raised


@pytest.mark.parametrize(
    ("exc", "phase", "kind"),
    [
        (PaymentRequiredError("Payment required. Check billing status."), Phase.CREATE, FailureKind.QUOTA_EXHAUSTED),
        (APITimeoutError("Request timed out: ReadTimeout"), Phase.CREATE, FailureKind.TRANSPORT),
        (APITimeoutError("Request timed out: ReadTimeout"), Phase.READY, FailureKind.READY_TIMEOUT),
        (APIError("HTTP 429: Too Many Requests"), Phase.CREATE, FailureKind.RATE_LIMITED),
        (APIError("HTTP 403: Forbidden"), Phase.CREATE, FailureKind.AUTH),
        (APIError("HTTP 500: Internal server error"), Phase.READY, FailureKind.TRANSPORT),
        (APIError("HTTP 502: Bad gateway"), Phase.TERMINATE, FailureKind.TRANSPORT),
        (
            APIError("Sandbox status lookup failed for sb-1: NOT_FOUND: Sandbox not found"),
            Phase.READY,
            FailureKind.DIED_BEFORE_READY,
        ),
        (APIError("Sandbox status lookup failed for sb-1: FORBIDDEN: no"), Phase.READY, FailureKind.AUTH),
        (
            APIError("Connect RPC failed (unauthenticated): Invalid or expired gateway token"),
            Phase.EXEC,
            FailureKind.AUTH,
        ),
        (APIError("Connect RPC failed (resource_exhausted): slow down"), Phase.EXEC, FailureKind.RATE_LIMITED),
        (APIError("Connect RPC failed (internal): boom"), Phase.EXEC, FailureKind.EXEC_ERROR),
        (
            _raised(
                APIError("Connect RPC failed (unavailable): connection refused"),
                _raised(ConnectError(Code.UNAVAILABLE, "connection refused"), ConnectionRefusedError()),
            ),
            Phase.EXEC,
            FailureKind.TRANSPORT,
        ),
        (APIError("Command stream ended without exit code"), Phase.EXEC, FailureKind.EXEC_ERROR),
        (APIError("Sandbox sb-1 is being deleted"), Phase.EXEC, FailureKind.HARNESS),
        (CommandTimeoutError("sb-1", "true", 10), Phase.EXEC, FailureKind.EXEC_TIMEOUT),
        (SandboxTimeoutError("sb-1", "TIMEOUT", "TIMEOUT"), Phase.EXEC, FailureKind.DIED_DURING_EXEC),
        (
            SandboxNotRunningError("sb-1", "RUNNING", "GATEWAY_REACHABILITY_TIMEOUT"),
            Phase.READY,
            FailureKind.READY_TIMEOUT,
        ),
        (SandboxNotRunningError("sb-1", "ERROR", "OOM_KILLED"), Phase.READY, FailureKind.OOM),
        (
            SandboxNotRunningError("sb-1", message="Timeout waiting for the VM image build"),
            Phase.READY,
            FailureKind.READY_TIMEOUT,
        ),
        (ConnectError(Code.DEADLINE_EXCEEDED, "Request timed out"), Phase.EXEC, FailureKind.EXEC_TIMEOUT),
        (TimeoutError(), Phase.READY, FailureKind.READY_TIMEOUT),
        (ConnectionResetError(), Phase.EXEC, FailureKind.TRANSPORT),
    ],
)
def test_classification_of_sdk_exceptions_the_stub_cannot_produce(
    exc: BaseException, phase: Phase, kind: FailureKind
) -> None:
    assert classify_prime(exc, phase) is kind


@pytest.mark.parametrize(("status", "body", "phase", "kind"), PRIME_STATUS_CASES)
def test_every_prime_status_as_the_sdk_words_it(
    status: int, body: dict[str, Any], phase: Phase, kind: FailureKind
) -> None:
    """The SDK keeps only `HTTP <status>: <detail>`: the same table must come out as the stub adapter's."""
    assert classify_prime(APIError(f"HTTP {status}: {body['detail']}"), phase) is kind


def test_a_429_on_create_keeps_retry_after_and_tells_quota_from_throttling() -> None:
    from providers.vendors.prime.provider import _throttle_error

    throttled = _throttle_error(429, {"detail": "slow down", "retryAfter": 1.5}, {})
    assert (throttled.kind, throttled.retry_after) == (FailureKind.RATE_LIMITED, 1.5)
    quota = _throttle_error(429, {"detail": "x", "errorCode": "SANDBOX_LIMIT_REACHED"}, {"Retry-After": "3"})
    assert (quota.kind, quota.retry_after) == (FailureKind.QUOTA_EXHAUSTED, 3.0)


def test_an_unreadable_vendor_answer_is_a_vendor_error() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        Sandbox.model_validate({"id": "sb-1"})
    assert classify_prime(info.value, Phase.CREATE) is FailureKind.CREATE_ERROR
    assert classify_prime(info.value, Phase.EXEC) is FailureKind.EXEC_ERROR


def test_options_are_checked_in_one_line(private_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ProviderConfigError, match="no API key; set PRIME_API_KEY"):
        create_provider("prime", {})
    monkeypatch.setenv("PRIME_API_KEY", "pk-from-env")
    provider = create_provider("prime", {})
    assert isinstance(provider, PrimeProvider) and provider.options.api_key == "pk-from-env"
    assert provider.options.base_url is None and provider.where == "https://api.primeintellect.ai"
    bad = [
        ({"base_url": "ftp://x", "token": "t"}, "base_url must be http"),
        ({"base_url": "http://x"}, "needs a token"),
        ({"base_url": "http://x", "token": "t", "retry_429": "maybe"}, "retry_429 must be 1 or 0"),
        ({"base_url": "http://x", "token": "t", "auth_cache": "disk"}, "auth_cache must be memory or file"),
        ({"base_url": "http://x", "token": "t", "api_max_connections": "0"}, "api_max_connections must be"),
        ({"base_url": "http://x", "token": "t", "api_keepalive": "-1"}, "api_keepalive must be"),
    ]
    for options, message in bad:
        with pytest.raises(ProviderConfigError, match=message):
            create_provider("prime", options)
    monkeypatch.setattr(prime_sandboxes, "__version__", "0.6.0")
    with pytest.raises(ProviderConfigError, match=r"checked against prime-sandboxes==0\.5\.1, found 0\.6\.0"):
        create_provider("prime", {"base_url": "http://x", "token": "t"})
    assert create_provider("prime", {"base_url": "http://x", "token": "t", "check_sdk": "0"}).versions() == {
        "prime-sandboxes": "0.6.0"
    }
    monkeypatch.setattr(prime_sandboxes, "__version__", "0.5.1")
    monkeypatch.setenv("PRIME_CONTEXT", "../bad")
    with pytest.raises(ProviderConfigError, match="configuration is unusable"):
        PrimeProvider.from_options({"base_url": "http://127.0.0.1:1/api/v1", "token": "t"}).sdk  # noqa: B018
    assert PrimeProvider.from_options({"base_url": "http://h:1/api/v1/", "token": "t"}).options.base_url == "http://h:1"


@pytest.mark.slow
def test_stampede_run_prime_local_end_to_end(tmp_path: Path) -> None:
    """`stampede run --provider prime --local`: the embedded stub, the engine, the SDK, parquet."""
    command = [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        "--provider",
        "prime",
        "--local",
        "--stages",
        "20,40",
        "--hold",
        "3",
        "--out",
        str(tmp_path),
        "--progress-interval",
        "0",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=400, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink()]
    rollouts = pd.read_parquet(run_dir / "rollouts")
    assert len(rollouts) >= 40 and set(rollouts["provider"]) == {"prime"}
    kinds = set(rollouts["failure_kind"].dropna())
    assert not kinds & {"unknown", "harness"}, rollouts[rollouts["outcome"] != "ok"][["failure_kind", "error"]]
    assert (rollouts["outcome"] == "ok").mean() > 0.9
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["provider_versions"] == {"prime-sandboxes": "0.5.1"}
    assert set(rollouts["sdk_version"]) == {"prime-sandboxes=0.5.1"}
    truth = load_truth(run_dir)
    assert set(truth["status"]) <= {"TERMINATED", "ERROR", "TIMEOUT"}  # nothing leaked


@pytest.mark.slow
def test_ctrl_c_cancels_in_flight_rollouts_and_leaks_nothing(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        "--provider",
        "prime",
        "--local",
        "--stages",
        "200",
        "--hold",
        "60",
        "--out",
        str(tmp_path),
        "--progress-interval",
        "0",
        "--run-id",
        "ctrl-c",
    ]
    child = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Ctrl-C once rollouts are in flight (their write-ahead is on disk), not after a fixed time: on a busy CI
    # machine the vendor and SDK took longer than 8 s to start, and a run stopped before its first submit has none
    assert wait_for_first_submit(tmp_path / "ctrl-c", child), child.communicate(timeout=60)[1][-2000:]
    time.sleep(3)  # a few seconds of rollouts: some finished, most in flight
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 130, err[-2000:]
    rollouts = pd.read_parquet(tmp_path / "ctrl-c" / "rollouts")
    assert (rollouts["outcome"] == "cancelled").sum() > 0
    failed = rollouts[rollouts["outcome"] == "failed"]
    assert len(failed) <= 0.05 * len(rollouts), failed[["failure_kind", "error"]].value_counts()
    truth = load_truth(tmp_path / "ctrl-c")
    assert set(truth["status"]) <= {"TERMINATED", "ERROR", "TIMEOUT"}  # every sandbox ended
