"""The `vercel` provider against the real Vercel Sandbox, with the user's credentials. Skips without them.

Runs only when `VERCEL_TOKEN`, `VERCEL_TEAM_ID` and `VERCEL_PROJECT_ID` are set: two sandboxes of Vercel's default
image tagged with a fresh run id, one command, one destroy, then cleanup by run tag. It costs a few cents of
sandbox time and 2 vCPUs of the plan's allocation rate. Never runs in this repository's CI, which has no network.
"""

from __future__ import annotations

import os

import pytest

from tests.support.live_lifecycle import check_live_lifecycle

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(os.environ.get(k) for k in ("VERCEL_TOKEN", "VERCEL_TEAM_ID", "VERCEL_PROJECT_ID")),
        reason="no VERCEL_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID: the live Vercel test skips",
    ),
]


@pytest.mark.timeout(600)
async def test_real_vercel_lifecycle_and_cleanup() -> None:
    from providers.vendors.vercel import VercelProvider

    await check_live_lifecycle(VercelProvider.from_options({}), 300, lifetime_s=300)
