"""CoreWeave Sandbox's own SDK (cwsandbox 1.22.0), unchanged, as the judge of the local CoreWeave Sandbox.

The SDK is pointed at the local plane the documented way (`CWSANDBOX_BASE_URL`, `CWSANDBOX_API_KEY`) and driven
in both of its styles: blocking (`.result()`, in worker threads so the in-process plane keeps serving) and
`await`. It walks run -> wait (PENDING -> CREATING -> RUNNING) -> streamed exec (stdout, stderr, exit codes) ->
files -> list by tags -> stop (COMPLETED); then the SDK's own exceptions for a wrong key, the create-rate and
concurrent-sandbox refusals, no capacity, a sandbox that fails to start, one whose image cannot be pulled, and a
command whose sandbox dies under it. Then the `coreweave` provider: its classification, the shared lifecycle walk,
and the serve command a user's own script starts from.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import grpc
import pytest
from cwsandbox import (
    CWSandboxAuthenticationError,
    Sandbox,
    SandboxError,
    SandboxExecutionError,
    SandboxFailedError,
    SandboxFileError,
    SandboxResourceExhaustedError,
    SandboxStatus,
)

from providers.base import INVOCATION, FailureKind, Phase, ProviderConfigError, ProviderError, SandboxSpec
from providers.sim.core.execution.isolated_shell import IsolatedShell
from providers.sim.coreweave.server import CoreWeaveSettings, RunningCoreWeave, start_coreweave
from providers.sim.coreweave.service import cpu_cores, memory_mb
from providers.vendors.coreweave import CoreWeaveProvider, classify_coreweave, label_tags, poll_schedule
from tests.support.live_lifecycle import check_live_lifecycle
from tests.support.local_runs import run_local

TOKEN = "coreweave_conformance"
FLAVOURS = ("sync", "async")
ROOT = Path(__file__).resolve().parents[2]
IMAGE = "python:3.11"


@pytest.fixture(autouse=True)
def sdk_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing of the user's CoreWeave configuration is read, and the SDK leaves the test runner's signals alone."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CWSANDBOX_DISABLE_SIGNAL_HANDLERS", "1")
    for name in ("CWSANDBOX_API_KEY", "CWSANDBOX_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


class Sdk:
    """One SDK style: `await sdk(ref)` blocks on `.result()` in a thread (sync), or awaits it (async)."""

    def __init__(self, flavour: str) -> None:
        self.flavour = flavour

    async def __call__(self, ref: Any) -> Any:
        if self.flavour == "async":
            return await ref
        return await asyncio.to_thread(ref.result)

    async def run(self, **kwargs: Any) -> Sandbox:
        """`Sandbox.run` (which blocks until the create is answered: in a thread), or construct then `await start()`."""
        if self.flavour == "async":
            sandbox = Sandbox(**kwargs)
            await sandbox.start()
            return sandbox
        return await asyncio.to_thread(Sandbox.run, **kwargs)

    async def running(self, sandbox: Sandbox) -> Sandbox:
        if self.flavour == "async":
            return await sandbox
        return await asyncio.to_thread(sandbox.wait)


Open = Callable[..., Awaitable[tuple[RunningCoreWeave, Sdk]]]


@pytest.fixture
async def open_coreweave(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Open]:
    """`await open_coreweave(flavour, **profile_overrides)` -> an in-process local plane and the SDK pointed at it."""
    opened: list[RunningCoreWeave] = []

    async def open_(flavour: str, **overrides: Any) -> tuple[RunningCoreWeave, Sdk]:
        settings = CoreWeaveSettings(profile="ideal", seed=5, token=TOKEN, overrides=tuple(overrides.items()))
        front = await start_coreweave(settings)
        opened.append(front)
        for name, value in front.sdk_environment().items():
            monkeypatch.setenv(name, value)
        return front, Sdk(flavour)

    yield open_
    for front in opened:
        await front.close()


# --- the SDK against the local plane ---------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_lifecycle(flavour: str, open_coreweave: Open) -> None:
    front, sdk = await open_coreweave(flavour, **{"boot.median_s": 0.3})
    sandbox = await sdk.run(
        container_image=IMAGE,
        tags=["run=a", "team=x"],
        environment_variables={"GREETING": "hello"},
        resources={"cpu": "500m", "memory": "2Gi"},
        max_lifetime_seconds=120,
    )
    other = await sdk.run(container_image=IMAGE, tags=["run=b"])
    assert sandbox.sandbox_id and sandbox.status in (SandboxStatus.PENDING, SandboxStatus.CREATING)
    await sdk.running(sandbox)
    assert sandbox.status is SandboxStatus.RUNNING
    record = front.simulator.get(str(sandbox.sandbox_id))
    assert (record.image, record.cpu, record.memory_mb, record.lifetime_s) == (IMAGE, 0.5, 2048, 120.0)
    assert set(record.labels) == {"run=a", "team=x"} and record.env["GREETING"] == "hello"

    result = await sdk(sandbox.exec(["sh", "-c", "echo out; echo err >&2; exit 3"]))
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert (await sdk(sandbox.exec(["echo", "a b"]))).stdout == "a b\n"

    await sdk(sandbox.write_file("/tmp/data/in.txt", b"payload"))
    assert await sdk(sandbox.read_file("/tmp/data/in.txt")) == b"payload"
    assert (front.simulator.tree(str(sandbox.sandbox_id)).root / "tmp/data/in.txt").read_bytes() == b"payload"
    with pytest.raises(SandboxFileError) as missing:
        await sdk(sandbox.read_file("/tmp/nope"))
    assert missing.value.reason == "CWSANDBOX_FILE_NOT_FOUND"

    listed = await sdk(Sandbox.list(tags=["run=a"]))
    assert [s.sandbox_id for s in listed] == [sandbox.sandbox_id]
    assert {s.sandbox_id for s in await sdk(Sandbox.list())} == {sandbox.sandbox_id, other.sandbox_id}

    await sdk(sandbox.stop())
    assert sandbox.status is SandboxStatus.COMPLETED
    assert front.simulator.get(str(sandbox.sandbox_id)).status == "TERMINATED"
    assert [s.sandbox_id for s in await sdk(Sandbox.list())] == [other.sandbox_id]  # active ones only
    assert len(await sdk(Sandbox.list(show_terminated=True))) == 2
    await sdk(Sandbox.delete(str(other.sandbox_id)))
    await sdk(Sandbox.delete("sb-unknown", missing_ok=True))


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_refusals_are_the_sdks_own_exceptions(
    flavour: str, open_coreweave: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    front, sdk = await open_coreweave(flavour, **{"create_rate.per_s": 0.01, "create_rate.burst": 1.0})
    await sdk.run(container_image=IMAGE)
    with pytest.raises(SandboxResourceExhaustedError) as throttled:
        await sdk(Sandbox(container_image=IMAGE).start())
    assert throttled.value.retry_delay is not None and throttled.value.retry_delay.total_seconds() > 1
    assert classify_coreweave(throttled.value, Phase.CREATE) is FailureKind.RATE_LIMITED

    _, sdk = await open_coreweave(flavour, **{"quota.max_active": 1})
    await sdk.run(container_image=IMAGE)
    with pytest.raises(SandboxResourceExhaustedError) as capped:
        await sdk(Sandbox(container_image=IMAGE).start())
    assert classify_coreweave(capped.value, Phase.CREATE) is FailureKind.QUOTA_EXHAUSTED

    _, sdk = await open_coreweave(flavour, **{"pool.slots_per_node": 1, "pool.max_queue": 0, "pool.max_nodes": 1})
    await sdk.run(container_image=IMAGE)
    with pytest.raises(SandboxResourceExhaustedError) as full:
        await sdk(Sandbox(container_image=IMAGE).start())
    assert full.value.reason == "CWSANDBOX_RUNNER_CAPACITY_EXHAUSTED"
    assert classify_coreweave(full.value, Phase.CREATE) is FailureKind.CAPACITY

    monkeypatch.setenv("CWSANDBOX_API_KEY", "wrong")
    with pytest.raises(CWSandboxAuthenticationError) as refused:
        await sdk(Sandbox(container_image=IMAGE).start())
    assert classify_coreweave(refused.value, Phase.CREATE) is FailureKind.AUTH
    assert front.simulator.stats()["created"] == 1


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_sandboxes_that_fail_are_the_sdks_failures(flavour: str, open_coreweave: Open) -> None:
    _, sdk = await open_coreweave(flavour, **{"errors.boot_crash_prob": 1.0})
    with pytest.raises(SandboxFailedError) as crashed:
        await sdk.running(await sdk.run(container_image=IMAGE))
    assert "BOOT_FAILED" in str(crashed.value)
    assert classify_coreweave(crashed.value, Phase.READY) is FailureKind.DIED_BEFORE_READY

    _, sdk = await open_coreweave(flavour, **{"image.pull_failure_prob": 1.0, "pool.initial_nodes_warm": False})
    with pytest.raises(SandboxFailedError) as unpulled:
        await sdk.running(await sdk.run(container_image="nosuch/image:1"))
    assert classify_coreweave(unpulled.value, Phase.READY) is FailureKind.IMAGE

    _, sdk = await open_coreweave(flavour, **{"errors.exec_oom_prob": 1.0})
    dying = await sdk.run(container_image=IMAGE)
    await sdk.running(dying)
    with pytest.raises(SandboxExecutionError) as died:
        await sdk(dying.exec(["echo", "hi"]))
    assert classify_coreweave(died.value, Phase.EXEC) in (FailureKind.OOM, FailureKind.DIED_DURING_EXEC)

    _, sdk = await open_coreweave(flavour, **{"boot.median_s": 0.2, "limits.max_lifetime_s": 1.0})
    expiring = await sdk.run(container_image=IMAGE, max_lifetime_seconds=1)
    await sdk.running(expiring)
    await asyncio.sleep(1.2)
    with pytest.raises(SandboxError) as ended:  # FAILED_PRECONDITION "not running (TIMEOUT)"
        await sdk(expiring.exec(["echo", "late"]))
    assert classify_coreweave(ended.value, Phase.EXEC) is FailureKind.DIED_DURING_EXEC


@pytest.mark.skipif(not IsolatedShell.available(), reason="real commands need bubblewrap")
@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_real_commands_stream_take_stdin_and_share_the_sandboxs_files(flavour: str, open_coreweave: Open) -> None:
    _, sdk = await open_coreweave(flavour, **{"sandbox.commands": "real", "boot.median_s": 0.2})
    sandbox = await sdk.run(container_image=IMAGE)
    await sdk.running(sandbox)
    process = sandbox.exec(["sh", "-c", "echo first; read line; echo got $line; echo bad >&2; exit 5"], stdin=True)
    assert process.stdin is not None
    lines = aiter(process.stdout)
    assert await anext(lines) == "first\n"  # streamed: it came before the command read its input
    await process.stdin.write(b"hello\n")
    await process.stdin.close()
    result = await sdk(process)
    assert (result.returncode, result.stdout, result.stderr) == (5, "first\ngot hello\n", "bad\n")
    await sdk(sandbox.write_file("/root/note.txt", b"from the api"))
    assert (await sdk(sandbox.exec(["cat", "/root/note.txt"]))).stdout == "from the api"
    await sdk(sandbox.exec(["sh", "-c", "echo from a command > /root/made.txt"]))
    assert await sdk(sandbox.read_file("/root/made.txt")) == b"from a command\n"
    await sdk(sandbox.stop())


# --- the provider ------------------------------------------------------------------------------------


def _provider(front: RunningCoreWeave, **options: Any) -> CoreWeaveProvider:
    return CoreWeaveProvider.from_options({"base_url": front.url, "token": front.token, **options})


async def test_the_provider_walks_the_contract_against_the_local_plane(open_coreweave: Open) -> None:
    front, _ = await open_coreweave("async", **{"boot.median_s": 0.3})
    await check_live_lifecycle(_provider(front), 10)  # the live tests' walk: two sandboxes, one command, cleanup
    provider = _provider(front, data_plane_mode="gateway")
    ref = await provider.create(
        SandboxSpec(run_id="r", rollout_id="x", engine="e1", lifetime_s=90, cpu=2, memory_mb=512)
    )
    observed = await provider.wait_ready(ref, 10)
    assert observed.polls >= 1 and 0 < (observed.poll_window_s or 0) <= 2.0
    sb = front.simulator.get(ref.sandbox_id)
    assert (sb.lifetime_s, sb.cpu, sb.memory_mb) == (90.0, 2.0, 512)
    assert set(sb.labels) == set(
        label_tags(
            {"stampede-run": "r", "stampede-rollout": "x", "stampede-engine": "e1", "stampede-invocation": INVOCATION}
        )
    )
    await provider.upload_file(ref, "/work/a.txt", b"abc")
    assert await provider.download_file(ref, "/work/a.txt") == b"abc"
    with pytest.raises(FileNotFoundError):
        await provider.download_file(ref, "/work/none")
    (listed,) = await provider.list_owned("r", "e1")
    assert listed.rollout_id == "x" and listed.handle is None
    assert (await provider.exec(listed, ["echo", "by id"], 5)).stdout == "by id\n"  # no SDK handle: from_id
    assert await provider.list_owned("r", "e2") == []
    assert [r.sandbox_id for r in await provider.list_all_owned()] == [ref.sandbox_id]
    assert provider.versions() == {"cwsandbox": metadata.version("cwsandbox")}
    assert await provider.cleanup("r") == 1 and await provider.list_owned("r") == []
    with pytest.raises(ProviderError, match="refused the API key"):
        await CoreWeaveProvider.from_options({"base_url": front.url, "token": "wrong"}).preflight()


async def test_ready_timeout_and_exec_timeout_are_classified(open_coreweave: Open) -> None:
    front, _ = await open_coreweave("async", **{"boot.median_s": 30.0})
    provider = _provider(front)
    ref = await provider.create(SandboxSpec(run_id="r", rollout_id="slow"))
    with pytest.raises(TimeoutError) as slow:
        await provider.wait_ready(ref, 0.5)
    assert provider.classify(slow.value, Phase.READY) is FailureKind.READY_TIMEOUT
    await provider.terminate(ref)
    await provider.terminate(ref)  # idempotent


def test_options_and_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ProviderConfigError, match="no API key"):
        CoreWeaveProvider.from_options({})
    with pytest.raises(ProviderConfigError):
        CoreWeaveProvider.from_options({"token": "t", "base_url": "http://127.0.0.1:1", "data_plane_mode": "nope"})
    monkeypatch.setenv("CWSANDBOX_API_KEY", "k")
    assert CoreWeaveProvider.from_options({}).options.where == "https://api.cwsandbox.com"  # the SDK's own default
    assert poll_schedule(0.1) == (0.2, 1) and poll_schedule(100.0)[0] == 2.0
    assert (cpu_cores("250m", 1), cpu_cores("2", 1), cpu_cores("", 1)) == (0.25, 2.0, 1)
    assert (memory_mb("1Gi", 1), memory_mb("512Mi", 1), memory_mb("x", 7)) == (1024, 512, 7)


def test_raw_grpc_statuses_are_classified() -> None:
    class Status(grpc.RpcError):
        def __init__(self, code: grpc.StatusCode) -> None:
            self._code = code

        def code(self) -> grpc.StatusCode:
            return self._code

    assert classify_coreweave(Status(grpc.StatusCode.UNAUTHENTICATED), Phase.CREATE) is FailureKind.AUTH
    assert classify_coreweave(Status(grpc.StatusCode.RESOURCE_EXHAUSTED), Phase.CREATE) is FailureKind.RATE_LIMITED
    assert classify_coreweave(Status(grpc.StatusCode.UNAVAILABLE), Phase.CREATE) is FailureKind.TRANSPORT
    assert classify_coreweave(Status(grpc.StatusCode.NOT_FOUND), Phase.EXEC) is FailureKind.DIED_DURING_EXEC


# --- the local plane as its own process ------------------------------------------------------------------


@pytest.mark.slow
def test_a_burst_past_the_free_quota_through_the_real_sdk_has_only_classified_failures(tmp_path: Path) -> None:
    """The free tier's 20 concurrent sandboxes (documented) against a burst of 60: 20 ok, 40 `quota_exhausted`."""
    run = run_local(
        "coreweave",
        tmp_path,
        "--scenario",
        "burst",
        "--users",
        "60",
        "--profile-set",
        "quota.max_active=20",
        "-t",
        "120s",
    )
    rollouts, truth, manifest = run.rollouts, run.truth, run.manifest
    assert len(rollouts) == 60 and (rollouts["outcome"] == "ok").sum() == 20
    assert set(rollouts["failure_kind"].dropna()) == {"quota_exhausted"}
    assert set(rollouts["sdk_version"]) == {f"cwsandbox={metadata.version('cwsandbox')}"}
    assert manifest["profile"] == "coreweave-like"
    assert set(truth["id"]) == set(rollouts["sandbox_id"].dropna())  # no sandbox the harness does not know of
    assert set(truth["status"]) == {"TERMINATED"}  # and every one of them stopped
    ok = rollouts[rollouts["outcome"] == "ok"]
    assert (ok["ready_poll_s"] > 0).all() and ok["tti_s"].notna().all()  # the SDK's poll: its window is recorded
    assert "unknown failures 0; harness failures 0" in run.stdout
