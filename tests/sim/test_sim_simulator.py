"""Vendor simulator invariants on the VirtualClock: determinism, limits, lifecycle, exec."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
from typing import Any

import pytest

from foundation.sandbox_client import CLIENTS
from providers.sim.core.clock import LoopClock, VirtualClock
from providers.sim.core.experiments import simulate_burst
from providers.sim.core.profile import Profile, load_profile
from providers.sim.core.simulator import (
    ACTIVE_STATUSES,
    CreateRequest,
    ExecOutcome,
    ExecTimedOut,
    NotFound,
    NotRunning,
    Rejected,
    RejectReason,
    SandboxDied,
    SandboxStatus,
    VendorSimulator,
)

REQ = CreateRequest(image="python:3.12", labels=("run-1",), lifetime_s=600.0)


def _sim(profile: Profile | str = "ideal", seed: int = 0, **overrides: Any) -> tuple[VendorSimulator, VirtualClock]:
    prof = load_profile(profile) if isinstance(profile, str) else profile
    if overrides:
        prof = prof.with_overrides(overrides)
    clock = VirtualClock()
    return VendorSimulator(prof, seed=seed, clock=clock), clock


def _exec(
    sim: VendorSimulator,
    clock: VirtualClock,
    sandbox_id: str,
    command: str,
    timeout_s: float = 60.0,
    **kw: Any,
) -> Any:
    box: list[Any] = []
    sim.exec_start(sandbox_id, command, timeout_s=timeout_s, on_done=box.append, **kw)
    while not box and (when := clock.next_time()) is not None:  # run just until the command resolves
        clock.run_until(when)
    assert len(box) == 1
    return box[0]


# --- a scripted, randomised workload (the same script for every run) -----------------------------------

STRESS = {
    "create_rate.per_s": 5.0,
    "create_rate.burst": 20.0,
    "quota.max_active": 40,
    "pool.initial_nodes": 1,
    "pool.slots_per_node": 8,
    "pool.max_nodes": 4,
    "pool.scale_up_lag_s": 20.0,
    "pool.scale_down_idle_s": 30.0,
    "pool.initial_nodes_warm": False,
    "image.pull_failure_prob": 0.05,
    "errors.create_transient_prob": 0.05,
    "errors.boot_crash_prob": 0.05,
    "errors.exec_death_prob": 0.05,
    "errors.exec_oom_prob": 0.05,
    "startup.deadline_s": 60.0,
}


def _run_script(seed: int, *, check: bool = False) -> tuple[VendorSimulator, list[float]]:
    """~1500 create attempts over 300 s with random exec/terminate; returns the sim and bucket-admit times."""
    sim, clock = _sim("modal-like", seed=seed, **STRESS)
    script = random.Random(1234)  # the workload script is fixed; only the simulator seed varies
    admitted: list[float] = []
    quota = sim.profile.quota.max_active

    def check_quota(_: Any) -> None:
        if check:
            assert sum(1 for sb in sim.list(active_only=True) if sb.status in ACTIVE_STATUSES) <= quota

    sim.add_listener(check_quota)

    def attempt(i: int) -> None:
        now = clock.now()
        image = ("img-a", "img-b")[i % 2]
        try:
            sb = sim.create(CreateRequest(image=image, labels=("run", f"i{i % 3}"), lifetime_s=200.0))
        except Rejected as exc:
            if exc.reason is not RejectReason.RATE_LIMITED:
                admitted.append(now)
            return
        admitted.append(now)
        check_quota(sb)
        hold = script.uniform(1, 120)

        def later() -> None:
            if sb.status is SandboxStatus.RUNNING and script.random() < 0.7:
                sim.exec_start(sb.id, "echo hi; sleep 2", timeout_s=5.0, on_done=lambda r: None)
            clock.call_at(clock.now() + 3, lambda: sim.terminate(sb.id))

        clock.call_at(now + hold, later)

    t = 0.0
    for i in range(1500):
        t += script.expovariate(5.0)
        clock.call_at(t, lambda i=i: attempt(i))
    clock.run()
    return sim, admitted


def test_same_seed_same_truth_other_seed_differs() -> None:
    a, _ = _run_script(seed=7)
    b, _ = _run_script(seed=7)
    c, _ = _run_script(seed=8)
    assert a.truth() == b.truth()
    assert a.stats() == b.stats()

    def shape(sim: VendorSimulator) -> list[tuple[Any, ...]]:
        return [(t["status"], t["error_type"], t["running_s"]) for t in sim.truth()]

    assert shape(a) != shape(c)


def test_one_sandbox_draws_do_not_depend_on_others() -> None:
    """Sandbox k's boot time is a function of (seed, k, purpose): extra load changes only congestion."""
    sim1, clock1 = _sim("modal-like", seed=3, **{"errors.boot_crash_prob": 0.0})
    first = sim1.create(REQ)
    clock1.run_until(1000)
    sim2, clock2 = _sim("modal-like", seed=3, **{"errors.boot_crash_prob": 0.0})
    again = sim2.create(REQ)
    sim2.create(CreateRequest(image="other"))  # a second sandbox, drawn after the first
    clock2.run_until(1000)
    assert first.running_at == again.running_at


def test_rate_bucket_never_admits_more_than_burst_plus_rate_times_t() -> None:
    sim, admitted = _run_script(seed=1)
    rate, burst = sim.profile.create_rate.per_s, sim.profile.create_rate.burst
    assert sim.admission.rejections[RejectReason.RATE_LIMITED] > 0, "the script must hit the limiter"
    admitted.sort()
    # max over windows [t_i, t_j] of (j - i + 1) - rate * (t_j - t_i), in one pass
    best = -math.inf
    for j, t in enumerate(admitted):
        best = max(best, rate * t - j)
        assert (j + 1) - rate * t + best <= burst + 1e-6


def test_quota_never_exceeded_and_everything_ends() -> None:
    sim, _ = _run_script(seed=2, check=True)
    stats = sim.stats()
    assert sim.admission.rejections[RejectReason.QUOTA_EXHAUSTED] > 0, "the script must hit the quota"
    assert stats["peak_active"] <= sim.profile.quota.max_active
    assert stats["active"] == 0
    truth = sim.truth()
    assert truth and all(t["status"] not in ACTIVE_STATUSES and t["ended_s"] is not None for t in truth)
    ended = {t["status"] for t in truth}
    assert {"TERMINATED", "ERROR"} <= ended
    kinds = {t["error_type"] for t in truth}
    assert {"IMAGE_PULL_FAILED", "BOOT_FAILED"} <= kinds


def test_rate_limited_retry_after_is_time_to_next_token() -> None:
    sim, clock = _sim("ideal", **{"create_rate.per_s": 2.0, "create_rate.burst": 3.0})
    for _ in range(3):
        sim.create(REQ)
    with pytest.raises(Rejected) as info:
        sim.create(REQ)
    assert info.value.reason is RejectReason.RATE_LIMITED
    assert info.value.retry_after == pytest.approx(0.5)
    clock.run_until(0.5)
    sim.create(REQ)


def test_idempotency_key_returns_the_same_sandbox_without_spending() -> None:
    sim, _ = _sim("ideal", **{"create_rate.per_s": 1.0, "create_rate.burst": 1.0})
    req = CreateRequest(image="x", idempotency_key="k1")
    first = sim.create(req)
    assert sim.create(req) is first
    assert sim.stats()["create_attempts"] == 1
    with pytest.raises(Rejected):  # the one token went to the first create
        sim.create(CreateRequest(image="x", idempotency_key="k2"))


def test_quota_counts_leaked_sandboxes() -> None:
    sim, clock = _sim("ideal", **{"quota.max_active": 2})
    a = sim.create(REQ)
    sim.create(REQ)
    clock.run_until(10)
    with pytest.raises(Rejected) as info:
        sim.create(REQ)
    assert info.value.reason is RejectReason.QUOTA_EXHAUSTED
    sim.terminate(a.id)
    sim.create(REQ)


def test_invalid_requests_are_rejected() -> None:
    sim, _ = _sim("modal-like")
    for bad in (
        CreateRequest(image=""),
        CreateRequest(image="x", cpu=0),
        CreateRequest(image="x", cpu=1000),
        CreateRequest(image="x", lifetime_s=10 * 86400),
    ):
        with pytest.raises(Rejected) as info:
            sim.create(bad)
        assert info.value.reason is RejectReason.INVALID


def test_capacity_rejection_when_pool_full_and_queue_at_bound() -> None:
    sim, clock = _sim(
        "ideal",
        **{"pool.slots_per_node": 2, "pool.max_nodes": 1, "pool.max_queue": 1, "boot.median_s": 100.0},
    )
    for _ in range(3):  # two placed, one queued
        sim.create(REQ)
    clock.run_until(1)
    with pytest.raises(Rejected) as info:
        sim.create(REQ)
    assert info.value.reason is RejectReason.CAPACITY
    assert str(info.value.message) == "Insufficient capacity to create sandbox"


def test_shared_image_pull_and_pull_failure() -> None:
    over = {
        "pool.initial_nodes_warm": False,
        "pool.slots_per_node": 8,
        "image.pull_median_s": 10.0,
        "image.pull_sigma": 0.0,
        "boot.median_s": 1.0,
    }
    sim, clock = _sim("ideal", **over)
    boxes = [sim.create(REQ) for _ in range(3)]
    clock.run_until(5)
    late = sim.create(REQ)  # joins the pull already in progress on the same node
    clock.run_until(100)
    assert [b.running_at for b in boxes] == [pytest.approx(11.0)] * 3
    assert late.running_at == pytest.approx(11.0)
    assert {b.node for b in [*boxes, late]} == {0}
    warm = sim.create(REQ)  # the node has the image now
    clock.run_until(200)
    assert warm.running_at == pytest.approx(warm.created_at + 1.0)

    sim2, clock2 = _sim("ideal", **{**over, "image.pull_failure_prob": 1.0})
    failing = [sim2.create(REQ) for _ in range(2)]
    clock2.run_until(100)
    assert {(b.status, b.error_type) for b in failing} == {(SandboxStatus.ERROR, "IMAGE_PULL_FAILED")}


def test_autoscaling_adds_nodes_after_lag_and_scales_down_when_idle() -> None:
    sim, clock = _sim(
        "ideal",
        **{
            "pool.slots_per_node": 2,
            "pool.max_nodes": 3,
            "pool.scale_up_lag_s": 30.0,
            "pool.scale_down_idle_s": 60.0,
            "boot.median_s": 1.0,
        },
    )
    boxes = [sim.create(REQ) for _ in range(5)]
    clock.run_until(10)
    assert [b.status for b in boxes] == [SandboxStatus.RUNNING] * 2 + [SandboxStatus.PENDING] * 3
    assert sim.stats()["nodes_booting"] == 2
    clock.run_until(40)
    assert all(b.status is SandboxStatus.RUNNING for b in boxes)
    assert min(b.running_at for b in boxes[2:]) >= 30.0
    assert sim.stats()["nodes"] == 3
    for b in boxes:
        sim.terminate(b.id)
    clock.run_until(200)
    assert sim.stats()["nodes"] == 1


def test_startup_deadline_ends_waiting_sandboxes_with_modal_wording() -> None:
    # modal-like leaves the startup deadline to the client (issue #34); a profile that sets one ends the sandbox
    overrides = {"boot.median_s": 1000.0, "boot.sigma": 0.0, "errors.boot_crash_prob": 0.0, "startup.deadline_s": 299.0}
    sim, clock = _sim("modal-like", **overrides)
    sb = sim.create(REQ)
    clock.run_until(400)
    assert sb.status is SandboxStatus.ERROR
    assert sb.error_type == "PROVISIONING_TIMEOUT"
    assert sb.error_message == "Runtime did not start within 299s"
    assert sb.ended_at == pytest.approx(299.0)


def test_lifetime_ends_sandbox_as_timeout() -> None:
    sim, clock = _sim("ideal")
    sb = sim.create(CreateRequest(image="x", lifetime_s=10.0))
    clock.run_until(100)
    assert (sb.status, sb.error_type, sb.ended_at) == (SandboxStatus.TIMEOUT, "TIMEOUT", pytest.approx(10.0))


def test_set_lifetime_restarts_the_lifetime_from_now_longer_or_shorter() -> None:
    sim, clock = _sim("ideal")
    longer = sim.create(CreateRequest(image="x", lifetime_s=10.0))
    shorter = sim.create(CreateRequest(image="x", lifetime_s=100.0))
    clock.run_until(5)
    sim.set_lifetime(longer.id, 20.0)  # would have ended at 10: now at 25
    sim.set_lifetime(shorter.id, 1.0)  # would have ended at 100: now at 6
    clock.run_until(24)
    assert longer.status is SandboxStatus.RUNNING and shorter.ended_at == pytest.approx(6.0)
    clock.run_until(100)
    assert (longer.status, longer.ended_at, longer.lifetime_s) == (SandboxStatus.TIMEOUT, pytest.approx(25.0), 25.0)
    with pytest.raises(NotRunning):
        sim.set_lifetime(longer.id, 10.0)
    with pytest.raises(NotFound):
        sim.set_lifetime("nope", 10.0)


def test_exec_outcomes() -> None:
    sim, clock = _sim("ideal")
    with pytest.raises(NotFound):
        sim.exec_start("nope", "true", timeout_s=1, on_done=lambda r: None)
    sb = sim.create(CreateRequest(image="x", memory_mb=1024, env={"GREETING": "hi"}))
    with pytest.raises(NotRunning) as info:
        sim.exec_start(sb.id, "true", timeout_s=1, on_done=lambda r: None)
    assert info.value.status == "PENDING"
    clock.run_until(1)
    out = _exec(sim, clock, sb.id, "echo $GREETING; echo oops >&2; exit 3")
    assert isinstance(out, ExecOutcome)
    assert (out.exit_code, out.stdout, out.stderr) == (3, "hi\n", "oops\n")
    assert out.duration_s == pytest.approx(0.001)
    out = _exec(sim, clock, sb.id, "pwd; printenv X", cwd="/work", env={"X": "y"})
    assert out.stdout == "/work\ny\n"
    start = clock.now()
    slow = _exec(sim, clock, sb.id, "sleep 30", timeout_s=5)
    assert isinstance(slow, ExecTimedOut)
    assert sb.status is SandboxStatus.RUNNING
    out = _exec(sim, clock, sb.id, "sleep 2; echo done")
    assert out.stdout == "done\n" and out.duration_s == pytest.approx(2.001)
    assert clock.now() > start
    died = _exec(sim, clock, sb.id, "memhog 4096")
    assert isinstance(died, SandboxDied) and died.error_type == "OOM_KILLED"
    assert (sb.status, sb.error_type) == (SandboxStatus.ERROR, "OOM_KILLED")


def test_terminate_during_exec_and_idempotent_terminate() -> None:
    sim, clock = _sim("ideal")
    sb = sim.create(REQ)
    clock.run_until(1)
    box: list[Any] = []
    sim.exec_start(sb.id, "sleep 100", timeout_s=1000, on_done=box.append)
    clock.run_until(5)
    sim.terminate(sb.id)
    assert isinstance(box[0], SandboxDied) and box[0].status == "TERMINATED"
    ended = sb.ended_at
    clock.run_until(10)
    assert sim.terminate(sb.id).ended_at == ended
    with pytest.raises(NotFound):
        sim.terminate("missing")


def test_injected_exec_failures() -> None:
    sim, clock = _sim("ideal", **{"errors.exec_death_prob": 1.0})
    sb = sim.create(REQ)
    clock.run_until(1)
    died = _exec(sim, clock, sb.id, "sleep 1")
    assert isinstance(died, SandboxDied) and died.error_type == "SANDBOX_CRASHED"


def test_list_filters_labels_and_active() -> None:
    sim, _ = _sim("ideal")
    a = sim.create(CreateRequest(image="x", labels=("run-1", "a")))
    b = sim.create(CreateRequest(image="x", labels=("run-1", "b")))
    sim.create(CreateRequest(image="x", labels=("run-2",)))
    sim.terminate(b.id)
    assert [s.id for s in sim.list(labels=["run-1"])] == [a.id, b.id]
    assert [s.id for s in sim.list(labels=["run-1"], active_only=True)] == [a.id]
    assert sim.list(labels=["run-1", "b"]) == [b]


def test_zero_failures_under_ideal() -> None:
    result = simulate_burst("ideal", 2000, seed=5)
    assert result.failure_rate == 0.0
    assert result.quantile(1.0) < 0.05


def test_hundred_thousand_sandboxes_in_seconds() -> None:
    # CPU time, not wall time: the bound is about our code, not about whoever else shares the machine
    started = time.process_time()
    result = simulate_burst("ideal", 100_000, seed=1)
    elapsed = time.process_time() - started
    assert result.failure_rate == 0.0 and len(result.samples) == 100_000
    assert elapsed < 15.0, f"100k sandboxes took {elapsed:.1f}s of CPU"


async def test_exec_on_a_live_loop_clock() -> None:
    clock = LoopClock(time_scale=0.01)
    sim = VendorSimulator(load_profile("ideal"), seed=0, clock=clock)
    sb = sim.create(REQ)
    for _ in range(100):
        if sb.status is SandboxStatus.RUNNING:
            break
        await asyncio.sleep(0.005)
    started = asyncio.get_running_loop().time()
    out = await sim.exec(sb.id, "sleep 10; echo ok", timeout_s=60)  # 10 vendor s = 0.1 s real
    assert out.stdout == "ok\n"
    assert 0.09 <= asyncio.get_running_loop().time() - started < 5.0  # not the 10 s of a 1:1 clock
    with pytest.raises(ExecTimedOut):
        await sim.exec(sb.id, "sleep 100", timeout_s=5)
    assert clock.wall(clock.now()) == pytest.approx(time.time(), abs=0.5)
    sim.close()


def test_a_burst_replays_the_arrivals_a_live_vendor_saw():
    """The offline burst fed a live run's create arrivals (vendor seconds) is the check on that run: spacing
    them out is what changes the failure rate, and a list that does not fit the burst is refused."""
    client = dataclasses.replace(CLIENTS["swe-rex-uni-agent-pre47"], retries=0)  # its 300 s deadline, no retries
    at_once = simulate_burst("modal-like", 300, seed=3, client=client)
    assert simulate_burst("modal-like", 300, seed=3, arrivals_s=[0.0] * 300, client=client).samples == at_once.samples
    spaced = simulate_burst("modal-like", 300, seed=3, spacing_s=0.05, client=client)
    replayed = simulate_burst("modal-like", 300, seed=3, arrivals_s=[i * 0.05 for i in range(300)], client=client)
    assert replayed.samples == spaced.samples and replayed.failure_rate < at_once.failure_rate
    with pytest.raises(ValueError, match="arrivals_s"):
        simulate_burst("modal-like", 3, arrivals_s=[0.0, 1.0])
    with pytest.raises(ValueError, match="arrivals_s"):
        simulate_burst("modal-like", 2, arrivals_s=[0.0, -1.0])
