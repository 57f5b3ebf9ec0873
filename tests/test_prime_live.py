"""The `prime` provider against the real Prime Intellect API, with the user's key. Skips without one.

Runs only when `PRIME_API_KEY` is set (a key with the sandbox scope; `PRIME_TEAM_ID` optional): two small
sandboxes labelled with a fresh run id, one command, one terminate, then cleanup by run label. It costs
a few cents of sandbox time. Never runs in this repository's CI, which has no network.
"""

from __future__ import annotations

import os
import uuid

import pytest

from providers.base import SandboxSpec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("PRIME_API_KEY"), reason="no PRIME_API_KEY: the live Prime test skips"),
]


@pytest.mark.timeout(900)
async def test_real_prime_lifecycle_and_cleanup() -> None:
    from providers.prime import PrimeProvider

    provider = PrimeProvider.from_options({})
    run_id = f"live-{uuid.uuid4().hex[:10]}"
    try:
        await provider.preflight()
        ref = await provider.create(SandboxSpec(run_id=run_id, rollout_id="r1", memory_mb=1024, lifetime_s=600))
        spare = await provider.create(SandboxSpec(run_id=run_id, rollout_id="r2", memory_mb=1024, lifetime_s=600))
        await provider.wait_ready(ref, 600)
        result = await provider.exec(ref, ["sh", "-c", "echo out; echo err >&2; exit 3"], 60)
        assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
        await provider.terminate(ref)
        await provider.terminate(ref)  # idempotent
        owned = {r.sandbox_id for r in await provider.list_owned(run_id)}
        assert ref.sandbox_id not in owned and spare.sandbox_id in owned
    finally:
        reaped = await provider.cleanup(run_id)
        assert await provider.list_owned(run_id) == []
        await provider.aclose()
    assert reaped >= 1
