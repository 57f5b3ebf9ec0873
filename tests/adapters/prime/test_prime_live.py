"""The `prime` provider against the real Prime Intellect API, with the user's key. Skips without one.

Runs only when `PRIME_API_KEY` is set (a key with the sandbox scope; `PRIME_TEAM_ID` optional): two small
sandboxes labelled with a fresh run id, one command, one terminate, then cleanup by run label. It costs
a few cents of sandbox time. Never runs in this repository's CI, which has no network.
"""

from __future__ import annotations

import os

import pytest

from tests.support.live_lifecycle import check_live_lifecycle

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("PRIME_API_KEY"), reason="no PRIME_API_KEY: the live Prime test skips"),
]


@pytest.mark.timeout(900)
async def test_real_prime_lifecycle_and_cleanup() -> None:
    from providers.vendors.prime.provider import PrimeProvider

    await check_live_lifecycle(PrimeProvider.from_options({}), 600, memory_mb=1024, lifetime_s=600)
