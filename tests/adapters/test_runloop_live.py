"""The `runloop` provider against the real Runloop API, with the user's key. Skips without one.

Runs only when `RUNLOOP_API_KEY` is set (`RUNLOOP_BASE_URL` optional): two devboxes from the default image, tagged
with a fresh run id in their metadata, one command, one shutdown, then cleanup by run label. It costs a few cents of
devbox time. Never runs in this repository's CI, which has no network.
"""

from __future__ import annotations

import os

import pytest

from tests.support.live_lifecycle import check_live_lifecycle

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("RUNLOOP_API_KEY"), reason="no RUNLOOP_API_KEY: the live Runloop test skips"),
]


@pytest.mark.timeout(600)
async def test_real_runloop_lifecycle_and_cleanup() -> None:
    from providers.vendors.runloop import RunloopProvider

    provider = RunloopProvider.from_options({})
    await check_live_lifecycle(provider, 300, lifetime_s=600)
