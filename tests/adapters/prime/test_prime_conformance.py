"""Prime's own SDK (prime-sandboxes 0.5.1), unchanged, as the judge of the stub: sync and async clients.

The SDK is pointed at the stub the documented way (`PRIME_API_BASE_URL`, `PRIME_API_KEY`; `HOME` moved so
its auth cache lands in a temporary directory). Every call the `prime` provider makes is exercised with
both `SandboxClient` and `AsyncSandboxClient`: create, wait_for_creation (the batching coalescer and the
gateway probe), get, list with a label filter, batch status, execute_command over ConnectRPC (stdout,
stderr, exit codes, env, working dir), delete, bulk delete; then the SDK's error classes for 401, 404,
429 (throttle and quota), sandboxes that fail to start, and commands that time out, OOM or outlive their
sandbox. The sync client runs in worker threads here so the in-process stub keeps serving; the last test
drives it plainly against the real `python -m providers.sim.prime.serve` child.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prime_sandboxes import (
    APIClient,
    APIError,
    AsyncSandboxClient,
    CommandTimeoutError,
    CreateSandboxRequest,
    SandboxClient,
    SandboxImagePullError,
    SandboxNotRunningError,
    SandboxOOMError,
    UnauthorizedError,
)
from prime_sandboxes.core import client as sdk_core

from providers.sim.prime.api import RunningStub, StubSettings, start_stub

TOKEN = "conformance-token"
FLAVOURS = ("sync", "async")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def sdk_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What a user sets to point the SDK somewhere; nothing of theirs (~/.prime) is read or written."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PRIME_API_KEY", TOKEN)
    for name in ("PRIME_TEAM_ID", "PRIME_CONTEXT", "PRIME_BASE_URL", "PRIME_USER_ID"):
        monkeypatch.delenv(name, raising=False)


class Sdk:
    """One SDK client of either flavour behind `await sdk("method", ...)`."""

    def __init__(self, flavour: str, url: str, monkeypatch: pytest.MonkeyPatch, api_key: str = TOKEN) -> None:
        monkeypatch.setenv("PRIME_API_BASE_URL", url)
        self.flavour = flavour
        self.client: Any = (
            AsyncSandboxClient(api_key=api_key) if flavour == "async" else SandboxClient(APIClient(api_key=api_key))
        )
        self.sent: list[httpx.Request] = []  # what the SDK put on the wire to the control plane
        hook = self._record_async if flavour == "async" else self.sent.append
        self.client.client.client.event_hooks["request"].append(hook)

    async def _record_async(self, request: httpx.Request) -> None:
        self.sent.append(request)

    async def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        call = getattr(self.client, method)
        if self.flavour == "async":
            return await call(*args, **kwargs)
        return await asyncio.to_thread(call, *args, **kwargs)

    async def close(self) -> None:
        if self.flavour == "async":
            await self.client.aclose()
        else:
            self.client.client.client.close()


Open = Callable[..., Awaitable[tuple[RunningStub, Sdk]]]


@pytest.fixture
async def open_stub(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Open]:
    """`await open_stub(flavour, **profile_overrides)` -> an in-process stub and an SDK client pointed at it."""
    opened: list[tuple[RunningStub, Sdk]] = []

    async def open_(flavour: str, api_key: str = TOKEN, **overrides: Any) -> tuple[RunningStub, Sdk]:
        settings = StubSettings(profile="ideal", seed=5, token=TOKEN, overrides=tuple(overrides.items()))
        stub = await start_stub(settings)
        sdk = Sdk(flavour, stub.url, monkeypatch, api_key)
        opened.append((stub, sdk))
        return stub, sdk

    yield open_
    for stub, sdk in opened:
        await sdk.close()
        await stub.close()


def request(name: str = "conf", labels: tuple[str, ...] = ("suite=conformance",), **extra: Any) -> CreateSandboxRequest:
    return CreateSandboxRequest(name=name, docker_image="python:3.11-slim", labels=list(labels), **extra)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_lifecycle(flavour: str, open_stub: Open) -> None:
    _stub, sdk = await open_stub(flavour)
    sandbox = await sdk(
        "create", request(labels=("run=a", "role=x"), environment_vars={"GREETING": "hello"}, timeout_minutes=30)
    )
    other = await sdk("create", request("other", labels=("run=b",)))
    assert sandbox.status in ("PENDING", "PROVISIONING") and sandbox.labels == ["run=a", "role=x"]
    assert sandbox.timeout_minutes == 30 and sandbox.environment_vars == {"GREETING": "hello"}
    await sdk("wait_for_creation", sandbox.id)
    got = await sdk("get", sandbox.id)
    assert got.status == "RUNNING" and got.started_at is not None and got.vm is True

    listed = await sdk("list", labels=["run=a"])
    assert [s.id for s in listed.sandboxes] == [sandbox.id] and listed.total == 1 and not listed.has_next
    assert [s.id for s in (await sdk("list", labels=["run=a", "role=x"], exclude_terminated=True)).sandboxes] == [
        sandbox.id
    ]
    assert (await sdk("list", labels=["run=a", "role=y"])).sandboxes == []

    statuses = await sdk("get_sandbox_statuses", [sandbox.id, other.id, "sb-unknown"])
    assert {s.sandbox_id for s in statuses.statuses} == {sandbox.id, other.id}
    assert [(e.sandbox_id, e.code) for e in statuses.errors] == [("sb-unknown", "NOT_FOUND")]

    result = await sdk("execute_command", sandbox.id, "echo $GREETING; echo oops >&2; exit 7")
    assert (result.stdout, result.stderr, result.exit_code) == ("hello\n", "oops\n", 7)
    result = await sdk("execute_command", sandbox.id, "pwd; echo $EXTRA", working_dir="/tmp", env={"EXTRA": "1"})
    assert (result.stdout, result.exit_code) == ("/tmp\n1\n", 0)
    result = await sdk("execute_command", sandbox.id, "nosuchcommand")
    assert result.exit_code == 127 and "not found" in result.stderr

    deleted = await sdk("delete", sandbox.id)
    assert deleted["id"] == sandbox.id
    assert (await sdk("get", sandbox.id)).status == "TERMINATED"
    with pytest.raises(SandboxNotRunningError) as info:
        await sdk("execute_command", sandbox.id, "true")
    assert info.value.status == "TERMINATED"
    assert [s.id for s in (await sdk("list", labels=["run=a"], exclude_terminated=True)).sandboxes] == []

    paths = {(r.method, r.url.path) for r in sdk.sent}
    assert ("POST", "/api/v1/sandbox/status:batchGet") in paths  # wait_for_creation's coalescer
    assert ("POST", f"/api/v1/sandbox/{sandbox.id}/auth") not in paths  # the create's gatewayAuth was used


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_bulk_delete_by_labels_and_by_ids(flavour: str, open_stub: Open) -> None:
    _stub, sdk = await open_stub(flavour)
    run_a = [await sdk("create", request(f"a{i}", labels=("stampede-run=A",))) for i in range(3)]
    run_b = await sdk("create", request("b", labels=("stampede-run=B",)))
    result = await sdk("bulk_delete", labels=["stampede-run=A"])
    assert sorted(result.succeeded) == sorted(s.id for s in run_a) and result.failed == []
    assert (await sdk("get", run_b.id)).status != "TERMINATED"
    result = await sdk("bulk_delete", sandbox_ids=[run_b.id, "sb-unknown"])
    assert result.succeeded == [run_b.id] and [f["sandbox_id"] for f in result.failed] == ["sb-unknown"]


async def test_wait_for_creation_coalesces_status_polls(open_stub: Open) -> None:
    stub, sdk = await open_stub("async", **{"boot.median_s": 0.3})
    sandboxes = await asyncio.gather(*(sdk("create", request(f"s{i}")) for i in range(150)))
    await asyncio.gather(*(sdk("wait_for_creation", s.id) for s in sandboxes))
    batches = [json.loads(r.content)["sandbox_ids"] for r in sdk.sent if r.url.path.endswith("status:batchGet")]
    assert all(0 < len(ids) <= 100 and len(set(ids)) == len(ids) for ids in batches)
    assert len(batches) < 150 and max(len(ids) for ids in batches) > 50  # one request per 100 waiters
    probes = stub.simulator.exec_counts["ok"]
    assert probes >= 150  # each wait ends with the gateway probe (`echo 'sandbox ready'`)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_401_and_404(flavour: str, open_stub: Open) -> None:
    _, sdk = await open_stub(flavour, api_key="wrong-key")
    with pytest.raises(UnauthorizedError):
        await sdk("list")
    with pytest.raises(UnauthorizedError):
        await sdk("create", request())
    _stub, sdk = await open_stub(flavour)
    with pytest.raises(APIError, match=r"^HTTP 404: Sandbox not found$"):
        await sdk("get", "sb-nope")
    with pytest.raises(APIError, match=r"^HTTP 404: Sandbox not found$"):
        await sdk("delete", "sb-nope")


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_429_throttle_and_quota_after_the_sdks_own_retries(
    flavour: str, open_stub: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK waits 10 s then 30 s between its three attempts at a 429; the schedule is shortened so the
    # test sees the same attempts and the same final error in milliseconds.
    monkeypatch.setattr(sdk_core._PLATFORM_RETRY_WAIT, "_rate_limit_delays", (0.01, 0.01))
    stub, sdk = await open_stub(flavour, **{"create_rate.per_s": 0.001, "create_rate.burst": 1.0})
    await sdk("create", request())
    with pytest.raises(APIError, match=r"^HTTP 429: Sandbox creation rate limit exceeded"):
        await sdk("create", request())
    assert stub.simulator.stats()["create_attempts"] == 4  # 1 + the SDK's 3 attempts
    stub, sdk = await open_stub(flavour, **{"quota.max_active": 1})
    await sdk("create", request())
    with pytest.raises(APIError, match=r"^HTTP 429: Sandbox limit reached"):
        await sdk("create", request())


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_sandboxes_that_fail_to_start(flavour: str, open_stub: Open) -> None:
    _, sdk = await open_stub(flavour, **{"errors.boot_crash_prob": 1.0})
    sandbox = await sdk("create", request())
    with pytest.raises(SandboxNotRunningError) as info:
        await sdk("wait_for_creation", sandbox.id)
    assert (info.value.status, info.value.error_type) == ("ERROR", "BOOT_FAILED")
    _, sdk = await open_stub(flavour, **{"boot.median_s": 60.0, "startup.deadline_s": 0.2})
    sandbox = await sdk("create", request())
    with pytest.raises(SandboxNotRunningError) as info:
        await sdk("wait_for_creation", sandbox.id)
    assert (info.value.status, info.value.error_type) == ("ERROR", "PROVISIONING_TIMEOUT")
    _, sdk = await open_stub(
        flavour, **{"pool.initial_nodes_warm": False, "image.pull_median_s": 0.05, "image.pull_failure_prob": 1.0}
    )
    sandbox = await sdk("create", request())
    with pytest.raises(SandboxImagePullError):
        await sdk("wait_for_creation", sandbox.id)
    _stub, sdk = await open_stub(flavour, **{"boot.median_s": 60.0})
    sandbox = await sdk("create", request())
    with pytest.raises(SandboxNotRunningError, match="did not reach RUNNING within 1s"):
        await sdk("wait_for_creation", sandbox.id, max_attempts=1)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_commands_that_time_out_oom_die_or_hit_a_gateway_error(flavour: str, open_stub: Open) -> None:
    stub, sdk = await open_stub(flavour)
    sandbox = await sdk("create", request(memory_gb=0.0625))
    await sdk("wait_for_creation", sandbox.id)
    with pytest.raises(CommandTimeoutError):
        await sdk("execute_command", sandbox.id, "sleep 30", timeout=1)
    with pytest.raises(SandboxOOMError, match="out-of-memory"):
        await sdk("execute_command", sandbox.id, "memhog 512")
    other = await sdk("create", request("other"))
    await sdk("wait_for_creation", other.id)
    stub.simulator.terminate(other.id)  # gone behind the client's back
    with pytest.raises(SandboxNotRunningError) as info:
        await sdk("execute_command", other.id, "true")
    assert info.value.status == "TERMINATED"
    stub, sdk = await open_stub(flavour, **{"errors.exec_error_prob": 1.0})
    sandbox = await sdk("create", request())
    await sdk("get", sandbox.id)
    for _ in range(200):
        if (await sdk("get", sandbox.id)).status == "RUNNING":
            break
        await asyncio.sleep(0.01)
    with pytest.raises(APIError, match=r"^Connect RPC failed \(unavailable\): Gateway error"):
        await sdk("execute_command", sandbox.id, "true")


@pytest.fixture
def serve_child() -> Iterator[dict[str, Any]]:
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "providers.sim.prime.serve",
            "--profile",
            "ideal",
            f"--token={TOKEN}",
            "--exit-on-stdin-eof",
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        yield json.loads(child.stdout.readline())
    finally:
        child.stdin.close()
        child.wait(timeout=30)
        child.stdout.close()


def test_sync_client_against_the_serve_child(serve_child: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIME_API_BASE_URL", serve_child["url"])
    client = SandboxClient(APIClient())
    sandboxes = [client.create(request(f"c{i}", labels=("stampede-run=child",))) for i in range(3)]
    for sandbox in sandboxes:
        client.wait_for_creation(sandbox.id)
    result = client.execute_command(sandboxes[0].id, "echo from-child; exit 2")
    assert (result.stdout, result.exit_code) == ("from-child\n", 2)
    assert client.get_sandbox_statuses([s.id for s in sandboxes]).statuses[0].status == "RUNNING"
    assert len(client.list(labels=["stampede-run=child"], exclude_terminated=True).sandboxes) == 3
    assert len(client.bulk_delete(labels=["stampede-run=child"]).succeeded) == 3
    assert client.list(labels=["stampede-run=child"], exclude_terminated=True).sandboxes == []
    client.client.client.close()
