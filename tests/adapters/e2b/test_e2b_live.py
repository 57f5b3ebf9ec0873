"""The `e2b` provider against the real E2B, with the user's key. Skips without one.

Runs only when `E2B_API_KEY` is set (`E2B_DOMAIN` etc. as the SDK reads them): two sandboxes of the `base`
template labelled with a fresh run id, one command, one kill, then cleanup by run label. It costs a few cents of
sandbox time. Never runs in this repository's CI, which has no network.
"""

from __future__ import annotations

import os

import pytest

from tests.support.live_lifecycle import check_live_lifecycle

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("E2B_API_KEY"), reason="no E2B_API_KEY: the live E2B test skips"),
]


@pytest.mark.timeout(600)
async def test_real_e2b_lifecycle_and_cleanup() -> None:
    from providers.vendors.e2b import E2BProvider

    await check_live_lifecycle(E2BProvider.from_options({}), 300, lifetime_s=300)
