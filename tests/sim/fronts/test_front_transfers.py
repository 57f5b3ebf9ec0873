"""Every front's files API goes through the simulator's transfers (`providers/sim/core/transfers.py`).

A user who sets a profile's `[sandbox] max_file_mib` sees a file over it refused by the vendor's own error shape,
which the vendor's SDK raises and the adapter classifies as an upload's `transfer_error`; a file under it still
goes in and comes back whole, and a profile bandwidth makes the front wait the file's time before it answers.
"""

from __future__ import annotations

import time

import pytest

from providers.base import FailureKind, Phase
from tests.adapters.test_adapter_steps import OPENERS, REAL, Overrides, _ready, private_env

pytestmark = pytest.mark.usefixtures("private_env")
__all__ = ["private_env"]

CAP: Overrides = (*REAL, ("sandbox.max_file_mib", 1.0))
SLOW_MB_S = 0.2  # 200 kB/s a sandbox: a 400 kB file takes 2 vendor seconds


@pytest.mark.parametrize("vendor", sorted(OPENERS))
async def test_a_file_over_the_profiles_cap_is_a_transfer_error_and_one_under_it_round_trips(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, close = await OPENERS[vendor](monkeypatch, CAP)
    try:
        ref = await _ready(provider, "cap")
        small = b"x" * 4096
        await provider.upload_file(ref, "small.bin", small)
        assert await provider.download_file(ref, "small.bin") == small
        big = b"y" * (2 << 20)
        with pytest.raises(Exception) as refused:
            await provider.upload_file(ref, "big.bin", big)
        assert provider.classify(refused.value, Phase.UPLOAD) is FailureKind.TRANSFER_ERROR, repr(refused.value)
        await provider.terminate(ref)
    finally:
        await provider.aclose()
        await close()


@pytest.mark.parametrize("vendor", ["e2b", "prime"])
async def test_an_upload_waits_its_size_over_the_profiles_bandwidth(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lower bound only (a busy machine makes it slower, never faster): the front answered after the file's time."""
    provider, close = await OPENERS[vendor](monkeypatch, (*REAL, ("sandbox.upload_mb_s", SLOW_MB_S)))
    try:
        ref = await _ready(provider, "slow")
        began = time.monotonic()
        await provider.upload_file(ref, "repo.tar", b"z" * 400_000)
        assert time.monotonic() - began >= 1.9  # 0.4 MB / 0.2 MB/s at the ideal profile's time scale of 1
        await provider.terminate(ref)
    finally:
        await provider.aclose()
        await close()
