"""e2b-like keeps E2B's two create limits apart, as E2B's rate-limits page does: a creation rate (5 / sec on Pro,
here a bucket of 200) and a concurrent-sandbox cap (100 on Pro). A load past the cap at a rate the bucket allows
meets the cap's own refusal (429 "maximum number of concurrent E2B sandboxes (100)", no Retry-After, which E2B's
SDK does not retry); a burst past the bucket meets the rate limit's (429 with Retry-After) instead. Offline on a
VirtualClock, then on the wire through the local E2B with E2B's own SDK."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import httpx
import pytest
from e2b import AsyncSandbox, RateLimitException

from providers.base import FailureKind, Phase
from providers.sim.core.clock import VirtualClock
from providers.sim.core.profile import load_profile
from providers.sim.core.records import CreateRequest, Rejected, RejectReason
from providers.sim.core.simulator import VendorSimulator
from providers.sim.e2b.server import E2BSettings, RunningE2B, start_e2b
from providers.vendors.e2b import classify_e2b

CAP = 100  # e2b.dev/docs/sandbox/rate-limits: concurrent sandboxes on Pro
RATE = 5.0  # the same page: sandbox creation rate on Pro, per second
BUCKET = 200  # the profile's assumed burst (its burst_source says why)
REQ = CreateRequest(image="base", lifetime_s=3600.0)  # every sandbox outlives the load: the cap stays full


def test_the_profile_keeps_the_bucket_above_the_cap():
    profile = load_profile("e2b-like")
    assert profile.quota.max_active == CAP and profile.create_rate.per_s == RATE
    assert profile.create_rate.burst == BUCKET > CAP  # a bucket that empties at the cap would hide the cap's refusal


def _offer(count: int, spacing_s: float) -> tuple[Counter[str], list[Rejected]]:
    """`count` creates `spacing_s` vendor seconds apart against a fresh e2b-like: outcomes and the refusals."""
    clock = VirtualClock()
    sim = VendorSimulator(load_profile("e2b-like"), seed=0, clock=clock)
    start = clock.now()
    outcomes: Counter[str] = Counter()
    refusals: list[Rejected] = []
    for i in range(count):
        clock.run_until(start + i * spacing_s)
        try:
            sim.create(REQ)
            outcomes["accepted"] += 1
        except Rejected as exc:
            outcomes[str(exc.reason)] += 1
            refusals.append(exc)
    sim.close()
    return outcomes, refusals


def test_a_load_past_the_cap_at_an_allowed_rate_meets_the_cap():
    """150 creates at 4/s, under the documented 5/s: the first 100 run, the other 50 are refused by the cap, none
    by the rate limit."""
    outcomes, refusals = _offer(150, spacing_s=0.25)
    assert outcomes == {"accepted": CAP, str(RejectReason.QUOTA_EXHAUSTED): 50}
    assert all(r.retry_after is None for r in refusals)


def test_a_burst_meets_the_cap_first_and_the_rate_limit_past_the_bucket():
    """300 at once: 100 run, the next 100 (still within the bucket of 200) meet the cap, the last 100 the rate limit,
    each told to come back once a token has dripped in (1/5 s)."""
    outcomes, refusals = _offer(300, spacing_s=0.0)
    assert outcomes == {
        "accepted": CAP,
        str(RejectReason.QUOTA_EXHAUSTED): BUCKET - CAP,
        str(RejectReason.RATE_LIMITED): 300 - BUCKET,
    }
    reasons = [r.reason for r in refusals]
    assert reasons == [RejectReason.QUOTA_EXHAUSTED] * (BUCKET - CAP) + [RejectReason.RATE_LIMITED] * (300 - BUCKET)
    assert all(r.retry_after == pytest.approx(1 / RATE) for r in refusals if r.reason is RejectReason.RATE_LIMITED)


TOKEN = "e2b_limits"


@pytest.fixture
async def e2b(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[RunningE2B]:
    """The local E2B on e2b-like as shipped (real time), the SDK's environment pointed at it."""
    for name in ("E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DOMAIN", "E2B_ACCESS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    running = await start_e2b(E2BSettings(profile="e2b-like", seed=0, token=TOKEN))
    for name, value in running.sdk_environment().items():
        monkeypatch.setenv(name, value)
    yield running
    await running.close()


async def _burst(client: httpx.AsyncClient, count: int) -> list[httpx.Response]:
    body = {"templateID": "base", "timeout": 3600}
    return list(await asyncio.gather(*(client.post("/v2/sandboxes", json=body) for _ in range(count))))


async def test_on_the_wire_the_cap_and_the_rate_limit_answer_differently(e2b: RunningE2B):
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=400)
    async with httpx.AsyncClient(
        base_url=e2b.url, headers={"X-API-KEY": TOKEN}, limits=limits, timeout=120.0
    ) as client:
        # 150 at once, within the bucket: 100 run, 50 meet the cap
        first = await _burst(client, 150)
        assert Counter(r.status_code for r in first) == {201: CAP, 429: 50}
        for capped in (r for r in first if r.status_code == 429):
            assert f"maximum number of concurrent E2B sandboxes ({CAP})" in capped.json()["message"]
            assert "Retry-After" not in capped.headers  # nothing to wait for: a slot frees only when one ends

        # E2B's SDK raises the cap's 429 at once, and stampede classifies it as the quota
        with pytest.raises(RateLimitException) as raised:
            await AsyncSandbox.create()
        assert "maximum number of concurrent E2B sandboxes" in str(raised.value)
        assert classify_e2b(raised.value, Phase.CREATE) is FailureKind.QUOTA_EXHAUSTED

        # 300 more at once: what is left of the bucket meets the cap, the rest the rate limit (its tokens drip in at
        # 5/s, so the rate limit answers as long as these 300 arrive within 40 s of the first burst)
        second = await _burst(client, 300)
        assert {r.status_code for r in second} == {429}
        rate_limited = [r for r in second if "Sandbox creation rate limit exceeded" in r.json()["message"]]
        capped = [r for r in second if "maximum number of concurrent E2B sandboxes" in r.json()["message"]]
        assert rate_limited and capped and len(rate_limited) + len(capped) == 300
        assert all(int(r.headers["Retry-After"]) >= 1 for r in rate_limited)
        assert not any("Retry-After" in r.headers for r in capped)
        stats = (await client.get("/api/v1/_stampede/stats", headers={"Authorization": f"Bearer {TOKEN}"})).json()
    assert stats["stats"]["rejected"][str(RejectReason.RATE_LIMITED)] == len(rate_limited)
    assert stats["stats"]["rejected"][str(RejectReason.QUOTA_EXHAUSTED)] == 50 + 1 + len(capped)
