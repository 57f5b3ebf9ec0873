"""The `daytona` provider against the real Daytona API, with the user's key. Skips without one.

Runs only when `DAYTONA_API_KEY` is set (`DAYTONA_API_URL` and `DAYTONA_TARGET` optional): two sandboxes
from the organization's default snapshot, labelled with a fresh run id, one command, one terminate, then
cleanup by run label. Commands run in a session (`exec_api=session`), which reports stdout and stderr apart as
the shared check wants. It costs a few cents of sandbox time. Never runs in this repository's CI, which has
no network.
"""

from __future__ import annotations

import os

import pytest

from tests.support.live_lifecycle import check_live_lifecycle

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("DAYTONA_API_KEY"), reason="no DAYTONA_API_KEY: the live Daytona test skips"),
]


@pytest.mark.timeout(600)
async def test_real_daytona_lifecycle_and_cleanup() -> None:
    from providers.vendors.daytona.provider import DaytonaProvider

    provider = DaytonaProvider.from_options({"exec_api": "session"})
    await check_live_lifecycle(provider, 300, lifetime_s=600)
