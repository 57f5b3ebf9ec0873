"""The contract walked against a vendor's real service (the live tests): two sandboxes under a fresh run id,
a command whose stdout, stderr and exit code must come back right, an idempotent terminate, then cleanup by
run label leaving nothing behind."""

from __future__ import annotations

import uuid
from typing import Any

from providers.base import Provider, SandboxSpec


async def check_live_lifecycle(provider: Provider, ready_timeout_s: float, **spec: Any) -> None:
    run_id = f"live-{uuid.uuid4().hex[:10]}"
    try:
        await provider.preflight()
        ref = await provider.create(SandboxSpec(run_id=run_id, rollout_id="r1", **spec))
        spare = await provider.create(SandboxSpec(run_id=run_id, rollout_id="r2", **spec))
        await provider.wait_ready(ref, ready_timeout_s)
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
