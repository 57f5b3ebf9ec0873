"""A profile's failures for the new steps (`[errors] upload_error_prob`, `download_error_prob`, `snapshot_error_prob`,
`fork_error_prob`) reach every vendor's own SDK as that vendor's error, which its adapter classifies by step.

A user reproducing what breaks RL rollouts sets one of them to 1 and sees, whatever vendor they drive: a failed
upload or download a `transfer_error`, a failed snapshot or fork a `snapshot_error` (E2B's copies: `died_before_ready`),
never `unknown` or `transport`; and no copy of a failed fork left running in the vendor's own list.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from providers.base import Capability, FailureKind, Phase, Provider, SandboxSpec
from tests.adapters.test_adapter_steps import EXPECTED, OPENERS, _ready, private_env

pytestmark = pytest.mark.usefixtures("private_env")
__all__ = ["private_env"]

VENDORS = sorted(OPENERS)
FORK_FAILURES = {vendor: {FailureKind.SNAPSHOT_ERROR} for vendor in VENDORS} | {"e2b": {FailureKind.DIED_BEFORE_READY}}
"""What a fork the vendor failed to restore is: the fork's `snapshot_error`, but E2B's adapter reads a 5xx among a
`fork(count=…)` call's answers as that copy's failed start (`died_before_ready`), its checkpoint having succeeded."""


async def _closing(
    vendor: str, monkeypatch: pytest.MonkeyPatch, key: str
) -> tuple[Provider, Callable[[], Awaitable[None]]]:
    """The vendor's local plane with `key` (an `[errors]` rate) at 1, and its adapter."""
    return await OPENERS[vendor](monkeypatch, ((key, 1.0),))


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_failed_upload_is_a_transfer_error_and_the_sandbox_still_ends(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, close = await _closing(vendor, monkeypatch, "errors.upload_error_prob")
    try:
        ref = await _ready(provider, "upload-fault")
        with pytest.raises(Exception) as failed:
            await asyncio.wait_for(provider.upload_file(ref, "repo.tar", b"r" * 4096), 120)
        assert provider.classify(failed.value, Phase.UPLOAD) is FailureKind.TRANSFER_ERROR, repr(failed.value)
        await provider.terminate(ref)
        assert ref.sandbox_id not in {r.sandbox_id for r in await provider.list_owned("steps")}
    finally:
        await provider.aclose()
        await close()


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_failed_download_is_a_transfer_error_while_uploads_still_land(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, close = await _closing(vendor, monkeypatch, "errors.download_error_prob")
    try:
        ref = await _ready(provider, "download-fault")
        await provider.upload_file(ref, "patch.diff", b"d" * 2048)  # the other direction is untouched
        with pytest.raises(Exception) as failed:
            await asyncio.wait_for(provider.download_file(ref, "patch.diff"), 120)
        assert provider.classify(failed.value, Phase.DOWNLOAD) is FailureKind.TRANSFER_ERROR, repr(failed.value)
        await provider.terminate(ref)
    finally:
        await provider.aclose()
        await close()


@pytest.mark.parametrize("vendor", [v for v in VENDORS if Capability.SNAPSHOT in EXPECTED[v]])
async def test_a_failed_snapshot_is_a_snapshot_error(vendor: str, monkeypatch: pytest.MonkeyPatch) -> None:
    provider, close = await _closing(vendor, monkeypatch, "errors.snapshot_error_prob")
    try:
        ref = await _ready(provider, "snapshot-fault")
        with pytest.raises(Exception) as failed:
            await asyncio.wait_for(provider.snapshot(ref), 120)
        assert provider.classify(failed.value, Phase.SNAPSHOT) is FailureKind.SNAPSHOT_ERROR, repr(failed.value)
        await provider.terminate(ref)
    finally:
        await provider.aclose()
        await close()


@pytest.mark.parametrize("vendor", [v for v in VENDORS if Capability.FORK in EXPECTED[v]])
async def test_a_failed_fork_is_a_snapshot_error_and_leaves_no_copy(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, close = await _closing(vendor, monkeypatch, "errors.fork_error_prob")
    try:
        origin = await _ready(provider, "origin")
        snapshot = await asyncio.wait_for(provider.snapshot(origin), 120)  # a snapshot still works
        with pytest.raises(Exception) as failed:
            await asyncio.wait_for(provider.fork(snapshot, SandboxSpec("steps", "group", lifetime_s=300), 2), 120)
        assert provider.classify(failed.value, Phase.FORK) in FORK_FAILURES[vendor], repr(failed.value)
        await provider.terminate(origin)
        left = [r for r in await provider.list_owned("steps") if r.rollout_id.startswith("group")]
        assert not left, left
    finally:
        await provider.aclose()
        await close()
