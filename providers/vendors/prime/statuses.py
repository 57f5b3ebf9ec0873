"""Prime's HTTP error answers onto the failure taxonomy: the one mapping the `stub` and `prime` adapters share.

Both adapters speak Prime's API (the `stub` one directly over aiohttp, the `prime` one through Prime's SDK,
whose `APIError("HTTP <status>: <detail>")` keeps the status and detail but not the body's `errorCode`), so
a status means the same thing to both. Prime's semantics (and our simulated Prime's, providers/sim/prime):

- 401 (bad or expired key / gateway token) and 403 (a key without the sandbox scope, a team it may not use)
  are `auth`; 402 (payment required: billing) is `quota_exhausted`: the account, not the request.
- 429 is `rate_limited` (`RATE_LIMITED`, with Retry-After) unless it is the concurrent-sandbox cap
  (`SANDBOX_LIMIT_REACHED`, "Sandbox limit reached"): `quota_exhausted`.
- 503 `INSUFFICIENT_CAPACITY` ("Insufficient capacity") is `capacity`; any other 5xx is the phase's vendor error.
- 400 and 422 (the request's shape) are `invalid_request`; so is a control-plane 409 (a conflict). On the
  exec gateway 409 means "Sandbox is not running" and 502 `sandbox_not_found` "gone": `died_during_exec`.
- 404 while waiting or executing: the sandbox is gone (`died_before_ready` / `died_during_exec`).
- 408 is a timeout answer: what a timeout is in that phase (`exec_timeout`, `ready_timeout`, else `transport`).
- Otherwise by phase: `create_error` on create, `exec_error` on exec, `transport` while waiting (the status
  API failing is not the sandbox failing) and on terminate (the vendor call failed; the sandbox may live).

This module imports only `providers.base`, so both adapters may import it without importing each other.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from typing import Any

from providers.base import FailureKind, Phase, ProviderError, classify_common, gone_kind, vendor_error_kind

SANDBOX_LIMIT_CODE = "SANDBOX_LIMIT_REACHED"
CAPACITY_CODE = "INSUFFICIENT_CAPACITY"
SANDBOX_NOT_FOUND = "sandbox_not_found"

# Prime's detail texts, for when only the text is known (the SDK drops the body's errorCode).
_QUOTA = re.compile(r"limit reached|SANDBOX_LIMIT|quota|concurren", re.I)
_CAPACITY = re.compile(r"capacity", re.I)
_NOT_FOUND = re.compile(r"not found", re.I)


def status_kind(status: int, phase: Phase | None, detail: str = "", error_code: str | None = None) -> FailureKind:
    """The kind of an HTTP error answer `status` of Prime's API (control plane or gateway) in `phase`.

    `detail` is the answer's text, `error_code` its `errorCode` (or gateway `error`) when the caller has it.
    """
    if status in (401, 403):
        return FailureKind.AUTH
    if status == 402:
        return FailureKind.QUOTA_EXHAUSTED
    if status == 429:
        quota = error_code == SANDBOX_LIMIT_CODE or bool(_QUOTA.search(detail))
        return FailureKind.QUOTA_EXHAUSTED if quota else FailureKind.RATE_LIMITED
    if status == 503 and (error_code == CAPACITY_CODE or _CAPACITY.search(detail)):
        return FailureKind.CAPACITY
    if status == 408:
        return classify_common(TimeoutError(), phase)
    if phase is Phase.EXEC and (
        status in (404, 409) or (status == 502 and (error_code == SANDBOX_NOT_FOUND or _NOT_FOUND.search(detail)))
    ):
        return FailureKind.DIED_DURING_EXEC
    if status == 404 and phase in (Phase.UPLOAD, Phase.DOWNLOAD, Phase.SNAPSHOT):
        return gone_kind(phase)  # the sandbox is gone (a missing file is the adapter's FileNotFoundError first)
    if status in (400, 409, 422):
        return FailureKind.INVALID_REQUEST
    if status == 404 and phase is Phase.READY:
        return FailureKind.DIED_BEFORE_READY
    return _by_phase(phase)


def _by_phase(phase: Phase | None) -> FailureKind:
    """An error status with no more specific meaning, by phase (no phase: as on create; a 413 on an upload, a
    5xx on a download: `transfer_error`)."""
    if phase in (Phase.READY, Phase.TERMINATE):
        return FailureKind.TRANSPORT
    if phase in (None, Phase.CREATE):
        return FailureKind.CREATE_ERROR
    return vendor_error_kind(phase)


def body_detail(body: Any) -> tuple[str, str | None]:
    """An error body's text and code: `detail` (FastAPI's) and `errorCode` (or the gateway's `error`)."""
    if not isinstance(body, Mapping):
        return str(body)[:200], None
    detail = body.get("detail")
    text = detail if isinstance(detail, str) else (str(detail) if detail is not None else str(body)[:200])
    code = body.get("errorCode") or body.get("error")
    return text, str(code) if code is not None else None


def retry_after_of(headers: Mapping[str, str], body: Any = None) -> float | None:
    """Seconds the server asked us to wait: the Retry-After header, else the body's `retryAfter`."""
    raw: Any = headers.get("Retry-After")
    if raw is None and isinstance(body, Mapping):
        raw = body.get("retryAfter")
    with contextlib.suppress(TypeError, ValueError):
        return float(raw)
    return None


def error_from_response(status: int, body: Any, phase: Phase | None, retry_after: float | None = None) -> ProviderError:
    """An HTTP error answer of Prime's API as a classified error (`HTTP <status>: <detail>`, as the SDK words it)."""
    text, code = body_detail(body)
    return ProviderError(status_kind(status, phase, text, code), f"HTTP {status}: {text}", retry_after=retry_after)
