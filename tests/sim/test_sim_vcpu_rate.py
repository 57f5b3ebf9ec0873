"""The vCPU allocation limit (profile `[vcpu_rate]`, Vercel Sandbox's plan limit) on the VirtualClock: a create is
charged its vCPUs, refused creates are charged nothing, and what comes back comes back at the window's rate."""

from __future__ import annotations

import math
import random

import pytest

from providers.sim.core.clock import VirtualClock
from providers.sim.core.profile import ProfileError, load_profile
from providers.sim.core.simulator import CreateRequest, Rejected, RejectReason, VendorSimulator
from providers.sim.core.vcpu_rate import RESOURCE, VcpuAllowance, VcpuRate


def _sim(**overrides: object) -> tuple[VendorSimulator, VirtualClock]:
    clock = VirtualClock()
    profile = load_profile("ideal").with_overrides(overrides)
    return VendorSimulator(profile, seed=0, clock=clock), clock


def test_a_create_spends_its_vcpus_and_the_refusal_says_when_they_are_back() -> None:
    sim, clock = _sim(**{"vcpu_rate.vcpus": 8, "vcpu_rate.window_s": 60})
    sim.create(CreateRequest(image="x", cpu=4.0))
    sim.create(CreateRequest(image="x", cpu=2.0))
    with pytest.raises(Rejected) as refused:
        sim.create(CreateRequest(image="x", cpu=4.0))  # 2 of 8 left; 2 more come back in 15 s
    assert (refused.value.reason, refused.value.resource, refused.value.limit) == (
        RejectReason.RATE_LIMITED,
        RESOURCE,
        8,
    )
    assert refused.value.retry_after == pytest.approx(15.0)
    sim.create(CreateRequest(image="x", cpu=2.0))  # a smaller one still fits now
    clock.run_until(30.0)  # 4 vCPUs back
    sim.create(CreateRequest(image="x", cpu=4.0))
    assert sim.admission.rejections[RejectReason.RATE_LIMITED] == 1


def test_a_create_refused_for_another_reason_is_not_charged() -> None:
    sim, _ = _sim(**{"vcpu_rate.vcpus": 4, "quota.max_active": 1})
    sim.create(CreateRequest(image="x", cpu=2.0))
    for _ in range(5):
        with pytest.raises(Rejected) as capped:
            sim.create(CreateRequest(image="x", cpu=2.0))
        assert capped.value.reason is RejectReason.QUOTA_EXHAUSTED
    assert sim.admission.vcpu_allowance is not None and sim.admission.vcpu_allowance.left(0.0) == 2.0


def test_no_window_ever_admits_more_than_the_allowance_plus_what_came_back() -> None:
    rate = VcpuRate(vcpus=40.0, window_s=600.0)  # Vercel Hobby: 40 vCPUs per 10 minutes
    allowance, rng, now = VcpuAllowance(rate, 0.0), random.Random(3), 0.0
    admitted: list[tuple[float, float]] = []
    for _ in range(2000):
        now += rng.expovariate(0.2)
        vcpus = rng.choice((1.0, 2.0, 4.0, 8.0))
        if allowance.take(vcpus, now) is None:
            admitted.append((now, vcpus))
    assert len(admitted) > 100
    for i, (start, _) in enumerate(admitted):
        spent = sum(v for t, v in admitted[i:] if t - start <= rate.window_s)
        assert spent <= rate.vcpus + rate.vcpus + 1e-6  # a full bucket plus one window's refill, at most


def test_the_section_is_optional_and_checked() -> None:
    assert load_profile("ideal").vcpu_rate is None
    assert load_profile("vercel-like").vcpu_rate == VcpuRate(vcpus=200.0, window_s=60.0)
    with pytest.raises(ProfileError, match="window_s"):
        load_profile("ideal").with_overrides({"vcpu_rate.window_s": "0"})
    unlimited = VcpuAllowance(VcpuRate(), 0.0)
    assert all(unlimited.take(8.0, 0.0) is None for _ in range(1000)) and math.isinf(unlimited.left(0.0))
