"""The local Modal's JWTs and ids, checked against what the pinned SDK itself parses."""

from __future__ import annotations

from modal._utils.auth_token_manager import _AuthTokenManager
from modal.sandbox._common import _is_v1_sandbox_id
from modal.sandbox._task_command_router_client import _is_v2_task_id, _parse_jwt_expiration

from providers.sim.modal.tokens import Credentials, JwtSigner, base62_id


def test_jwts_verify_expire_and_resist_tampering() -> None:
    signer = JwtSigner()
    token = signer.mint({"task_id": "ta-1"}, 60)
    claims = signer.verify(token)
    assert claims is not None and claims["task_id"] == "ta-1"
    assert signer.verify(token) == claims  # cached answer, same claims
    assert signer.verify(signer.mint({"task_id": "ta-1"}, -1)) is None
    head, payload, signature = token.split(".")
    assert signer.verify(f"{head}.{payload}.{signature[:-2]}AA") is None
    assert JwtSigner().verify(token) is None  # another server's key
    assert signer.verify("not-a-jwt") is None and signer.verify(None) is None


def test_the_sdk_reads_our_jwt_expiry() -> None:
    token = JwtSigner().mint({"sub": "x"}, 600)
    expiry = _parse_jwt_expiration(token)
    assert expiry is not None and expiry > 0
    assert _AuthTokenManager._decode_jwt(token)["exp"] == int(expiry)


def test_ids_have_the_shapes_the_sdk_routes_on() -> None:
    v1 = base62_id("sb", "a:v1", 22)
    v2 = base62_id("sb", "a:v2", 26)
    assert _is_v1_sandbox_id(v1) and not _is_v1_sandbox_id(v2)
    assert _is_v2_task_id(base62_id("ta", "a", 22, suffix="V"))
    assert base62_id("sb", "a:v1", 22) == v1  # deterministic


def test_credentials_need_both_halves() -> None:
    creds = Credentials("ak-1", "as-1")
    assert creds.accepts("ak-1", "as-1")
    assert not creds.accepts("ak-1", "as-2") and not creds.accepts(None, "as-1") and not creds.accepts("ak-2", "as-1")
