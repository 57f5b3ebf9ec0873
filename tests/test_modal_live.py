"""The `modal` provider against the real Modal, with the user's token. Skips without one.

Runs when `MODAL_TOKEN_ID` and `MODAL_TOKEN_SECRET` are set (or `~/.modal.toml` holds a token): two sandboxes
in the App `stampede-live-test` of the token's workspace, one command each, then cleanup by run label.
It costs a few cents of sandbox time. Both backends: V2 (the SDK default) and V1.
"""

from __future__ import annotations

import uuid

import pytest

from providers.base import SandboxSpec

pytestmark = pytest.mark.slow


def _has_modal_token() -> bool:
    try:
        from modal.config import config
    except ModuleNotFoundError:
        return False
    return bool(config.get("token_id") and config.get("token_secret"))


requires_token = pytest.mark.skipif(not _has_modal_token(), reason="no Modal token (MODAL_TOKEN_ID/MODAL_TOKEN_SECRET)")


@requires_token
@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["1", "0"])
async def test_real_modal_lifecycle_and_cleanup(backend: str) -> None:
    from providers.modal import ModalProvider

    provider = ModalProvider.from_options({"app_name": "stampede-live-test", "sandbox_v2": backend})
    run_id = f"live-{uuid.uuid4().hex[:10]}"
    try:
        await provider.preflight()
        ref = await provider.create(SandboxSpec(run_id=run_id, rollout_id="r1", lifetime_s=300))
        spare = await provider.create(SandboxSpec(run_id=run_id, rollout_id="r2", lifetime_s=300))
        await provider.wait_ready(ref, 300)
        result = await provider.exec(ref, ["sh", "-c", "echo out; echo err >&2; exit 3"], 60)
        assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
        await provider.terminate(ref)
        await provider.terminate(ref)
        owned = {r.sandbox_id for r in await provider.list_owned(run_id)}
        assert ref.sandbox_id not in owned and spare.sandbox_id in owned
    finally:
        reaped = await provider.cleanup(run_id)
        assert await provider.list_owned(run_id) == []
        await provider.aclose()
    assert reaped >= 1
