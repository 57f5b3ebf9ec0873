"""The Prime-like HTTP API over real loopback HTTP: routes, errors, gateway exec, and Prime's own SDK."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prime_sandboxes.models import (
    BatchSandboxStatusResponse,
    BulkDeleteSandboxResponse,
    Sandbox,
    SandboxListResponse,
)

from providers.sim.core.clock import VirtualClock
from providers.sim.core.profile import load_profile
from providers.sim.core.simulator import VendorSimulator
from providers.sim.prime.api import RunningStub, StubSettings, start_stub

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BODY = {"name": "t", "docker_image": "python:3.12-slim", "labels": ["run-a", "x"], "timeout_minutes": 30}

MakeStub = Callable[..., Awaitable[RunningStub]]


@pytest.fixture
async def make_stub() -> AsyncIterator[MakeStub]:
    stubs: list[RunningStub] = []

    async def make(profile: str = "ideal", time_scale: float = 0.01, **overrides: Any) -> RunningStub:
        settings = StubSettings(
            profile=profile, seed=1, time_scale=time_scale, token=TOKEN, overrides=tuple(overrides.items())
        )
        stub = await start_stub(settings)
        stubs.append(stub)
        return stub

    yield make
    for stub in stubs:
        await stub.close()


@pytest.fixture
async def stub(make_stub: MakeStub) -> RunningStub:
    return await make_stub()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


async def _call(
    http: aiohttp.ClientSession, method: str, url: str, *, headers: dict[str, str] | None = AUTH, **kw: Any
) -> tuple[int, Any, Any]:
    async with http.request(method, url, headers=headers, **kw) as resp:
        body = await resp.json(content_type=None)
        return resp.status, body, resp.headers


async def _create(http: aiohttp.ClientSession, stub: RunningStub, **extra: Any) -> dict[str, Any]:
    status, body, _ = await _call(http, "POST", stub.api_url + "/sandbox", json={**BODY, **extra})
    assert status == 201, body
    return body


async def _wait_status(http: aiohttp.ClientSession, stub: RunningStub, sandbox_id: str, want: str) -> dict[str, Any]:
    for _ in range(400):
        _, body, _ = await _call(http, "GET", f"{stub.api_url}/sandbox/{sandbox_id}")
        if body["status"] == want:
            return body
        await asyncio.sleep(0.01)
    raise AssertionError(f"{sandbox_id} never reached {want}: {body}")


async def test_auth_required_on_api_but_not_openapi(stub: RunningStub, http: aiohttp.ClientSession) -> None:
    status, body, _ = await _call(http, "GET", stub.api_url + "/sandbox", headers=None)
    assert (status, body) == (401, {"detail": "Not authenticated"})
    status, body, _ = await _call(http, "GET", stub.api_url + "/sandbox", headers={"Authorization": "Bearer wrong"})
    assert (status, body) == (401, {"detail": "Invalid API key"})
    status, body, _ = await _call(
        http, "POST", stub.api_url + "/sandbox", headers={"Authorization": "Basic x"}, json=BODY
    )
    assert status == 401
    status, body, _ = await _call(http, "GET", stub.url + "/openapi.json", headers=None)
    assert status == 200 and body["openapi"].startswith("3.1")
    status, body, _ = await _call(http, "GET", stub.api_url + "/nothing-here")
    assert (status, body) == (404, {"detail": "Not Found"})


async def test_create_get_and_sdk_model(stub: RunningStub, http: aiohttp.ClientSession) -> None:
    created = await _create(
        http,
        stub,
        environment_vars={"A": "1"},
        secrets={"S": "hidden"},
        start_command={"executable": "sleep", "args": ["infinity"]},
        memory_gb=2,
        cpu_cores=0.5,
    )
    parsed = Sandbox.model_validate(created)
    assert parsed.status == "PENDING" and parsed.docker_image == "python:3.12-slim"
    assert parsed.labels == ["run-a", "x"] and parsed.memory_gb == 2 and parsed.cpu_cores == 0.5
    assert parsed.timeout_minutes == 30 and parsed.environment_vars == {"A": "1"}
    assert parsed.secrets == {"S": "********"}
    assert parsed.start_command is not None and parsed.start_command.args == ["infinity"]
    assert created["createdAt"].endswith("Z") and created["startedAt"] is None
    auth = created["gatewayAuth"]
    assert set(auth) == {"token", "gateway_url", "user_ns", "job_id", "expires_at"}
    assert auth["gateway_url"] == stub.url + "/gateway" and auth["job_id"] == parsed.id
    running = Sandbox.model_validate(await _wait_status(http, stub, parsed.id, "RUNNING"))
    assert running.started_at is not None and running.started_at >= running.created_at
    status, body, _ = await _call(http, "GET", f"{stub.api_url}/sandbox/does-not-exist")
    assert (status, body) == (404, {"detail": "Sandbox not found"})


async def test_idempotency_key(stub: RunningStub, http: aiohttp.ClientSession) -> None:
    first = await _create(http, stub, idempotency_key="same-key")
    second = await _create(http, stub, idempotency_key="same-key")
    assert first["id"] == second["id"]
    other = await _create(http, stub, idempotency_key="other-key")
    assert other["id"] != first["id"]
    _, stats, _ = await _call(http, "GET", stub.api_url + "/_stampede/stats")
    assert stats["stats"]["create_attempts"] == 2 and stats["stats"]["created"] == 2


async def test_invalid_bodies_are_fastapi_422(stub: RunningStub, http: aiohttp.ClientSession) -> None:
    url = stub.api_url + "/sandbox"
    status, body, _ = await _call(http, "POST", url, json={"docker_image": "x"})
    assert status == 422 and body["detail"][0]["type"] == "missing" and body["detail"][0]["loc"] == ["body", "name"]
    status, body, _ = await _call(http, "POST", url, json={"name": "n"})
    assert status == 422 and "docker_image is required" in body["detail"][0]["msg"]
    status, body, _ = await _call(http, "POST", url, json={**BODY, "cpu_cores": "lots", "labels": "x"})
    assert status == 422 and {tuple(e["loc"]) for e in body["detail"]} == {
        ("body", "cpu_cores"),
        ("body", "labels"),
    }
    status, body, _ = await _call(http, "POST", url, json={**BODY, "timeout_minutes": 0})
    assert status == 422
    status, body, _ = await _call(
        http, "POST", url, data="{not json", headers={**AUTH, "Content-Type": "application/json"}
    )
    assert status == 422 and body["detail"][0]["type"] == "json_invalid"
    status, body, _ = await _call(http, "POST", url, json=[1, 2])
    assert status == 422


async def test_rate_limit_429_with_retry_after(make_stub: MakeStub, http: aiohttp.ClientSession) -> None:
    # a token every 200 vendor seconds, 2 s real at time scale 0.01: at 0.5/s a pause of 0.52 s between two
    # requests (the burst's 1:1 pacing closes after 0.5 s, then 100x) gave the third create a token back
    stub = await make_stub(**{"create_rate.per_s": 0.005, "create_rate.burst": 2})
    for _ in range(2):
        await _create(http, stub)
    status, body, headers = await _call(http, "POST", stub.api_url + "/sandbox", json=BODY)
    assert status == 429
    assert body["errorCode"] == "RATE_LIMITED" and "rate limit" in body["detail"]
    assert int(headers["Retry-After"]) >= 1
    assert 0 < body["retryAfter"] <= 200 * 0.01 + 1e-6  # 200 vendor seconds at time scale 0.01, in real seconds


async def test_quota_capacity_and_transient_errors(make_stub: MakeStub, http: aiohttp.ClientSession) -> None:
    quota = await make_stub(**{"quota.max_active": 1})
    await _create(http, quota)
    status, body, _ = await _call(http, "POST", quota.api_url + "/sandbox", json=BODY)
    assert (
        status == 429
        and body["errorCode"] == "SANDBOX_LIMIT_REACHED"
        and body["detail"].startswith("Sandbox limit reached")
    )

    full = await make_stub(**{"pool.slots_per_node": 1, "pool.max_nodes": 1, "pool.max_queue": 0})
    await _create(http, full)
    await asyncio.sleep(0.02)
    status, body, _ = await _call(http, "POST", full.api_url + "/sandbox", json=BODY)
    assert (status, body) == (
        503,
        {"detail": "Insufficient capacity to create sandbox", "errorCode": "INSUFFICIENT_CAPACITY"},
    )

    flaky = await make_stub(**{"errors.create_transient_prob": 1.0})
    seen = set()
    for _ in range(3):
        status, body, _ = await _call(http, "POST", flaky.api_url + "/sandbox", json=BODY)
        seen.add(status)
        assert set(body) == {"detail"}
    assert seen == {500, 502, 503}

    small = await make_stub("modal-like")
    status, body, _ = await _call(http, "POST", small.api_url + "/sandbox", json={**BODY, "cpu_cores": 1000})
    assert status == 422 and "cpu" in body["detail"][0]["msg"]


async def test_list_paging_and_filters(stub: RunningStub, http: aiohttp.ClientSession) -> None:
    ids = [(await _create(http, stub, labels=["run-a", f"n{i % 2}"]))["id"] for i in range(5)]
    await _create(http, stub, labels=["run-b"])
    url = stub.api_url + "/sandbox"
    status, body, _ = await _call(http, "GET", url, params=[("labels", "run-a"), ("per_page", "2"), ("page", "1")])
    page1 = SandboxListResponse.model_validate(body)
    assert status == 200 and page1.total == 5 and page1.has_next and page1.per_page == 2
    assert [s.id for s in page1.sandboxes] == [ids[4], ids[3]]  # newest first
    _, body, _ = await _call(http, "GET", url, params=[("labels", "run-a"), ("per_page", "2"), ("page", "3")])
    assert [s["id"] for s in body["sandboxes"]] == [ids[0]] and body["hasNext"] is False
    _, body, _ = await _call(http, "GET", url, params=[("labels", "run-a"), ("labels", "n0")])
    assert sorted(s["id"] for s in body["sandboxes"]) == sorted([ids[0], ids[2], ids[4]])
    await _call(http, "DELETE", f"{url}/{ids[0]}")
    _, body, _ = await _call(http, "GET", url, params=[("labels", "run-a"), ("is_active", "true")])
    assert body["total"] == 4
    _, body, _ = await _call(http, "GET", url, params=[("labels", "run-a"), ("status", "TERMINATED")])
    assert [s["id"] for s in body["sandboxes"]] == [ids[0]]
    for bad in ([("page", "0")], [("per_page", "x")], [("is_active", "maybe")], [("status", "BOGUS")]):
        status, _, _ = await _call(http, "GET", url, params=bad)
        assert status == 422, bad


async def test_batch_status(stub: RunningStub, http: aiohttp.ClientSession) -> None:
    a = (await _create(http, stub))["id"]
    b = (await _create(http, stub))["id"]
    url = stub.api_url + "/sandbox/status:batchGet"
    status, body, _ = await _call(http, "POST", url, json={"sandbox_ids": [b, "ghost", a]})
    parsed = BatchSandboxStatusResponse.model_validate(body)
    assert status == 200 and [s.sandbox_id for s in parsed.statuses] == [b, a]
    assert body["errors"] == [{"sandbox_id": "ghost", "code": "NOT_FOUND", "message": "Sandbox not found"}]
    status, body, _ = await _call(http, "POST", url, json={"sandbox_ids": [f"id{i}" for i in range(101)]})
    assert status == 422 and body["detail"][0]["type"] == "too_long"
    status, _, _ = await _call(http, "POST", url, json={"sandbox_ids": [a, a]})
    assert status == 422
    status, _, _ = await _call(http, "POST", url, json={"ids": [a]})
    assert status == 422
    status, body, _ = await _call(http, "POST", url, json={"sandbox_ids": [f"id{i}" for i in range(100)]})
    assert status == 200 and len(body["errors"]) == 100


async def test_delete_bulk_delete_error_context_logs(stub: RunningStub, http: aiohttp.ClientSession) -> None:
    one = (await _create(http, stub, labels=["bulk"]))["id"]
    two = (await _create(http, stub, labels=["bulk"]))["id"]
    three = (await _create(http, stub, labels=["keep"]))["id"]
    url = stub.api_url + "/sandbox"
    status, body, _ = await _call(http, "DELETE", f"{url}/{one}")
    assert status == 200 and body["status"] == "TERMINATED"
    status, body, _ = await _call(http, "DELETE", f"{url}/{one}")  # idempotent
    assert status == 200
    status, body, _ = await _call(http, "DELETE", f"{url}/ghost")
    assert (status, body) == (404, {"detail": "Sandbox not found"})
    status, body, _ = await _call(http, "DELETE", url, json={"labels": ["bulk"]})
    result = BulkDeleteSandboxResponse.model_validate(body)
    assert status == 200 and result.succeeded == [two] and result.failed == []
    status, body, _ = await _call(http, "DELETE", url, json={"sandbox_ids": [three, "ghost"]})
    assert body["succeeded"] == [three] and body["failed"] == [{"sandbox_id": "ghost", "error": "Sandbox not found"}]
    status, _, _ = await _call(http, "DELETE", url, json={})
    assert status == 422
    status, body, _ = await _call(http, "GET", f"{url}/{one}/error-context")
    assert body == {"status": "TERMINATED", "error_type": None, "error_message": None}
    status, body, _ = await _call(http, "GET", f"{url}/{one}/logs")
    assert status == 200 and "TERMINATED" in body["logs"]
    for suffix in ("error-context", "logs"):
        status, _, _ = await _call(http, "GET", f"{url}/ghost/{suffix}")
        assert status == 404


async def test_gateway_exec(stub: RunningStub, http: aiohttp.ClientSession) -> None:
    created = await _create(http, stub, environment_vars={"WHO": "sandbox"}, memory_gb=1)
    sid = created["id"]
    await _wait_status(http, stub, sid, "RUNNING")
    status, auth, _ = await _call(http, "POST", f"{stub.api_url}/sandbox/{sid}/auth")
    assert status == 200 and auth["job_id"] == sid
    exec_url = f"{auth['gateway_url']}/{auth['user_ns']}/{auth['job_id']}/exec"
    gw = {"Authorization": f"Bearer {auth['token']}"}

    async def run(command: str, **extra: Any) -> tuple[int, Any]:
        status, body, _ = await _call(
            http,
            "POST",
            exec_url,
            headers=gw,
            json={"command": command, "sandbox_id": sid, "timeout": 30, **extra},
        )
        return status, body

    assert await run("echo hello $WHO; echo warn >&2") == (
        200,
        {"stdout": "hello sandbox\n", "stderr": "warn\n", "exit_code": 0},
    )
    assert await run("exit 42") == (200, {"stdout": "", "stderr": "", "exit_code": 42})
    assert await run("nope") == (200, {"stdout": "", "stderr": "sh: 1: nope: not found\n", "exit_code": 127})
    assert await run("pwd; printenv X", working_dir="/tmp", env={"X": "y"}) == (
        200,
        {"stdout": "/tmp\ny\n", "stderr": "", "exit_code": 0},
    )
    status, body = await run("sleep 100", timeout=2)  # 2 vendor seconds = 20 ms here
    assert status == 408 and "timed out" in body["detail"]
    status, body, _ = await _call(
        http, "POST", exec_url, headers={"Authorization": "Bearer wrong"}, json={"command": "true"}
    )
    assert status == 401
    status, body, _ = await _call(http, "POST", exec_url, headers=gw, json={"timeout": 1})
    assert status == 422
    status, body = await run("memhog 4096")
    assert status == 502 and body["error"] == "sandbox_not_found"
    status, body, _ = await _call(http, "GET", f"{stub.api_url}/sandbox/{sid}/error-context")
    assert body["status"] == "ERROR" and body["error_type"] == "OOM_KILLED"
    status, body = await run("true")
    assert status == 502 and body["error"] == "sandbox_not_found"


async def test_gateway_409_while_starting_and_502_after_terminate(http: aiohttp.ClientSession) -> None:
    clock = VirtualClock()
    sim = VendorSimulator(load_profile("ideal"), seed=0, clock=clock)
    stub = await start_stub(sim, token=TOKEN)
    try:
        created = await _create(http, stub)
        auth = created["gatewayAuth"]
        exec_url = f"{auth['gateway_url']}/{auth['user_ns']}/{auth['job_id']}/exec"
        gw = {"Authorization": f"Bearer {auth['token']}"}
        status, body, _ = await _call(http, "POST", exec_url, headers=gw, json={"command": "true"})
        assert (status, body) == (409, {"detail": "Sandbox is not running"})
        clock.run_until(1.0)
        pending = asyncio.ensure_future(_call(http, "POST", exec_url, headers=gw, json={"command": "sleep 5; echo ok"}))
        for _ in range(200):  # the request reaches the simulator, then virtual time moves on
            if sim.get(created["id"]).exec_count:
                break
            await asyncio.sleep(0.005)
        clock.run_until(10.0)
        status, body, _ = await pending
        assert (status, body["stdout"]) == (200, "ok\n")
        await _call(http, "DELETE", f"{stub.api_url}/sandbox/{created['id']}")
        status, body, _ = await _call(http, "POST", exec_url, headers=gw, json={"command": "true"})
        assert status == 502 and body["error"] == "sandbox_not_found"
        _, truth, _ = await _call(http, "GET", stub.api_url + "/_stampede/truth")
        row = truth["sandboxes"][0]
        assert row["running_s"] == pytest.approx(0.005) and row["running_wall"] == pytest.approx(clock.wall(0.005))
        assert truth["profile"] == "ideal" and truth["seed"] == 0
    finally:
        await stub.close()


async def test_openapi_covers_every_route(stub: RunningStub, http: aiohttp.ClientSession) -> None:
    _, doc, _ = await _call(http, "GET", stub.url + "/openapi.json", headers=None)
    served = {
        (route.method.lower(), route.resource.canonical)
        for route in stub.app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    described = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    assert served and served <= described, served - described
    assert described <= served, described - served


async def test_stampede_extensions(stub: RunningStub, http: aiohttp.ClientSession) -> None:
    sid = (await _create(http, stub))["id"]
    await _wait_status(http, stub, sid, "RUNNING")
    _, truth, _ = await _call(http, "GET", stub.api_url + "/_stampede/truth")
    assert truth["time_scale"] == 0.01 and [r["id"] for r in truth["sandboxes"]] == [sid]
    assert truth["sandboxes"][0]["running_wall"] > truth["sandboxes"][0]["created_wall"]
    _, stats, _ = await _call(http, "GET", stub.api_url + "/_stampede/stats")
    assert stats["stats"]["running"] == 1
    status, _, _ = await _call(http, "GET", stub.api_url + "/_stampede/stats", headers=None)
    assert status == 401


async def test_prime_sdk_drives_the_stub(stub: RunningStub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Prime's own async client against the stub: create, get, list, batch status, bulk delete."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PRIME_API_KEY", TOKEN)
    monkeypatch.setenv("PRIME_API_BASE_URL", stub.url)
    monkeypatch.delenv("PRIME_TEAM_ID", raising=False)
    from prime_sandboxes import AsyncSandboxClient, CreateSandboxRequest

    client = AsyncSandboxClient()
    try:
        sb = await client.create(CreateSandboxRequest(name="sdk", docker_image="python:3.12-slim", labels=["sdk-run"]))
        assert sb.status == "PENDING"
        for _ in range(200):
            if (await client.get(sb.id)).status == "RUNNING":
                break
            await asyncio.sleep(0.01)
        listed = await client.list(labels=["sdk-run"])
        assert [s.id for s in listed.sandboxes] == [sb.id]
        statuses = await client.get_sandbox_statuses([sb.id])
        assert statuses.statuses[0].status == "RUNNING"
        deleted = await client.bulk_delete(labels=["sdk-run"])
        assert deleted.succeeded == [sb.id]
        assert (await client.get(sb.id)).status == "TERMINATED"
    finally:
        await client.aclose()
