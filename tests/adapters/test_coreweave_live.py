"""The `coreweave` provider against the real CoreWeave Sandbox, with the user's key. Skips without one.

Runs only when `CWSANDBOX_API_KEY` is set (`CWSANDBOX_BASE_URL` as the SDK reads it): two sandboxes of the SDK's
default image labelled with a fresh run id, one command, one stop, then cleanup by run tag. It costs a little sandbox
time. Never runs in this repository's CI, which has no network.
"""

from __future__ import annotations

import os

import pytest

from tests.support.live_lifecycle import check_live_lifecycle

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.environ.get("CWSANDBOX_API_KEY"), reason="no CWSANDBOX_API_KEY: the live CoreWeave test skips"
    ),
]


@pytest.mark.timeout(600)
async def test_real_coreweave_lifecycle_and_cleanup() -> None:
    from providers.vendors.coreweave import CoreWeaveProvider

    await check_live_lifecycle(CoreWeaveProvider.from_options({}), 300, lifetime_s=300)
