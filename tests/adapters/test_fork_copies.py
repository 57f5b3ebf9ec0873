"""Fork copies through the vendors' own SDKs against their local planes: E2B's native fork of a running sandbox
(`fork_running`, the SDK's `fork(count=)`), and a copy that fails to boot on E2B and Vercel: classified as its
boot's death in the fork step (`died_before_ready@fork`, the snapshot itself was fine), and never counted as a
leftover by the end-of-run sweep.

A copy's boot is made to fail by turning the plane's `errors.boot_crash_prob` to 1 once the prepared sandbox runs:
every boot from then on crashes, as a vendor whose hosts went bad mid-run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from providers.base import RUN_LABEL, FailureKind, Phase, Provider, SandboxRef, SandboxSpec
from providers.sim.core.simulator import VendorSimulator
from providers.vendors.vercel import VercelProvider

TOKEN = "fork-copies"
RUN, ENGINE = "forks", "engine-a"


def _crash_every_boot_from_now(sim: VendorSimulator) -> None:
    """Every boot the plane starts from now on crashes (the sandboxes already running are untouched)."""
    sim.profile = sim.profile.with_overrides({"errors.boot_crash_prob": 1.0})
    sim._pipeline.profile = sim.profile  # the start pipeline draws its boots' crashes from its own copy


def _spec(rollout: str) -> SandboxSpec:
    return SandboxSpec(run_id=RUN, rollout_id=rollout, engine=ENGINE, lifetime_s=300)


@pytest.fixture
async def e2b() -> AsyncIterator[tuple[Provider, VendorSimulator]]:
    from providers.sim.e2b.server import E2BSettings, start_e2b
    from providers.vendors.e2b import E2BProvider

    front = await start_e2b(E2BSettings(profile="ideal", seed=5, token=TOKEN))
    provider = E2BProvider.from_options({"base_url": front.url, "token": front.token, "sandbox_url": front.url})
    yield provider, front.simulator
    await provider.cleanup(RUN)
    await provider.aclose()
    await front.close()


@pytest.fixture
async def vercel(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[VercelProvider, Any]]:
    from providers.sim.vercel.server import PROJECT_ID, TEAM_ID, VercelSettings, start_vercel

    monkeypatch.setenv("VERCEL_SANDBOX_TELEMETRY_DISABLED", "1")
    for name in ("VERCEL_TOKEN", "VERCEL_TEAM_ID", "VERCEL_PROJECT_ID", "VERCEL_OIDC_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    front = await start_vercel(VercelSettings(profile="ideal", seed=5, token=TOKEN))
    options = {"base_url": front.url, "token": front.token, "team_id": TEAM_ID, "project_id": PROJECT_ID}
    provider = VercelProvider.from_options(options)
    yield provider, front
    await provider.cleanup(RUN)
    await provider.aclose()
    await front.close()


async def _prepared(provider: Provider) -> SandboxRef:
    origin = await provider.create(_spec("group"))
    await provider.wait_ready(origin, 60)
    await provider.upload_file(origin, "/tmp/prepared.txt", b"prepared state")
    return origin


async def test_e2b_forks_a_running_sandbox_in_one_call_of_the_sdk(e2b: tuple[Provider, VendorSimulator]) -> None:
    provider, sim = e2b
    origin = await _prepared(provider)
    copies = await asyncio.wait_for(provider.fork_running(origin, _spec("group"), 3), 60)
    assert [ref.rollout_id for ref in copies] == ["group-0", "group-1", "group-2"]
    assert {sim.get(ref.sandbox_id).fork_of for ref in copies} == {origin.sandbox_id}  # E2B's fork, no snapshot
    assert sim.snapshots() == []
    for ref in copies:
        assert await provider.download_file(ref, "/tmp/prepared.txt") == b"prepared state"
    assert (await provider.exec(origin, ["true"], 30)).exit_code == 0  # the source keeps running
    listed = {ref.sandbox_id for ref in await provider.list_owned(RUN, ENGINE)}  # the copies carry its labels
    assert listed == {origin.sandbox_id, *(ref.sandbox_id for ref in copies)}
    assert await provider.cleanup(RUN, ENGINE) == 4


async def test_an_e2b_fork_copy_that_fails_to_boot_died_before_ready(e2b: tuple[Provider, VendorSimulator]) -> None:
    provider, sim = e2b
    origin = await _prepared(provider)
    snapshot = await provider.snapshot(origin)
    _crash_every_boot_from_now(sim)
    with pytest.raises(Exception) as native:
        await asyncio.wait_for(provider.fork_running(origin, _spec("group"), 2), 60)
    with pytest.raises(Exception) as from_snapshot:
        await asyncio.wait_for(provider.fork(snapshot, _spec("group"), 2), 60)
    for failed in (native.value, from_snapshot.value):
        assert provider.classify(failed, Phase.FORK) is FailureKind.DIED_BEFORE_READY, repr(failed)
    assert [ref.sandbox_id for ref in await provider.list_owned(RUN, ENGINE)] == [origin.sandbox_id]  # none left


async def test_a_vercel_fork_copy_that_failed_to_boot_is_no_leftover(vercel: tuple[VercelProvider, Any]) -> None:
    from vercel.sandbox import SandboxQueryByCreatedAt, TagFilter

    provider, front = vercel
    origin = await _prepared(provider)
    snapshot = await provider.snapshot(origin)  # Vercel stops the sandbox it snapshots
    await provider.terminate(origin)
    _crash_every_boot_from_now(front.simulator)
    with pytest.raises(Exception) as failed:
        await asyncio.wait_for(provider.fork(snapshot, _spec("group"), 2), 60)
    assert provider.classify(failed.value, Phase.FORK) is FailureKind.DIED_BEFORE_READY
    query = SandboxQueryByCreatedAt(tag=TagFilter(key=RUN_LABEL, value=RUN))
    statuses = [sandbox.status async for sandbox in provider._sdk().query_sandboxes(query=query)]
    assert "failed" in statuses  # Vercel still lists the failed copy by name
    assert await provider.list_owned(RUN, ENGINE) == []  # but it holds nothing: no leftover
    assert [ref for ref in await provider.list_all_owned() if ref.run_id == RUN] == []
    assert await provider.cleanup(RUN, ENGINE) == 0  # the end-of-run sweep's count: reaped_by_label
