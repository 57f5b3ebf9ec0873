"""The `modal` provider against the real Modal, with the user's token. Skips without one.

Runs when `MODAL_TOKEN_ID` and `MODAL_TOKEN_SECRET` are set (or `~/.modal.toml` holds a token): two sandboxes
in the App `stampede-live-test` of the token's workspace, one command each, then cleanup by run label.
It costs a few cents of sandbox time. Both backends: V2 (the SDK default) and V1.
"""

from __future__ import annotations

import pytest

from tests.support.live_lifecycle import check_live_lifecycle

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
    from providers.vendors.modal.provider import ModalProvider

    provider = ModalProvider.from_options({"app_name": "stampede-live-test", "sandbox_v2": backend})
    await check_live_lifecycle(provider, 300, lifetime_s=300)
