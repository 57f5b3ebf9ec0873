"""Credentials, ids and JWTs of the local Modal control plane.

The `modal` SDK authenticates every control-plane call with `x-modal-token-id`/`x-modal-token-secret`,
V2 sandbox calls also with a short-lived JWT from `AuthTokenGet` (`x-modal-auth-token`, its `exp` parsed
by the client to refresh it), and every command-router call with a per-task JWT
(`authorization: Bearer ...`, refreshed through `SandboxGetCommandRouterAccess` on UNAUTHENTICATED).
The JWTs here are real HS256 tokens signed with a key the server makes up at start, so a client that
sends a stale or foreign token is refused exactly where Modal would refuse it.

Ids follow Modal's shapes: V1 sandbox ids are `sb-` + 22 base62 characters (the SDK routes any other
shape to the V2 RPCs), V2 task ids end in `V`. They are derived from the simulator's own ids and the
seed, so the same run gives the same ids.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
DEFAULT_TOKEN_ID = "ak-stampede-local"
AUTH_TOKEN_TTL_S = 3600.0  # real seconds
ROUTER_TOKEN_TTL_S = 3600.0  # real seconds
_VERIFIED_CACHE = 100_000


def base62_id(prefix: str, material: str, length: int = 22, suffix: str = "") -> str:
    """`prefix-` + `length` base62 characters derived from `material` (deterministic)."""
    digest = int.from_bytes(hashlib.blake2b(material.encode(), digest_size=24).digest(), "big")
    chars = []
    for _ in range(length - len(suffix)):
        digest, rem = divmod(digest, 62)
        chars.append(BASE62[rem])
    return f"{prefix}-{''.join(chars)}{suffix}"


@dataclass(frozen=True, slots=True)
class Credentials:
    """The one token pair this control plane accepts (a Modal workspace's API token)."""

    token_id: str
    token_secret: str

    def accepts(self, token_id: str | None, token_secret: str | None) -> bool:
        if not token_id or not token_secret:
            return False
        return hmac.compare_digest(token_id, self.token_id) and hmac.compare_digest(token_secret, self.token_secret)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class JwtSigner:
    """HS256 JWTs with an `exp` claim (epoch seconds, real time)."""

    _HEADER = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)
        self._verified: dict[str, dict[str, Any]] = {}

    def mint(self, claims: Mapping[str, Any], ttl_s: float) -> str:
        body = {**claims, "exp": int(time.time() + ttl_s)}
        payload = _b64(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
        signing_input = f"{self._HEADER}.{payload}"
        signature = hmac.new(self._key, signing_input.encode(), hashlib.sha256).digest()
        return f"{signing_input}.{_b64(signature)}"

    def verify(self, token: str | None) -> dict[str, Any] | None:
        """The claims of a token we signed that has not expired, else None."""
        if not token:
            return None
        known = self._verified.get(token)
        if known is not None:  # a sandbox's calls reuse one token: check the signature once
            return known if float(known["exp"]) > time.time() else None
        claims = self._verify(token)
        if claims is not None:
            if len(self._verified) >= _VERIFIED_CACHE:
                self._verified.clear()
            self._verified[token] = claims
        return claims

    def _verify(self, token: str) -> dict[str, Any] | None:
        parts = token.split(".")
        if len(parts) != 3:
            return None
        signing_input = f"{parts[0]}.{parts[1]}"
        expected = hmac.new(self._key, signing_input.encode(), hashlib.sha256).digest()
        try:
            if not hmac.compare_digest(expected, _unb64(parts[2])):
                return None
            claims = json.loads(_unb64(parts[1]))
        except (ValueError, TypeError):
            return None
        if not isinstance(claims, dict) or not isinstance(claims.get("exp"), (int, float)):
            return None
        if float(claims["exp"]) <= time.time():
            return None
        return claims
