"""Vendor limits and failures reach the `modal` provider's classification through the real SDK.

Each test bends the simulated vendor with profile overrides (throttling, account cap, no capacity, startup
deadline, boot crash, OOM, ...), lets the real `modal` SDK meet the resulting gRPC errors from the local
control plane and command router, and checks the kind the provider assigns. The last tests pin the
classification of exceptions the real Modal raises that the local fake cannot provoke.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import grpclib.exceptions
import modal.exception as mexc
import pytest
from google.protobuf.empty_pb2 import Empty
from grpclib import GRPCError, Status
from grpclib.client import Channel
from modal_proto import api_grpc, api_pb2, task_command_router_grpc
from modal_proto import task_command_router_pb2 as sr_pb2

from providers.base import FailureKind, Phase, ProviderConfigError, ProviderError, SandboxSpec
from providers.sim.modal.server import ModalSettings, start_modal
from providers.vendors.modal.provider import ModalProvider, classify_modal
from tests.support.local_modal import TOKEN, local_modal

BACKENDS = [pytest.param("1", id="v2"), pytest.param("0", id="v1")]


async def create_kinds(provider: ModalProvider, n: int, run_id: str = "run-x") -> Counter[str]:
    """Create n sandboxes at once; count outcomes by kind ("ok" for accepted)."""

    async def one(i: int) -> str:
        try:
            await provider.create(SandboxSpec(run_id=run_id, rollout_id=f"r{i}"))
        except Exception as exc:
            return str(provider.classify(exc, Phase.CREATE))
        return "ok"

    return Counter(await asyncio.gather(*(one(i) for i in range(n))))


async def failure_kind(provider: ModalProvider, phase: Phase, call: object) -> FailureKind:
    with pytest.raises(Exception) as info:
        await call  # type: ignore[misc]
    return provider.classify(info.value, phase)


# --- create-time limits ---------------------------------------------------------------------------------


@pytest.mark.parametrize("v2", BACKENDS)
async def test_throttled_creates_are_rate_limited_not_retried(v2: str) -> None:
    # a token every 20 s: the 8 creates meet an empty bucket however slowly a busy machine sends them (at 0.5/s a
    # fourth token came back 2 s after the first create)
    async with local_modal("create_rate.per_s=0.05", "create_rate.burst=3", sandbox_v2=v2) as (_, provider):
        started = time.monotonic()
        kinds = await create_kinds(provider, 8)
        assert kinds == Counter({"ok": 3, "rate_limited": 5})
        assert time.monotonic() - started < 5  # MODAL_MAX_THROTTLE_WAIT=0: the SDK did not sit out the retry policy


async def test_with_throttle_waits_allowed_the_sdk_follows_the_servers_retry_policy() -> None:
    # 20 creates/s, burst 1: each throttled create carries an RPCRetryPolicy the SDK honours, so all succeed
    async with local_modal("create_rate.per_s=20", "create_rate.burst=1", max_throttle_wait="none") as (_, provider):
        started = time.monotonic()
        kinds = await create_kinds(provider, 4)
        assert kinds == Counter({"ok": 4})
        assert time.monotonic() - started >= 0.1


async def test_account_cap_is_quota_exhausted() -> None:
    async with local_modal("quota.max_active=2") as (_, provider):
        assert await create_kinds(provider, 5) == Counter({"ok": 2, "quota_exhausted": 3})
        assert await provider.cleanup("run-x") == 2
        assert await create_kinds(provider, 1, "run-y") == Counter({"ok": 1})  # room again once they ended


async def test_no_room_is_capacity() -> None:
    pool = ("pool.initial_nodes=1", "pool.slots_per_node=1", "pool.max_nodes=1", "pool.max_queue=0")
    async with local_modal(*pool) as (_, provider):
        first = await provider.create(SandboxSpec(run_id="run-c", rollout_id="a"))
        await provider.wait_ready(first, 30)
        assert await create_kinds(provider, 1, "run-c") == Counter({"capacity": 1})


async def test_persistent_transient_create_errors_surface_as_transport_after_the_sdk_retries() -> None:
    async with local_modal("errors.create_transient_prob=1.0") as (server, provider):
        assert await create_kinds(provider, 1) == Counter({"transport": 1})
        assert server.simulator.stats()["create_attempts"] == 4  # the SDK's own 3 retries were spent


async def test_a_rare_transient_create_error_is_absorbed_by_the_sdk() -> None:
    async with local_modal("errors.create_transient_prob=0.2") as (server, provider):
        kinds = await create_kinds(provider, 40)
        rejected = server.simulator.stats()["rejected"].get("TRANSIENT", 0)
        assert rejected > 0 and kinds["ok"] >= 39  # hidden retries: the rollout never sees most of them


async def test_invalid_request() -> None:
    async with local_modal("limits.max_cpu=4") as (_, provider):
        kind = await failure_kind(
            provider, Phase.CREATE, provider.create(SandboxSpec(run_id="r", rollout_id="a", cpu=8))
        )
        assert kind is FailureKind.INVALID_REQUEST


# --- readiness ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("v2", BACKENDS)
async def test_missed_startup_deadline_is_ready_timeout_in_modals_words(v2: str) -> None:
    slow = (
        "boot.median_s=100",
        "startup.deadline_s=2",
        "startup.timeout_message=Runtime did not start within {deadline_s:.0f}s",
    )
    async with local_modal(*slow, time_scale=0.05, sandbox_v2=v2) as (_, provider):
        ref = await provider.create(SandboxSpec(run_id="r", rollout_id="a"))
        with pytest.raises(Exception) as info:
            await provider.wait_ready(ref, 30)
        assert "Runtime did not start within 2s" in str(info.value)
        assert provider.classify(info.value, Phase.READY) is FailureKind.READY_TIMEOUT


async def test_v1_create_of_a_sandbox_never_scheduled_fails_with_modals_startup_message() -> None:
    queue = (
        "pool.initial_nodes=1",
        "pool.slots_per_node=1",
        "pool.max_nodes=1",
        "startup.deadline_s=2",
        "startup.timeout_message=Runtime did not start within {deadline_s:.0f}s",
    )
    async with local_modal(*queue, time_scale=0.05, sandbox_v2="0") as (_, provider):
        holder = await provider.create(SandboxSpec(run_id="r", rollout_id="holder"))
        await provider.wait_ready(holder, 30)
        # V1 create blocks until the sandbox is scheduled; this one never is, and dies at the deadline
        with pytest.raises(mexc.ConflictError) as info:
            await provider.create(SandboxSpec(run_id="r", rollout_id="queued"))
        assert "Runtime did not start within 2s" in str(info.value)
        assert provider.classify(info.value, Phase.CREATE) is FailureKind.READY_TIMEOUT


@pytest.mark.parametrize("v2", BACKENDS)
async def test_boot_crash_is_died_before_ready(v2: str) -> None:
    async with local_modal("errors.boot_crash_prob=1.0", "boot.median_s=0.2", sandbox_v2=v2) as (_, provider):
        ref = await provider.create(SandboxSpec(run_id="r", rollout_id="a"))
        assert await failure_kind(provider, Phase.READY, provider.wait_ready(ref, 30)) is FailureKind.DIED_BEFORE_READY


async def test_slow_boot_past_the_harness_deadline_is_ready_timeout() -> None:
    async with local_modal("boot.median_s=30") as (_, provider):
        ref = await provider.create(SandboxSpec(run_id="r", rollout_id="a"))
        assert await failure_kind(provider, Phase.READY, provider.wait_ready(ref, 1)) is FailureKind.READY_TIMEOUT
        await provider.terminate(ref)


async def test_image_pull_failure_is_image() -> None:
    async with local_modal(
        "image.pull_failure_prob=1.0", "image.pull_median_s=0.1", "pool.initial_nodes_warm=false"
    ) as (_, provider):
        ref = await provider.create(SandboxSpec(run_id="r", rollout_id="a", image="python:3.12-slim"))
        assert await failure_kind(provider, Phase.READY, provider.wait_ready(ref, 30)) is FailureKind.IMAGE


# --- commands -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("v2", BACKENDS)
async def test_command_failures(v2: str) -> None:
    async with local_modal(sandbox_v2=v2) as (server, provider):
        ref = await provider.create(SandboxSpec(run_id="r", rollout_id="a", memory_mb=512))
        await provider.wait_ready(ref, 30)
        assert (
            await failure_kind(provider, Phase.EXEC, provider.exec(ref, ["sleep", "30"], 0.5))
            is FailureKind.EXEC_TIMEOUT
        )
        assert (await provider.exec(ref, ["echo", "still", "alive"], 5)).stdout == "still alive\n"
        # a command that runs the sandbox out of memory kills it
        assert await failure_kind(provider, Phase.EXEC, provider.exec(ref, ["memhog", "1024"], 30)) is FailureKind.OOM
        # ... and names the cause to whoever tries it next
        assert await failure_kind(provider, Phase.EXEC, provider.exec(ref, ["true"], 5)) is FailureKind.OOM

        other = await provider.create(SandboxSpec(run_id="r", rollout_id="b"))
        await provider.wait_ready(other, 30)
        running = asyncio.ensure_future(provider.exec(other, ["sleep", "30"], 60))
        # the vendor ends the sandbox once the command runs there (a reap, a host lost), not after a fixed 0.2 s and
        # not through this client: the SDK detaches a sandbox its own client terminated, and a call of the command
        # still to come (its output, its wait) is then refused on the client side (transport, "detached sandbox")
        vendor_side = server.registry.by_id[other.sandbox_id].sim
        for _ in range(3000):  # a hang guard of >= 30 s; it ends as soon as the command runs
            if vendor_side.exec_count or running.done():
                break
            await asyncio.sleep(0.01)
        server.simulator.terminate(vendor_side.id)
        assert await failure_kind(provider, Phase.EXEC, running) is FailureKind.DIED_DURING_EXEC
        await provider.terminate(other)


async def test_injected_exec_errors_are_exec_error_and_the_sandbox_lives_on() -> None:
    async with local_modal("errors.exec_error_prob=1.0") as (server, provider):
        ref = await provider.create(SandboxSpec(run_id="r", rollout_id="a"))
        await provider.wait_ready(ref, 30)
        assert await failure_kind(provider, Phase.EXEC, provider.exec(ref, ["true"], 5)) is FailureKind.EXEC_ERROR
        assert server.registry.by_id[ref.sandbox_id].sim.status == "RUNNING"


async def test_sandbox_lifetime_ending_during_a_command_is_died_during_exec() -> None:
    async with local_modal() as (_, provider):
        ref = await provider.create(SandboxSpec(run_id="r", rollout_id="a", lifetime_s=1))
        await provider.wait_ready(ref, 30)
        kind = await failure_kind(provider, Phase.EXEC, provider.exec(ref, ["sleep", "5"], 30))
        assert kind is FailureKind.DIED_DURING_EXEC


# --- credentials and options ----------------------------------------------------------------------------


async def test_wrong_token_fails_preflight_as_auth() -> None:
    server = await start_modal(ModalSettings(profile="ideal", token=TOKEN))
    provider = ModalProvider.from_options({"base_url": server.url, "token": "not-the-token"})
    try:
        with pytest.raises(ProviderError) as info:
            await provider.preflight()
        assert info.value.kind is FailureKind.AUTH and "\n" not in str(info.value)
    finally:
        await provider.aclose()
        await server.close()


async def test_unreachable_control_plane_fails_preflight_as_transport() -> None:
    provider = ModalProvider.from_options({"base_url": "http://127.0.0.1:9", "token": TOKEN, "preflight_timeout": "2"})
    try:
        started = time.monotonic()
        with pytest.raises(ProviderError) as info:
            await provider.preflight()
        assert info.value.kind is FailureKind.TRANSPORT and "did not answer within 2s" in str(info.value)
        assert time.monotonic() - started < 10
    finally:
        await provider.aclose()


def test_without_base_url_and_without_credentials_is_a_config_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for name in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"):
        monkeypatch.delenv(name, raising=False)
    import modal.config

    monkeypatch.setattr(modal.config, "_user_config", {})
    with pytest.raises(ProviderConfigError) as info:
        ModalProvider.from_options({})
    assert "MODAL_TOKEN_ID" in str(info.value) and "\n" not in str(info.value)


def test_real_modal_credentials_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-user")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-user")
    monkeypatch.delenv("MODAL_SERVER_URL", raising=False)
    options = ModalProvider.from_options({"sandbox_v2": "0"}).options
    assert options.server_url.startswith("https://api.modal.com")  # with the SDK's fallback URL after it
    assert (options.token_id, options.token_secret) == ("ak-user", "as-user")
    assert options.local is False and options.backend == "v1"


@pytest.mark.parametrize(
    "options",
    [
        {"base_url": "ftp://x", "token": "t"},
        {"base_url": "http://127.0.0.1:1"},
        {"base_url": "http://127.0.0.1:1", "token": "t", "sandbox_v2": "maybe"},
        {"base_url": "http://127.0.0.1:1", "token": "t", "max_throttle_wait": "-1"},
        {"base_url": "http://127.0.0.1:1", "token": "t", "readiness": "sometimes"},
        {"base_url": "http://127.0.0.1:1", "token": "t", "preflight_timeout": "0"},
    ],
)
def test_bad_options_are_one_line_config_errors(options: dict[str, str]) -> None:
    with pytest.raises(ProviderConfigError) as info:
        ModalProvider.from_options(options)
    assert "\n" not in str(info.value)


# --- the wire, without the SDK ---------------------------------------------------------------------------


async def test_wire_auth_and_unimplemented_rpcs() -> None:
    server = await start_modal(ModalSettings(profile="ideal", token=TOKEN))
    host, port = server.url.removeprefix("http://").split(":")
    channel = Channel(host, int(port))
    stub = api_grpc.ModalClientStub(channel)
    good = {"x-modal-token-id": server.token_id, "x-modal-token-secret": TOKEN}
    try:
        await stub.ClientHello(Empty(), metadata=good)
        with pytest.raises(GRPCError) as info:
            await stub.ClientHello(Empty(), metadata={**good, "x-modal-token-secret": "no"})
        assert info.value.status is Status.UNAUTHENTICATED
        with pytest.raises(GRPCError) as info:  # V2 calls also need the AuthTokenGet JWT
            await stub.SandboxCreateV2(api_pb2.SandboxCreateV2Request(), metadata=good)
        assert info.value.status is Status.UNAUTHENTICATED
        with pytest.raises(GRPCError) as info:
            await stub.VolumeList(api_pb2.VolumeListRequest(), metadata=good)
        assert info.value.status is Status.UNIMPLEMENTED
        router_host, router_port = server.router_url.removeprefix("http://").split(":")
        router_channel = Channel(router_host, int(router_port))
        router = task_command_router_grpc.TaskCommandRouterStub(router_channel)
        with pytest.raises(GRPCError) as info:
            await router.TaskExecPoll(
                sr_pb2.TaskExecPollRequest(task_id="ta-x"), metadata={"authorization": "Bearer nope"}
            )
        assert info.value.status is Status.UNAUTHENTICATED
        router_channel.close()
    finally:
        channel.close()
        await server.close()


# --- exceptions only the real Modal raises -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "phase", "kind"),
    [
        (mexc.ResourceExhaustedError("Insufficient capacity to create sandbox."), Phase.CREATE, FailureKind.CAPACITY),
        (mexc.ResourceExhaustedError("Sandbox creation rate limit exceeded"), Phase.CREATE, FailureKind.RATE_LIMITED),
        (
            mexc.ResourceExhaustedError("Workspace has reached its limit of 100 concurrent sandboxes"),
            Phase.CREATE,
            FailureKind.QUOTA_EXHAUSTED,
        ),
        (mexc.ResourceExhaustedError("Too many requests"), Phase.READY, FailureKind.RATE_LIMITED),
        (mexc.AuthError("Token missing"), Phase.CREATE, FailureKind.AUTH),
        (mexc.PermissionDeniedError("nope"), Phase.EXEC, FailureKind.AUTH),
        (mexc.InvalidError("workdir must be an absolute path"), Phase.CREATE, FailureKind.INVALID_REQUEST),
        (mexc.ConflictError("Sandbox already finished"), Phase.READY, FailureKind.DIED_BEFORE_READY),
        (mexc.ConflictError("Runtime did not start within 299s"), Phase.CREATE, FailureKind.READY_TIMEOUT),
        (mexc.NotFoundError("Task is not running: Sandbox crashed"), Phase.EXEC, FailureKind.DIED_DURING_EXEC),
        (mexc.SandboxTimeoutError(), Phase.EXEC, FailureKind.DIED_DURING_EXEC),
        (mexc.SandboxTerminatedError(), Phase.READY, FailureKind.DIED_BEFORE_READY),
        (mexc.ExecTimeoutError("Deadline exceeded"), Phase.EXEC, FailureKind.EXEC_TIMEOUT),
        (mexc.TimeoutError("Timeout expired"), Phase.READY, FailureKind.READY_TIMEOUT),
        (mexc.ImageBuildError("Image build for im-x failed", "im-x"), Phase.CREATE, FailureKind.IMAGE),
        (mexc.ServiceError("UNAVAILABLE"), Phase.CREATE, FailureKind.TRANSPORT),
        (mexc.InternalError("internal"), Phase.EXEC, FailureKind.TRANSPORT),
        (mexc.ConnectionError("connection reset"), Phase.READY, FailureKind.TRANSPORT),
        (mexc.ClientClosed("closed"), Phase.EXEC, FailureKind.TRANSPORT),
        (grpclib.exceptions.StreamTerminatedError("reset"), Phase.EXEC, FailureKind.TRANSPORT),
        (
            GRPCError(Status.RESOURCE_EXHAUSTED, "Sandbox creation rate limit exceeded"),
            Phase.CREATE,
            FailureKind.RATE_LIMITED,
        ),
        (GRPCError(Status.UNAVAILABLE, "x"), Phase.CREATE, FailureKind.TRANSPORT),
        (ConnectionResetError(), Phase.CREATE, FailureKind.TRANSPORT),
        (mexc.ExecutionError("Sandbox task_id is not available yet."), Phase.EXEC, FailureKind.EXEC_ERROR),
        (mexc.NotFoundError("App 'stampede' not found"), Phase.CREATE, FailureKind.CREATE_ERROR),
        (mexc.ConflictError("Sandbox already finished"), Phase.CREATE, FailureKind.DIED_BEFORE_READY),
        (
            mexc.NotFoundError("Task ta-x is not running: Sandbox was killed: out of memory, limit 512 MiB"),
            Phase.EXEC,
            FailureKind.OOM,
        ),
        (mexc.NotFoundError("Task ta-x is not running: Failed to pull image 'x'"), Phase.READY, FailureKind.IMAGE),
    ],
)
def test_classification_table(exc: BaseException, phase: Phase, kind: FailureKind) -> None:
    assert classify_modal(exc, phase) is kind
