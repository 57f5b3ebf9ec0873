"""The steps of contract 9 a provider does not implement are refused by name, and `stampede run` can read which it
offers from what it implements; the fork every snapshot-capable provider inherits leaks no sandbox when a copy
fails."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from providers.base import (
    Capability,
    ExecResult,
    FailureKind,
    Provider,
    ProviderError,
    ReadyObservation,
    SandboxRef,
    SandboxSpec,
    UnsupportedFeature,
)


class _Minimal(Provider):
    name = "minimal"

    def __init__(self) -> None:
        self.live: dict[str, SandboxSpec] = {}
        self.fail_image_rollout: str | None = None

    async def create(self, spec: SandboxSpec) -> SandboxRef:
        await asyncio.sleep(0)
        if spec.rollout_id == self.fail_image_rollout:
            raise ProviderError(FailureKind.CAPACITY, "no room")
        self.live[spec.rollout_id] = spec
        return SandboxRef(spec.rollout_id, self.name, spec.run_id, spec.rollout_id)

    async def wait_ready(self, ref: SandboxRef, timeout: float) -> ReadyObservation | None:
        return None

    async def exec(self, ref: SandboxRef, argv: Sequence[str], timeout: float) -> ExecResult:
        return ExecResult(0, "", "")

    async def terminate(self, ref: SandboxRef) -> None:
        self.live.pop(ref.sandbox_id, None)

    async def list_owned(self, run_id: str, engine: str | None = None) -> list[SandboxRef]:
        return []


class _Snapshotting(_Minimal):
    name = "snapshotting"

    async def snapshot(self, ref: SandboxRef) -> str:
        return f"snap-{ref.sandbox_id}"


def test_a_provider_offers_only_what_it_implements() -> None:
    assert _Minimal().capabilities() == frozenset()
    assert _Snapshotting().capabilities() == {Capability.SNAPSHOT, Capability.FORK}


def test_an_unimplemented_step_is_refused_by_name() -> None:
    provider = _Minimal()
    ref = SandboxRef("s", "minimal", "run")
    with pytest.raises(UnsupportedFeature, match="streamed exec is not supported by the minimal provider"):
        asyncio.run(provider.exec_stream(ref, ["true"], 1.0))
    with pytest.raises(UnsupportedFeature, match="fork"):
        asyncio.run(provider.fork("snap", SandboxSpec("run", "r"), 2))


def test_a_fork_starts_its_copies_from_the_snapshot_each_under_its_own_rollout_id() -> None:
    provider = _Snapshotting()
    refs = asyncio.run(provider.fork("snap-1", SandboxSpec("run", "g7", image_size_mb=900), 4))
    assert [ref.rollout_id for ref in refs] == ["g7-0", "g7-1", "g7-2", "g7-3"]
    assert {spec.image for spec in provider.live.values()} == {"snap-1"}
    assert provider.live["g7-2"].tags()["stampede-image-mb"] == "900"


def test_a_failed_copy_fails_the_fork_and_no_copy_is_left_running() -> None:
    provider = _Snapshotting()
    provider.fail_image_rollout = "g7-2"
    with pytest.raises(ProviderError, match="no room"):
        asyncio.run(provider.fork("snap-1", SandboxSpec("run", "g7"), 4))
    assert provider.live == {}
