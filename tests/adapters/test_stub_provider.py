"""The lean `stub` provider against the real Prime-like stub over loopback HTTP: every answer classified."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from providers.base import FailureKind, Phase, ProviderError, SandboxSpec
from providers.sim.prime.api import StubSettings, start_stub
from providers.vendors.prime import statuses as prime_statuses
from providers.vendors.stub.provider import StubProvider
from providers.vendors.stub.status_poller import StatusPoller
from tests.support.prime_status_cases import PRIME_STATUS_CASES


def spec(rollout: str = "r1", run: str = "run-1", memory_mb: int = 256) -> SandboxSpec:
    return SandboxSpec(run_id=run, rollout_id=rollout, memory_mb=memory_mb, lifetime_s=600)


async def stub_and_provider(profile: str = "ideal", overrides: tuple = (), time_scale: float | None = None):
    stub = await start_stub(StubSettings(profile=profile, seed=3, overrides=overrides, time_scale=time_scale))
    provider = StubProvider.from_options({"base_url": stub.url, "token": stub.token, "poll_interval_s": 0.01})
    return stub, provider


async def test_lifecycle_exec_output_exit_codes_and_labels():
    stub, provider = await stub_and_provider()
    try:
        await provider.preflight()
        ref = await provider.create(spec())
        await provider.wait_ready(ref, timeout=10)
        result = await provider.exec(ref, ["echo", "hello world"], timeout=10)
        assert (result.exit_code, result.stdout, result.stderr) == (0, "hello world\n", "")
        result = await provider.exec(ref, ["sh", "-c", "echo oops >&2; exit 3"], timeout=10)
        assert (result.exit_code, result.stdout, result.stderr) == (3, "", "oops\n")
        result = await provider.exec(ref, ["nosuchcommand"], timeout=10)
        assert result.exit_code == 127 and "not found" in result.stderr
        owned = await provider.list_owned("run-1")
        assert [r.sandbox_id for r in owned] == [ref.sandbox_id]
        assert await provider.list_owned("other-run") == []
        sandbox = stub.simulator.get(ref.sandbox_id)
        assert "stampede-run=run-1" in sandbox.labels and "stampede-rollout=r1" in sandbox.labels
        await provider.terminate(ref)
        await provider.terminate(ref)  # idempotent
        assert await provider.list_owned("run-1") == []
    finally:
        await provider.aclose()
        await stub.close()


async def test_many_sandboxes_poll_in_batches_and_cleanup_reaps_by_label():
    stub, provider = await stub_and_provider()
    try:
        refs = await asyncio.gather(*(provider.create(spec(f"r{i}")) for i in range(250)))
        await asyncio.gather(*(provider.wait_ready(ref, timeout=20) for ref in refs))
        assert len(await provider.list_owned("run-1")) == 250  # pages of 100
        assert await provider.cleanup("run-1") == 250
        assert await provider.list_owned("run-1") == []
    finally:
        await provider.aclose()
        await stub.close()


async def expect(kind: FailureKind, call) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await call
    assert info.value.kind is kind, info.value
    return info.value


async def test_throttling_and_quota_are_told_apart():
    # a token every 100 s: the third create is refused however slowly the machine sends the three
    stub, provider = await stub_and_provider(overrides=(("create_rate.per_s", 0.01), ("create_rate.burst", 2.0)))
    try:
        await provider.create(spec("a"))
        await provider.create(spec("b"))
        error = await expect(FailureKind.RATE_LIMITED, provider.create(spec("c")))
        assert error.retry_after is not None and error.retry_after >= 1
    finally:
        await provider.aclose()
        await stub.close()
    stub, provider = await stub_and_provider(overrides=(("quota.max_active", 2),))
    try:
        await provider.create(spec("a"))
        await provider.create(spec("b"))
        await expect(FailureKind.QUOTA_EXHAUSTED, provider.create(spec("c")))
    finally:
        await provider.aclose()
        await stub.close()


async def test_capacity_and_startup_deadline_and_boot_crash():
    stub, provider = await stub_and_provider(
        overrides=(("pool.initial_nodes", 1), ("pool.slots_per_node", 1), ("pool.max_nodes", 1), ("pool.max_queue", 0))
    )
    try:
        first = await provider.create(spec("a"))
        await expect(FailureKind.CAPACITY, provider.create(spec("b")))
        await provider.terminate(first)
    finally:
        await provider.aclose()
        await stub.close()
    stub, provider = await stub_and_provider(overrides=(("boot.median_s", 50.0), ("startup.deadline_s", 0.2)))
    try:
        ref = await provider.create(spec())
        await expect(FailureKind.READY_TIMEOUT, provider.wait_ready(ref, timeout=10))  # the vendor's deadline
        await provider.terminate(ref)
        ref = await provider.create(spec("slow"))
        await expect(FailureKind.READY_TIMEOUT, provider.wait_ready(ref, timeout=0.05))  # ours
    finally:
        await provider.aclose()
        await stub.close()
    stub, provider = await stub_and_provider(overrides=(("errors.boot_crash_prob", 1.0),))
    try:
        ref = await provider.create(spec())
        await expect(FailureKind.DIED_BEFORE_READY, provider.wait_ready(ref, timeout=10))
    finally:
        await provider.aclose()
        await stub.close()


async def test_exec_timeout_oom_and_death_during_exec():
    stub, provider = await stub_and_provider()
    try:
        ref = await provider.create(spec(memory_mb=64))
        await provider.wait_ready(ref, timeout=10)
        await expect(FailureKind.EXEC_TIMEOUT, provider.exec(ref, ["sleep", "5"], timeout=1))
        error = await expect(FailureKind.OOM, provider.exec(ref, ["memhog", "512"], timeout=10))
        assert "limit 64 MiB" in str(error)
        other = await provider.create(spec("b"))
        await provider.wait_ready(other, timeout=10)
        stub.simulator.terminate(other.sandbox_id)  # gone behind our back (reaped, crashed, preempted)
        await expect(FailureKind.DIED_DURING_EXEC, provider.exec(other, ["true"], timeout=10))
    finally:
        await provider.aclose()
        await stub.close()


async def test_bad_token_and_unreachable_endpoint_fail_preflight():
    stub, _ = await stub_and_provider()
    provider = StubProvider.from_options({"base_url": stub.url, "token": "wrong"})
    try:
        await expect(FailureKind.AUTH, provider.preflight())
        await expect(FailureKind.AUTH, provider.create(spec()))
    finally:
        await provider.aclose()
        await stub.close()
    provider = StubProvider.from_options({"base_url": "http://127.0.0.1:9", "token": "t"})
    try:
        await expect(FailureKind.TRANSPORT, provider.preflight())
        with pytest.raises(Exception) as info:
            await provider.create(spec())
        assert provider.classify(info.value, Phase.CREATE) is FailureKind.TRANSPORT
    finally:
        await provider.aclose()


def test_options_are_checked():
    from providers.base import ProviderConfigError

    with pytest.raises(ProviderConfigError):
        StubProvider.from_options({"base_url": "ftp://x", "token": "t"})
    with pytest.raises(ProviderConfigError):
        StubProvider.from_options({"base_url": "http://x"})


@pytest.mark.parametrize(("status", "body", "phase", "kind"), PRIME_STATUS_CASES)
def test_every_prime_status_is_classified_by_the_shared_table(status, body, phase, kind):
    from providers.vendors.stub import provider as stub

    assert stub.error_from_response is prime_statuses.error_from_response  # one mapping, not a copy
    error = stub.error_from_response(status, body, phase)
    assert error.kind is kind, error
    assert str(error.args[0]).startswith(f"HTTP {status}: ")


def test_retry_after_comes_from_the_header_else_the_body():
    assert prime_statuses.retry_after_of({"Retry-After": "2.5"}, {"retryAfter": 9}) == 2.5
    assert prime_statuses.retry_after_of({}, {"retryAfter": 1.25}) == 1.25
    assert prime_statuses.retry_after_of({"Retry-After": "soon"}) is None


def test_the_default_sandbox_lifetime_is_defined_once_in_the_contract():
    from providers.base import DEFAULT_LIFETIME_S

    assert DEFAULT_LIFETIME_S == 3600.0
    assert SandboxSpec(run_id="r", rollout_id="a").lifetime_s == DEFAULT_LIFETIME_S


async def test_a_hung_status_answer_delays_only_the_sandboxes_it_asked_about():
    """One batchGet that never answers must not stall every other rollout's readiness (it used to hold the
    whole poll round for the 60 s request timeout); the hung sandbox is asked again after status_timeout_s."""
    from aiohttp import web

    from providers.base import SandboxRef

    asked: dict[str, int] = {}
    release = asyncio.Event()

    async def batch_get(request: web.Request) -> web.Response:
        ids = (await request.json())["sandbox_ids"]
        for sandbox_id in ids:
            asked[sandbox_id] = asked.get(sandbox_id, 0) + 1
        if "hung" in ids and not release.is_set():
            await release.wait()  # a vendor that never answers this request
        return web.json_response({"statuses": [{"sandbox_id": i, "status": "RUNNING"} for i in ids]})

    async def auth(request: web.Request) -> web.Response:
        return web.json_response({"token": "t", "gateway_url": "http://127.0.0.1:9", "user_ns": "u", "job_id": "j"})

    app = web.Application()
    app.router.add_post("/api/v1/sandbox/status:batchGet", batch_get)
    app.router.add_post("/api/v1/sandbox/{id}/auth", auth)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    provider = StubProvider.from_options(
        {"base_url": f"http://127.0.0.1:{port}", "token": "t", "status_timeout_s": 0.3}
    )
    try:
        hung = asyncio.create_task(provider.wait_ready(SandboxRef("hung", "stub", "run-1"), timeout=30))
        while "hung" not in asked:  # its first look is out, and will not come back
            await asyncio.sleep(0.005)
        await asyncio.wait_for(provider.wait_ready(SandboxRef("fine", "stub", "run-1"), timeout=30), timeout=10)
        assert not hung.done()  # the other sandbox became ready while this one's answer is still missing
        while asked["hung"] < 2:  # past status_timeout_s the hung sandbox is asked again, in a request of its own
            await asyncio.sleep(0.01)
        release.set()
        observation = await asyncio.wait_for(hung, timeout=10)
        assert observation.polls >= 1 and observation.poll_window_s is not None
    finally:
        release.set()
        await provider.aclose()
        await runner.cleanup()


def test_a_long_start_is_looked_at_a_share_of_its_wait_not_every_poll_interval():
    """A 960-wide backlog of 299 s starts must not be asked about 20 times a second each, yet the poll window
    (what the look schedule can add to a TTI) stays within 1% of the wait, or the poll interval early on."""

    async def no_vendor(ids: list[str], base: str | None) -> dict[str, Any]:
        raise AssertionError("the schedule alone is under test")

    poller = StatusPoller(no_vendor, interval_s=0.05, share=0.01, max_s=2.0)
    waited, delay, looks, gaps = 0.0, 0.01, 0, []
    while waited < 299.0:
        waited += delay
        looks += 1
        delay = poller.next_delay(delay, waited)
        gaps.append((waited, delay))
    fixed_interval_looks = 299.0 / 0.05
    assert looks < 0.1 * fixed_interval_looks
    assert all(gap <= max(0.05, 0.01 * at) + 1e-9 for at, gap in gaps)
    assert [round(gap, 3) for _, gap in gaps[:4]] == [0.02, 0.04, 0.05, 0.05]  # fast vendors: seen within ms
    assert max(gap for _, gap in gaps) == 2.0
