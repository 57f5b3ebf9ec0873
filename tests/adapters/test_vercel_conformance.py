"""The real vercel-sandbox SDK (sync and async clients) and the `vercel` provider against the local Vercel Sandbox on
loopback: the lifecycle, streamed and followed commands, files, snapshots, every refusal on the taxonomy (the
vCPU allocation limit included), cleanup by tag, and the `serve` command a user's own script starts from.

The SDK reads no environment variable for its API's address: every client here is given the local plane's
`base_url`, so nothing reaches `vercel.com`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest
from vercel.sandbox import (
    SandboxApiError,
    SandboxClient,
    SandboxQueryByCreatedAt,
    SandboxServiceOptions,
    SandboxStreamError,
    SandboxTerminalStateError,
    TagFilter,
)
from vercel.sandbox.sync import SandboxServiceOptions as SyncServiceOptions
from vercel.sandbox.sync import SyncSandboxClient

from providers.base import FailureKind, Phase, ProviderConfigError, ProviderError, ReadyObservation, SandboxSpec
from providers.sim.core.execution.isolated_shell import IsolatedShell
from providers.sim.vercel.server import PROJECT_ID, TEAM_ID, RunningVercel, VercelSettings, start_vercel
from providers.vendors.vercel import VercelProvider, classify_vercel
from tests.support.live_lifecycle import check_live_lifecycle
from tests.support.local_runs import run_local

TOKEN = "vercel_conformance"
FLAVOURS = ("sync", "async")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def sdk_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing of the user's Vercel configuration is read; the SDK's agent probe is off."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("VERCEL_SANDBOX_TELEMETRY_DISABLED", "1")
    for name in ("VERCEL_TOKEN", "VERCEL_TEAM_ID", "VERCEL_PROJECT_ID", "VERCEL_OIDC_TOKEN", "VERCEL_REGION"):
        monkeypatch.delenv(name, raising=False)


class Sdk:
    """One SDK flavour: `await sdk(fn, ...)` runs a sync call in a thread, an async one on the loop."""

    def __init__(self, flavour: str, base_url: str) -> None:
        self.flavour = flavour
        self.client: Any = (
            SandboxClient.create(options=SandboxServiceOptions(base_url=base_url))
            if flavour == "async"
            else SyncSandboxClient.create(options=SyncServiceOptions(base_url=base_url))
        )

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.flavour == "async":
            return await fn(*args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def create(self, **kwargs: Any) -> Any:
        return await self(self.client.create_sandbox, **kwargs)

    async def names(self, tag: TagFilter | None = None) -> list[str]:
        query = SandboxQueryByCreatedAt(tag=tag)
        if self.flavour == "async":
            return [s.name async for s in self.client.query_sandboxes(query=query)]
        return await asyncio.to_thread(lambda: [s.name for s in self.client.query_sandboxes(query=query)])

    async def close(self) -> None:
        if self.flavour == "async":
            await self.client.aclose()
        else:
            self.client.close()


Open = Callable[..., Awaitable[tuple[RunningVercel, Sdk]]]


@pytest.fixture
async def open_vercel(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Open]:
    """`await open_vercel(flavour, **profile_overrides)` -> an in-process local Vercel and the SDK pointed at it."""
    opened: list[tuple[RunningVercel, Sdk]] = []

    async def open_(flavour: str, **overrides: Any) -> tuple[RunningVercel, Sdk]:
        vercel = await start_vercel(
            VercelSettings(profile="ideal", seed=5, token=TOKEN, overrides=tuple(overrides.items()))
        )
        for name, value in vercel.sdk_environment().items():
            monkeypatch.setenv(name, value)
        sdk = Sdk(flavour, vercel.base_url)
        opened.append((vercel, sdk))
        return vercel, sdk

    yield open_
    for vercel, sdk in opened:
        await sdk.close()
        await vercel.close()


# --- the SDK against the front -------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_lifecycle(flavour: str, open_vercel: Open) -> None:
    vercel, sdk = await open_vercel(flavour)
    sandbox = await sdk.create(tags={"run": "a"}, env={"GREETING": "hello"}, execution_time_limit=120)
    other = await sdk.create(tags={"run": "b"})
    assert (sandbox.status, sandbox.vcpus, sandbox.tags) == ("running", 2, {"run": "a"})
    assert vercel.simulator.get(sandbox.current_session_id).lifetime_s == 120

    result = await sdk(sandbox.run_process, "sh", ["-c", "echo $GREETING; echo oops >&2; exit 3"], capture_output=True)
    assert (result.returncode, result.stdout, result.stderr) == (3, "hello\n", "oops\n")
    here = await sdk(sandbox.run_process, "pwd", cwd="/tmp", capture_output=True)
    assert here.stdout == "/tmp\n"
    process = await sdk(sandbox.create_process, "echo", ["followed"])  # started, then its logs followed
    assert await sdk(process.wait) == 0

    await sdk(sandbox.fs.write_text, "notes/a.txt", "written")
    assert await sdk(sandbox.fs.read_text, "notes/a.txt") == "written"
    assert (vercel.simulator.tree(sandbox.current_session_id).root / "vercel/sandbox/notes/a.txt").read_text() == (
        "written"  # relative to the sandbox's working directory, /vercel/sandbox
    )

    assert await sdk.names(TagFilter(key="run", value="a")) == [sandbox.name]
    assert set(await sdk.names()) == {sandbox.name, other.name}
    await sdk(sandbox.stop)
    assert (await sdk(sdk.client.get_sandbox, name=sandbox.name)).status == "stopped"
    await sdk(sandbox.destroy)
    with pytest.raises(SandboxApiError) as gone:
        await sdk(sdk.client.get_sandbox, name=sandbox.name)
    assert gone.value.status_code == 404 and classify_vercel(gone.value, Phase.EXEC) is FailureKind.DIED_DURING_EXEC
    assert await sdk.names() == [other.name]


async def test_a_snapshot_stops_its_sandbox_and_a_new_one_starts_from_its_files(open_vercel: Open) -> None:
    vercel, sdk = await open_vercel("async")
    sandbox = await sdk.create()
    await sandbox.fs.write_text("kept.txt", "from the snapshot")
    snapshot = await sandbox.snapshot()
    assert snapshot.id.startswith("snap_")
    assert vercel.simulator.get(sandbox.current_session_id).active is False  # Vercel stops what it snapshots
    provider = _provider(vercel)
    ref = await provider.create(SandboxSpec(run_id="r", rollout_id="s", image=snapshot.id))
    assert await provider.download_file(ref, "kept.txt") == b"from the snapshot"
    await provider.aclose()


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_the_vcpu_allocation_limit_is_a_429_on_the_rate_limited_kind(flavour: str, open_vercel: Open) -> None:
    from vercel.sandbox import SandboxResources

    _, sdk = await open_vercel(flavour, **{"vcpu_rate.vcpus": 4.0, "vcpu_rate.window_s": 600.0})
    await sdk.create(resources=SandboxResources(vcpus=2))
    await sdk.create(resources=SandboxResources(vcpus=2))
    with pytest.raises(SandboxApiError) as limited:
        await sdk.create(resources=SandboxResources(vcpus=1))  # 4 of 4 vCPUs spent; one comes back in 150 s
    assert (limited.value.status_code, limited.value.code) == (429, "vcpu_allocation_limit_exceeded")
    assert limited.value.response.headers["Retry-After"] == "150"
    assert classify_vercel(limited.value, Phase.CREATE) is FailureKind.RATE_LIMITED


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_the_create_rate_and_the_concurrency_cap(flavour: str, open_vercel: Open) -> None:
    _, throttled = await open_vercel(flavour, **{"create_rate.per_s": 0.01, "create_rate.burst": 1.0})
    await throttled.create()
    with pytest.raises(SandboxApiError) as limited:
        await throttled.create()
    assert (limited.value.status_code, limited.value.code) == (429, "rate_limited")
    assert classify_vercel(limited.value, Phase.CREATE) is FailureKind.RATE_LIMITED

    _, capped = await open_vercel(flavour, **{"quota.max_active": 1})
    first = await capped.create()
    with pytest.raises(SandboxApiError) as full:
        await capped.create()
    assert (full.value.status_code, full.value.code) == (429, "concurrent_sandboxes_limit_exceeded")
    assert classify_vercel(full.value, Phase.CREATE) is FailureKind.QUOTA_EXHAUSTED
    await capped(first.destroy)
    await capped.create()  # the slot is free again


async def test_no_room_slow_starts_and_failed_starts(open_vercel: Open) -> None:
    _, full = await open_vercel("async", **{"pool.slots_per_node": 1, "pool.max_queue": 0})
    await full.create()
    with pytest.raises(SandboxApiError) as busy:
        await full.create()
    assert busy.value.status_code == 503 and classify_vercel(busy.value, Phase.CREATE) is FailureKind.CAPACITY

    _, slow = await open_vercel("async", **{"startup.deadline_s": 0.2, "boot.median_s": 5.0})
    with pytest.raises(SandboxApiError) as late:
        await slow.create()
    assert late.value.status_code == 504 and classify_vercel(late.value, Phase.CREATE) is FailureKind.READY_TIMEOUT

    _, crashing = await open_vercel("async", **{"errors.boot_crash_prob": 1.0})
    with pytest.raises(SandboxTerminalStateError) as crashed:
        await crashing.create()
    assert crashed.value.status == "failed"
    assert classify_vercel(crashed.value, Phase.CREATE) is FailureKind.DIED_BEFORE_READY


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_commands_whose_sandbox_dies_or_fails(flavour: str, open_vercel: Open) -> None:
    _, dying = await open_vercel(flavour, **{"errors.exec_oom_prob": 1.0})
    sandbox = await dying.create()
    with pytest.raises(SandboxStreamError) as died:
        await dying(sandbox.run_process, "echo", ["hi"], capture_output=True)
    assert died.value.code == "sandbox_stopped"
    assert classify_vercel(died.value, Phase.EXEC) is FailureKind.DIED_DURING_EXEC

    _, flaky = await open_vercel(flavour, **{"errors.exec_error_prob": 1.0})
    sandbox = await flaky.create()
    with pytest.raises(SandboxStreamError) as failed:
        await flaky(sandbox.run_process, "echo", ["hi"], capture_output=True)
    assert classify_vercel(failed.value, Phase.EXEC) is FailureKind.EXEC_ERROR


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_a_wrong_token_or_team_is_auth(flavour: str, open_vercel: Open, monkeypatch: pytest.MonkeyPatch) -> None:
    vercel, _ = await open_vercel(flavour)
    monkeypatch.setenv("VERCEL_TOKEN", "wrong")
    with pytest.raises(SandboxApiError) as refused:
        await Sdk(flavour, vercel.base_url).create()
    assert refused.value.status_code == 401 and classify_vercel(refused.value, Phase.CREATE) is FailureKind.AUTH
    monkeypatch.setenv("VERCEL_TOKEN", TOKEN)
    monkeypatch.setenv("VERCEL_TEAM_ID", "team_other")
    with pytest.raises(SandboxApiError) as forbidden:
        await Sdk(flavour, vercel.base_url).create()
    assert forbidden.value.status_code == 403 and classify_vercel(forbidden.value, Phase.CREATE) is FailureKind.AUTH


@pytest.mark.skipif(not IsolatedShell.available(), reason="real commands need bubblewrap (apt-get install bubblewrap)")
async def test_real_commands_run_as_vercel_sandbox_in_its_home_and_see_its_files(open_vercel: Open) -> None:
    _, sdk = await open_vercel("async", **{"sandbox.commands": "real"})
    sandbox = await sdk.create()
    await sandbox.fs.write_text("f.txt", "data")
    script = "whoami; pwd; cat f.txt; echo; echo late >&2; exit 4"
    result = await sandbox.run_process("bash", ["-c", script], capture_output=True)
    assert (result.returncode, result.stdout, result.stderr) == (4, "vercel-sandbox\n/vercel/sandbox\ndata\n", "late\n")


async def test_malformed_requests_get_the_apis_400_never_a_500(open_vercel: Open) -> None:
    vercel, sdk = await open_vercel("async")
    sandbox = await sdk.create()
    bearer = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    session = f"/api/v2/sandboxes/sessions/{sandbox.current_session_id}"
    cases = [
        ("/api/v3/sandboxes", b"{not json"),
        ("/api/v3/sandboxes", b"[1, 2]"),
        ("/api/v3/sandboxes", json.dumps({"projectId": PROJECT_ID, "resources": {"vcpus": "two"}}).encode()),
        ("/api/v3/sandboxes", json.dumps({"projectId": PROJECT_ID, "resources": {"vcpus": 0}}).encode()),
        (f"{session}/cmd", json.dumps({"command": 7}).encode()),
        (f"{session}/fs/write", b"not a gzip tar"),
        (f"{session}/fs/read", json.dumps({"path": ""}).encode()),
    ]
    async with httpx.AsyncClient(base_url=vercel.url) as client:
        for path, body in cases:
            answer = await client.post(path, content=body, headers=bearer)
            assert answer.status_code == 400 and answer.json()["error"]["code"] == "bad_request", (path, answer.text)


# --- the provider ---------------------------------------------------------------------------------


def _provider(vercel: RunningVercel, **options: Any) -> VercelProvider:
    return VercelProvider.from_options(
        {"base_url": vercel.url, "token": vercel.token, "team_id": TEAM_ID, "project_id": PROJECT_ID, **options}
    )


@pytest.mark.parametrize("wire", ["http1", "httpx"])
async def test_the_provider_walks_the_contract_against_the_front(open_vercel: Open, wire: str) -> None:
    """On either wire (the keep-alive client by default, the SDK's httpcore2 with `api_transport=httpx`)."""
    vercel, _ = await open_vercel("async")
    await check_live_lifecycle(_provider(vercel, api_transport=wire), 10)  # two sandboxes, one command, cleanup
    provider = _provider(vercel, api_transport=wire)
    ref = await provider.create(SandboxSpec(run_id="r", rollout_id="x", engine="e1", cpu=3.5, lifetime_s=90))
    assert await provider.wait_ready(ref, 5) == ReadyObservation(poll_window_s=0.0, polls=0)
    sb = vercel.simulator.get(ref.handle.current_session_id)
    assert (sb.cpu, sb.lifetime_s, dict(sb.env)) == (4.0, 90, {})  # 3.5 cores ask 4 vCPUs
    with pytest.raises(ProviderError) as timed_out:
        await provider.exec(ref, ["sleep", "5"], 0.3)
    assert provider.classify(timed_out.value, Phase.EXEC) is FailureKind.EXEC_TIMEOUT
    (listed,) = await provider.list_owned("r", "e1")
    assert listed.rollout_id == "x" and listed.handle is None
    assert (await provider.exec(listed, ["echo", "by name"], 5)).stdout == "by name\n"  # no handle: looked up
    await provider.upload_file(listed, "/tmp/in.bin", b"\x00\x01")
    assert await provider.download_file(ref, "/tmp/in.bin") == b"\x00\x01"
    with pytest.raises(FileNotFoundError):
        await provider.download_file(ref, "/tmp/none")
    assert await provider.list_owned("r", "e2") == []
    assert provider.versions() == {"vercel-sandbox": metadata.version("vercel-sandbox")}
    assert [r.run_id for r in await provider.list_all_owned()] == ["r"]
    assert await provider.cleanup("r") == 1 and await provider.list_owned("r") == []
    await provider.terminate(ref)  # already destroyed: idempotent
    with pytest.raises(ProviderError, match="HTTP 401"):
        await VercelProvider.from_options(
            {
                "base_url": vercel.url,
                "token": "wrong",
                "team_id": TEAM_ID,
                "project_id": PROJECT_ID,
                "api_transport": wire,
            }
        ).preflight()
    await provider.aclose()


def test_options_are_checked() -> None:
    with pytest.raises(ProviderConfigError, match="token, team_id, project_id"):
        VercelProvider.from_options({})  # the real Vercel, and no credentials at all
    local = VercelProvider.from_options({"base_url": "http://127.0.0.1:9", "token": "t"}).options.credentials
    assert local is not None and (local.team_id, local.project_id) == (TEAM_ID, PROJECT_ID)
    with pytest.raises(ProviderConfigError, match="max_connections"):
        VercelProvider.from_options({"base_url": "http://127.0.0.1:9", "token": "t", "max_connections": "0"})
    with pytest.raises(ProviderConfigError, match="api_transport"):
        VercelProvider.from_options({"base_url": "http://127.0.0.1:9", "token": "t", "api_transport": "h2"})
    with pytest.raises(ProviderConfigError, match="vcpus"):
        VercelProvider.from_options({"base_url": "http://127.0.0.1:9", "token": "t", "team_id": "a", "vcpus": "0"})
    provider = VercelProvider.from_options(
        {"base_url": "http://127.0.0.1:9/", "token": "t", "team_id": "a", "project_id": "p"}
    )
    assert provider.options.base_url == "http://127.0.0.1:9/api"


# --- the front as its own process, and whole runs ------------------------------------------------------


@pytest.mark.slow
def test_a_ramp_through_the_real_sdk_has_only_classified_failures(tmp_path: Path) -> None:
    run = run_local("vercel", tmp_path, "--stages", "20,40", "--hold", "5")
    rollouts, truth, manifest = run.rollouts, run.truth, run.manifest
    assert len(rollouts) >= 60 and (rollouts["outcome"] == "ok").sum() >= 60
    assert set(rollouts["failure_kind"].dropna()) <= {"rate_limited"}  # vercel-like: 200 vCPUs a minute
    sdk = f"vercel-sandbox={metadata.version('vercel-sandbox')}"
    assert set(rollouts["sdk_version"]) == {sdk} and manifest["profile"] == "vercel-like"
    assert set(truth["id"]) == set(rollouts["sandbox_id"].dropna())  # a sandbox's name is its first session's id
    assert set(truth["status"]) == {"TERMINATED"}  # every sandbox destroyed
    assert "unknown failures 0; harness failures 0" in run.stdout
