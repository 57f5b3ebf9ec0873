"""A run's provider checked before any load: its adapter built from the run's options, a real endpoint's preflight.

`stampede run` (before Locust starts) and each test started from the web UI (before its shape starts) call
`check_provider`, so a missing key, an unknown option, an SDK version the adapter refuses, or an endpoint that is
unreachable or refuses the credentials is one line and no run: no run folder, `results/latest` untouched.

The adapter is built here with `Provider.from_options` (plain Python: the engine builds it the same way at
`configure`). Its `preflight` is asynchronous and this process runs under gevent, which the vendors' asyncio clients
are not built for, so it runs in a short child interpreter (`python -m harness.engine.preflight`), only against a
real endpoint: a simulated vendor started for the run (`--local`, the embedded stub) is ours and not up yet.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import gevent.subprocess

from harness.errors import UsageError
from harness.locust.settings import RunSettings
from harness.wire.redact import redact
from harness.wire.script_plan import ScriptPlan

PREFLIGHT_CHILD_TIMEOUT_S = 180.0
"""The child's whole budget: an interpreter, the adapter's SDK import and its preflight (30 s of its own by default)."""
PLACEHOLDER_URL = "http://127.0.0.1:1"
PLACEHOLDER_TOKEN = "placeholder-token"
"""The embedded vendor's address and token exist once it started; the options are checked with these meanwhile."""


def provider_options(settings: RunSettings) -> dict[str, Any]:
    """What the engine builds the adapter from: the provider options, with --base-url and --token."""
    options: dict[str, Any] = dict(settings.provider_options)
    if settings.base_url:
        options.setdefault("base_url", settings.base_url)
    if settings.token:
        options.setdefault("token", settings.token)
    return options


def check_provider(settings: RunSettings, *, endpoint: bool = True) -> None:
    """UsageError when this run's provider cannot start: its options, credentials, SDK, and (`endpoint`, for a real
    one) the endpoint itself."""
    from providers import provider_class
    from providers.base import ProviderConfigError

    options = provider_options(settings)
    if settings.embedded_vendor:
        options.setdefault("base_url", PLACEHOLDER_URL)
        options.setdefault("token", PLACEHOLDER_TOKEN)
    environ = dict(os.environ)  # an adapter may set its SDK's variables; the engine's own build sets them again
    try:
        provider = provider_class(settings.provider).from_options(options)
    except ProviderConfigError as exc:
        raise UsageError(str(exc)) from None
    finally:
        if os.environ != environ:
            os.environ.clear()
            os.environ.update(environ)
    if settings.plan.script is not None:  # a plan's steps the adapter lacks: refused before any load
        ScriptPlan.from_dict(settings.plan.script).check_capabilities(settings.provider, provider.capabilities())
    if endpoint and not settings.embedded_vendor:
        preflight(settings)


def preflight(settings: RunSettings) -> None:
    """The adapter's own preflight against the real endpoint, in a child interpreter; UsageError if it fails."""
    request = {
        "provider": settings.provider,
        "options": provider_options(settings),
        "secrets": [settings.token] if settings.token else [],
    }
    env = dict(os.environ)
    env.pop("LOCUST_SKIP_MONKEY_PATCH", None)
    env["PYTHONPATH"] = os.pathsep.join(  # this checkout, and the folder a user's own provider module is found in
        [str(Path(__file__).resolve().parents[2]), os.getcwd(), env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    try:
        child = gevent.subprocess.run(
            [sys.executable, "-m", "harness.engine.preflight"],
            input=json.dumps(request) + "\n",
            capture_output=True,
            text=True,
            env=env,
            timeout=PREFLIGHT_CHILD_TIMEOUT_S,
        )
    except gevent.subprocess.TimeoutExpired:
        raise UsageError(
            f"provider {settings.provider!r}: its preflight did not finish within {PREFLIGHT_CHILD_TIMEOUT_S:g}s"
        ) from None
    lines = child.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        answer = {}
    if answer.get("ok"):
        return
    if "error" in answer:
        raise UsageError(str(answer["error"]))
    last = redact((child.stderr.strip().splitlines() or ["no answer"])[-1], request["secrets"])
    raise UsageError(f"provider {settings.provider!r}: its preflight failed (exit {child.returncode}): {last}")
