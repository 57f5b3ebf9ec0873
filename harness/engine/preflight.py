"""`python -m harness.engine.preflight`: one provider's preflight in a plain asyncio interpreter, then exit.

The Locust side runs under gevent, which the vendors' asyncio clients are not built for, so a check made before any
load (`harness.locust.provider_check`) runs the adapter's `preflight` here, in a short child, as the engine would.
Reads one JSON line on stdin, `{"provider", "options", "secrets"}` (credentials never on a command line), and prints
one: `{"ok": true}`, or `{"error": "<one line, redacted>"}` for a refusal the user can fix.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from typing import Any

from harness.wire.redact import redact, secret_values, short_error
from providers import create_provider
from providers.base import ProviderConfigError, ProviderError


async def _preflight(provider: str, options: Mapping[str, Any]) -> None:
    adapter = create_provider(provider, options)
    try:
        await adapter.preflight()
    finally:
        await adapter.aclose()


def check(request: Mapping[str, Any]) -> dict[str, Any]:
    """The answer for one request: ok, or the error as the engine's `configure` would word it."""
    options = dict(request.get("options") or {})
    secrets = [*map(str, request.get("secrets") or ()), *secret_values(options)]
    try:
        asyncio.run(_preflight(str(request["provider"]), options))
    except (ProviderConfigError, ProviderError) as exc:
        return {"error": redact(str(exc), secrets)}
    except Exception as exc:  # a vendor client's own failure: still one line, never a traceback
        return {"error": short_error(exc, secrets)}
    return {"ok": True}


def main() -> int:
    print(json.dumps(check(json.loads(sys.stdin.readline() or "{}"))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
