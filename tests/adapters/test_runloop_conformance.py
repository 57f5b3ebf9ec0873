"""Runloop's own SDK (runloop-api-client 3.0.0), unchanged, as the judge of the local Runloop: sync and async clients.

The SDK is pointed at the local front the way a user points it anywhere (`RUNLOOP_BASE_URL`, `RUNLOOP_API_KEY`; here
`base_url=` and `bearer_token=`). Every call the `runloop` provider makes is exercised with `Runloop` (in worker
threads, so the in-process front keeps serving) and `AsyncRunloop`: create with metadata, `await_running` (the long
poll), retrieve, list, `execute_and_await_completion`, `execute_async` + `executions.await_completed`, the SSE log
streams, `execute_sync`, file writes and reads, upload and download, `snapshot_disk` and a create from it, suspend
and resume, shutdown; then the SDK's error classes for 401, the create rate and the concurrent devbox limit (429s),
and devboxes that fail to start. Then the provider itself (the shared lifecycle check, each exec API), its
classification table, `stampede runloop-local serve` and a whole `stampede run --provider runloop --local`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from runloop_api_client import (
    APIConnectionError,
    AsyncRunloop,
    AuthenticationError,
    BadRequestError,
    InternalServerError,
    NotFoundError,
    RateLimitError,
    Runloop,
    RunloopError,
)
from runloop_api_client.lib.polling import PollingTimeout

from providers.base import FailureKind, Phase, ProviderConfigError, ProviderError, SandboxSpec
from providers.sim.core.execution.isolated_shell import IsolatedShell
from providers.sim.runloop.server import RunloopSettings, RunningRunloop, start_runloop
from providers.vendors.runloop import RunloopProvider, classify_runloop
from tests.support.live_lifecycle import check_live_lifecycle
from tests.support.local_runs import run_local

TOKEN = "conformance-token"
FLAVOURS = ("sync", "async")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def sdk_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the user's is read: no key, no URL, no custom headers from the environment."""
    for name in ("RUNLOOP_API_KEY", "RUNLOOP_BASE_URL", "RUNLOOP_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)


class Sdk:
    """One SDK client of either flavour; `await sdk.call(fn, ...)` runs a bound method of it."""

    def __init__(self, flavour: str, url: str, key: str, max_retries: int) -> None:
        self.flavour = flavour
        cls: Any = AsyncRunloop if flavour == "async" else Runloop
        self.client: Any = cls(base_url=url, bearer_token=key, max_retries=max_retries, shared_http_pool=False)

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.flavour == "async":
            return await fn(*args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def listed(self, **query: Any) -> list[Any]:
        if self.flavour == "async":
            return [d async for d in self.client.devboxes.list(**query)]
        return await asyncio.to_thread(lambda: list(self.client.devboxes.list(**query)))

    async def close(self) -> None:
        if self.flavour == "async":
            await self.client.close()
        else:
            self.client.close()


Open = Callable[..., Awaitable[tuple[RunningRunloop, Sdk]]]


@pytest.fixture
async def open_front() -> AsyncIterator[Open]:
    """`await open_front(flavour, **profile_overrides)` -> an in-process local Runloop and an SDK client on it."""
    opened: list[tuple[RunningRunloop, Sdk]] = []

    async def open_(
        flavour: str, key: str = TOKEN, max_retries: int = 0, **overrides: Any
    ) -> tuple[RunningRunloop, Sdk]:
        settings = RunloopSettings(seed=3, token=TOKEN, time_scale=0.2, overrides=tuple(overrides.items()))
        front = await start_runloop(settings)  # vendor time at 5x: boots, suspends and snapshots in a fifth
        sdk = Sdk(flavour, front.url, key, max_retries)
        opened.append((front, sdk))
        return front, sdk

    yield open_
    for front, sdk in opened:
        await sdk.close()
        await front.close()


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_lifecycle(flavour: str, open_front: Open) -> None:
    _, sdk = await open_front(flavour)
    boxes = sdk.client.devboxes
    created = await sdk.call(
        boxes.create,
        metadata={"run": "a", "role": "x"},
        environment_variables={"GREETING": "hello"},
        launch_parameters={"keep_alive_time_seconds": 600},
    )
    assert created.status == "provisioning" and created.metadata == {"run": "a", "role": "x"}
    running = await sdk.call(boxes.await_running, created.id)
    assert running.status == "running" and running.launch_parameters.keep_alive_time_seconds == 600
    other = await sdk.call(boxes.create_and_await_running, metadata={"run": "b"})
    assert other.status == "running"
    assert {d.id for d in await sdk.listed(status="running")} == {created.id, other.id}
    assert [d.id for d in await sdk.listed(limit=1)] == [other.id, created.id]  # newest first, paged by the SDK

    done = await sdk.call(
        boxes.execute_and_await_completion, created.id, command="echo $GREETING; echo oops >&2; exit 7"
    )
    assert (done.status, done.exit_status, done.stdout, done.stderr) == ("completed", 7, "hello\n", "oops\n")
    started = await sdk.call(boxes.execute_async, created.id, command="pwd")
    finished = await sdk.call(boxes.executions.await_completed, started.execution_id, devbox_id=created.id)
    assert (finished.exit_status, finished.stdout) == (0, "/home/user\n")
    logs = await sdk.call(boxes.executions.stream_stdout_updates, started.execution_id, devbox_id=created.id)
    chunks = [c async for c in logs] if flavour == "async" else await asyncio.to_thread(list, logs)
    assert "".join(c.output for c in chunks) == "/home/user\n"
    with pytest.warns(DeprecationWarning):
        legacy = await sdk.call(boxes.execute_sync, created.id, command="echo sync")
    assert (legacy.exit_status, legacy.stdout) == (0, "sync\n")

    await sdk.call(boxes.write_file_contents, created.id, file_path="notes/a.txt", contents="written")
    assert await sdk.call(boxes.read_file_contents, created.id, file_path="/home/user/notes/a.txt") == "written"
    await sdk.call(boxes.upload_file, created.id, path="/tmp/blob.bin", file=("blob.bin", b"\x00\x01binary"))
    downloaded = await sdk.call(boxes.download_file, created.id, path="/tmp/blob.bin")
    body = await downloaded.read() if flavour == "async" else downloaded.read()
    assert body == b"\x00\x01binary"
    with pytest.raises(NotFoundError):
        await sdk.call(boxes.read_file_contents, created.id, file_path="missing.txt")

    snap = await sdk.call(boxes.snapshot_disk, created.id, name="s1", metadata={"k": "v"})
    assert snap.source_devbox_id == created.id and snap.metadata == {"k": "v"}
    restored = await sdk.call(boxes.create_and_await_running, snapshot_id=snap.id)
    assert await sdk.call(boxes.read_file_contents, restored.id, file_path="notes/a.txt") == "written"

    assert (await sdk.call(boxes.suspend, created.id)).status == "suspending"
    assert (await sdk.call(boxes.await_suspended, created.id)).status == "suspended"
    with pytest.raises(BadRequestError):
        await sdk.call(boxes.execute_async, created.id, command="true")
    await sdk.call(boxes.resume, created.id)
    assert (await sdk.call(boxes.await_running, created.id)).status == "running"
    assert await sdk.call(boxes.read_file_contents, created.id, file_path="notes/a.txt") == "written"  # disk kept

    gone = await sdk.call(boxes.shutdown, created.id)
    assert (gone.status, gone.shutdown_reason) == ("shutdown", "api_shutdown")
    assert (await sdk.call(boxes.retrieve, created.id)).status == "shutdown"
    with pytest.raises(BadRequestError):
        await sdk.call(boxes.execute_async, created.id, command="true")
    with pytest.raises(NotFoundError):
        await sdk.call(boxes.retrieve, "no-such-devbox")
    with pytest.raises(
        InternalServerError, match=r"not modelled by the local Runloop: POST /v1/devboxes/.*/keep_alive"
    ):
        await sdk.call(boxes.keep_alive, other.id)  # at once: x-should-retry false
    with pytest.raises(RunloopError, match="non-running terminal state: shutdown"):
        await sdk.call(boxes.await_running, created.id)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_the_create_rate_and_the_devbox_limit_are_429s(flavour: str, open_front: Open) -> None:
    _, sdk = await open_front(flavour, **{"create_rate.per_s": 0.01, "create_rate.burst": 1.0})
    await sdk.call(sdk.client.devboxes.create, metadata={"run": "r"})
    with pytest.raises(RateLimitError) as rate:
        await sdk.call(sdk.client.devboxes.create, metadata={"run": "r"})
    assert int(rate.value.response.headers["Retry-After"]) >= 1
    assert classify_runloop(rate.value, Phase.CREATE) is FailureKind.RATE_LIMITED

    _, sdk = await open_front(flavour, **{"quota.max_active": 1})
    await sdk.call(sdk.client.devboxes.create, metadata={"run": "q"})
    with pytest.raises(RateLimitError) as cap:
        await sdk.call(sdk.client.devboxes.create, metadata={"run": "q"})
    assert "Concurrent devbox limit" in str(cap.value)
    assert classify_runloop(cap.value, Phase.CREATE) is FailureKind.QUOTA_EXHAUSTED


async def test_a_bad_key_is_a_401_and_the_sdk_retries_a_429_itself(open_front: Open) -> None:
    _, sdk = await open_front("async", key="wrong-key")
    with pytest.raises(AuthenticationError) as auth:
        await sdk.client.devboxes.create()
    assert classify_runloop(auth.value, Phase.CREATE) is FailureKind.AUTH
    # with its own retries on (the SDK's default), a create the bucket refuses once succeeds on Retry-After
    front, sdk = await open_front("async", max_retries=2, **{"create_rate.per_s": 2.0, "create_rate.burst": 1.0})
    await sdk.client.devboxes.create()
    second = await sdk.client.devboxes.create()
    assert second.status == "provisioning" and front.simulator.stats()["rejected"]["RATE_LIMITED"] >= 1


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"errors.boot_crash_prob": 1.0}, FailureKind.DIED_BEFORE_READY),  # crashed while starting
        ({"boot.median_s": 300.0}, FailureKind.READY_TIMEOUT),  # not running within the harness's deadline
    ],
)
async def test_a_devbox_that_fails_to_start(
    overrides: dict[str, float], expected: FailureKind, open_front: Open
) -> None:
    front, _ = await open_front("async", **overrides)
    provider = RunloopProvider.from_options({"base_url": front.url, "token": TOKEN})
    try:
        ref = await provider.create(SandboxSpec(run_id="run-f", rollout_id="r1"))
        with pytest.raises(ProviderError) as info:
            await provider.wait_ready(ref, 2)
        assert info.value.kind is expected
    finally:
        await provider.aclose()


@pytest.mark.parametrize("exec_api", ["execute", "async", "stream", "sync"])
async def test_the_provider_walks_the_contract(exec_api: str, open_front: Open) -> None:
    front, _ = await open_front("async")
    provider = RunloopProvider.from_options({"base_url": front.url, "token": TOKEN, "exec_api": exec_api})
    await check_live_lifecycle(provider, 30, lifetime_s=600)
    (devbox, _) = front.simulator.list(labels=("stampede-rollout=r1",)), None
    assert devbox and devbox[0].lifetime_s == 600  # keep_alive_time_seconds carried the spec's lifetime


async def test_the_provider_gives_up_on_a_long_command_and_kills_it(open_front: Open) -> None:
    front, _ = await open_front("async")
    provider = RunloopProvider.from_options({"base_url": front.url, "token": TOKEN})
    try:
        ref = await provider.create(SandboxSpec(run_id="run-t", rollout_id="r1"))
        await provider.wait_ready(ref, 30)
        with pytest.raises(ProviderError) as info:
            await provider.exec(ref, ["sleep", "600"], 1.5)
        assert info.value.kind is FailureKind.EXEC_TIMEOUT
        ran = await provider.exec(ref, ["echo", "still", "usable"], 30)
        assert (ran.exit_code, ran.stdout) == (0, "still usable\n")
        await provider.upload_file(ref, "in/put.txt", b"data")
        assert await provider.download_file(ref, "in/put.txt") == b"data"
        with pytest.raises(FileNotFoundError):
            await provider.download_file(ref, "nothing-here")
        image = await provider.snapshot(ref)
        copy = await provider.create(SandboxSpec(run_id="run-t", rollout_id="r2", image=image))
        await provider.wait_ready(copy, 30)
        assert await provider.download_file(copy, "in/put.txt") == b"data"  # the snapshot's disk
        assert {r.run_id for r in await provider.list_all_owned()} == {"run-t"}
        assert await provider.cleanup("run-t") == 2
    finally:
        await provider.aclose()


@pytest.mark.skipif(not IsolatedShell.available(), reason="real commands need bubblewrap (apt-get install bubblewrap)")
async def test_real_commands_run_as_user_see_the_files_api_and_stream_while_running(open_front: Open) -> None:
    front, sdk = await open_front("async", **{"sandbox.commands": "real"})
    boxes = sdk.client.devboxes
    devbox = await boxes.create_and_await_running()
    await boxes.write_file_contents(devbox.id, file_path="in.txt", contents="from the files API\n")
    started = await boxes.execute_async(devbox.id, command="whoami; pwd; cat in.txt; echo tick; sleep 3; echo tock")
    logs = await boxes.executions.stream_stdout_updates(started.execution_id, devbox_id=devbox.id)
    seen = ""
    async for chunk in logs:  # output arrives as it is printed, while the command still sleeps
        seen += chunk.output
        if "tick" in seen:
            break
    assert seen == "user\n/home/user\nfrom the files API\ntick\n"
    assert (await boxes.executions.retrieve(started.execution_id, devbox_id=devbox.id)).status == "running"
    done = await boxes.executions.await_completed(started.execution_id, devbox_id=devbox.id)
    assert (done.exit_status, done.stdout) == (0, "user\n/home/user\nfrom the files API\ntick\ntock\n")
    provider = RunloopProvider.from_options({"base_url": front.url, "token": TOKEN, "exec_api": "stream"})
    try:
        ref = await provider.create(SandboxSpec(run_id="run-r", rollout_id="r1"))
        await provider.wait_ready(ref, 30)
        ran = await provider.exec(ref, ["sh", "-c", "echo made > out.txt; echo out; echo err >&2"], 30)
        assert (ran.exit_code, ran.stdout, ran.stderr) == (0, "out\n", "err\n")
        assert await provider.download_file(ref, "/home/user/out.txt") == b"made\n"
    finally:
        await provider.cleanup("run-r")
        await provider.aclose()


def test_options_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ProviderConfigError, match="no API key"):
        RunloopProvider.from_options({})
    with pytest.raises(ProviderConfigError, match="unknown option"):
        RunloopProvider.from_options({"base_url": "http://127.0.0.1:1", "token": "t", "colour": "blue"})
    with pytest.raises(ProviderConfigError, match="resource_size must be one of"):
        RunloopProvider.from_options({"base_url": "http://127.0.0.1:1", "token": "t", "resource_size": "HUGE"})
    monkeypatch.setenv("RUNLOOP_API_KEY", "k")
    monkeypatch.setenv("RUNLOOP_BASE_URL", "http://127.0.0.1:9")
    assert RunloopProvider.from_options({}).where == "http://127.0.0.1:9"  # the SDK's own variables, no default host


def _status(cls: type[Exception], status: int, message: str) -> Exception:
    request = httpx.Request("POST", "http://127.0.0.1/v1/devboxes")
    response = httpx.Response(status, request=request, json={"message": message})
    return cls(message, response=response, body={"message": message})  # type: ignore[call-arg]


def test_classification_table() -> None:
    request = httpx.Request("POST", "http://127.0.0.1/v1/devboxes")
    cases: list[tuple[BaseException, Phase, FailureKind]] = [
        (_status(RateLimitError, 429, "Too many requests"), Phase.CREATE, FailureKind.RATE_LIMITED),
        (_status(RateLimitError, 429, "Concurrent devbox limit reached"), Phase.CREATE, FailureKind.QUOTA_EXHAUSTED),
        (_status(AuthenticationError, 401, "Unauthorized"), Phase.CREATE, FailureKind.AUTH),
        (_status(NotFoundError, 404, "Snapshot s not found"), Phase.CREATE, FailureKind.IMAGE),
        (_status(NotFoundError, 404, "Devbox d not found"), Phase.EXEC, FailureKind.DIED_DURING_EXEC),
        (_status(BadRequestError, 400, "Devbox d is not running"), Phase.EXEC, FailureKind.DIED_DURING_EXEC),
        (_status(BadRequestError, 400, "bad launch parameters"), Phase.CREATE, FailureKind.INVALID_REQUEST),
        (_status(InternalServerError, 503, "No capacity"), Phase.CREATE, FailureKind.CAPACITY),
        (_status(InternalServerError, 500, "Internal"), Phase.EXEC, FailureKind.EXEC_ERROR),
        (_status(InternalServerError, 504, "Gateway timeout"), Phase.READY, FailureKind.READY_TIMEOUT),
        (APIConnectionError(request=request), Phase.CREATE, FailureKind.TRANSPORT),
        (PollingTimeout("Exceeded timeout", None), Phase.READY, FailureKind.READY_TIMEOUT),
        (PollingTimeout("Exceeded timeout", None), Phase.EXEC, FailureKind.EXEC_TIMEOUT),
        (
            RunloopError("Devbox entered non-running terminal state: failure"),
            Phase.READY,
            FailureKind.DIED_BEFORE_READY,
        ),
        (httpx.ReadTimeout("slow"), Phase.EXEC, FailureKind.EXEC_TIMEOUT),
        (httpx.ConnectError("refused"), Phase.CREATE, FailureKind.TRANSPORT),
    ]
    for exc, phase, expected in cases:
        assert classify_runloop(exc, phase) is expected, (exc, phase)


@pytest.mark.slow
def test_a_local_run_through_the_real_sdk(tmp_path: Path) -> None:
    run = run_local("runloop", tmp_path, "--stages", "20,40", "--hold", "5")
    rollouts, truth, manifest = run.rollouts, run.truth, run.manifest
    assert len(rollouts) >= 60 and manifest["profile"] == "runloop-like" and manifest["local_vendor"] is True
    assert manifest["provider_versions"] == {"runloop-api-client": "3.0.0"}
    assert not set(rollouts["failure_kind"].dropna()) & {"unknown", "harness"}
    assert (rollouts["outcome"] == "ok").mean() > 0.95
    assert set(truth["id"]) == set(rollouts["sandbox_id"].dropna())  # one vendor devbox per rollout
    assert set(truth["status"]) <= {"TERMINATED", "ERROR", "TIMEOUT"}  # and none left running
    assert "unknown failures 0; harness failures 0" in run.stdout
