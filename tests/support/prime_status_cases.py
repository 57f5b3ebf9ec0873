"""Prime's HTTP error answers and the kind each must be, in every phase: the `stub` and `prime` adapters both
classify these through `providers.vendors.prime.statuses`, so both test files walk this one table.

Each case is (status, body, phase, kind). `body` is what Prime (or our simulated Prime) answers; the `prime`
adapter sees only `HTTP <status>: <detail>` (the SDK drops `errorCode`), so every body's detail also carries
the meaning its code does, as Prime's own texts do.
"""

from __future__ import annotations

from typing import Any

from providers.base import FailureKind, Phase

PRIME_STATUS_CASES: list[tuple[int, dict[str, Any], Phase, FailureKind]] = [
    (401, {"detail": "Invalid API key"}, Phase.CREATE, FailureKind.AUTH),
    (401, {"detail": "Invalid or expired gateway token"}, Phase.EXEC, FailureKind.AUTH),
    (403, {"detail": "Forbidden"}, Phase.CREATE, FailureKind.AUTH),
    (403, {"detail": "Forbidden"}, Phase.READY, FailureKind.AUTH),
    (402, {"detail": "Payment required"}, Phase.CREATE, FailureKind.QUOTA_EXHAUSTED),
    (429, {"detail": "Too many requests", "errorCode": "RATE_LIMITED"}, Phase.CREATE, FailureKind.RATE_LIMITED),
    (
        429,
        {"detail": "Sandbox limit reached: 2 active", "errorCode": "SANDBOX_LIMIT_REACHED"},
        Phase.CREATE,
        FailureKind.QUOTA_EXHAUSTED,
    ),
    (
        503,
        {"detail": "Insufficient capacity to create sandbox", "errorCode": "INSUFFICIENT_CAPACITY"},
        Phase.CREATE,
        FailureKind.CAPACITY,
    ),
    (503, {"detail": "Service unavailable"}, Phase.CREATE, FailureKind.CREATE_ERROR),
    (500, {"detail": "Internal server error"}, Phase.CREATE, FailureKind.CREATE_ERROR),
    (502, {"detail": "Bad gateway"}, Phase.CREATE, FailureKind.CREATE_ERROR),
    (400, {"detail": "bad request"}, Phase.CREATE, FailureKind.INVALID_REQUEST),
    (422, {"detail": "validation error"}, Phase.CREATE, FailureKind.INVALID_REQUEST),
    (409, {"detail": "Conflict"}, Phase.CREATE, FailureKind.INVALID_REQUEST),
    (404, {"detail": "Not found"}, Phase.CREATE, FailureKind.CREATE_ERROR),
    (404, {"detail": "Sandbox not found"}, Phase.READY, FailureKind.DIED_BEFORE_READY),
    (500, {"detail": "Internal server error"}, Phase.READY, FailureKind.TRANSPORT),
    (408, {"detail": "Request timed out"}, Phase.READY, FailureKind.READY_TIMEOUT),
    (408, {"detail": "Command timed out after 5 seconds"}, Phase.EXEC, FailureKind.EXEC_TIMEOUT),
    (409, {"detail": "Sandbox is not running"}, Phase.EXEC, FailureKind.DIED_DURING_EXEC),
    (404, {"detail": "Sandbox not found"}, Phase.EXEC, FailureKind.DIED_DURING_EXEC),
    (
        502,
        {"error": "sandbox_not_found", "detail": "Sandbox not found: sb-1"},
        Phase.EXEC,
        FailureKind.DIED_DURING_EXEC,
    ),
    (502, {"detail": "Bad gateway"}, Phase.EXEC, FailureKind.EXEC_ERROR),
    (500, {"detail": "Internal server error"}, Phase.EXEC, FailureKind.EXEC_ERROR),
    (500, {"detail": "Internal server error"}, Phase.TERMINATE, FailureKind.TRANSPORT),
    (502, {"detail": "Bad gateway"}, Phase.TERMINATE, FailureKind.TRANSPORT),
    (503, {"detail": "Service unavailable"}, Phase.TERMINATE, FailureKind.TRANSPORT),
    (403, {"detail": "Forbidden"}, Phase.TERMINATE, FailureKind.AUTH),
    (429, {"detail": "Too many requests"}, Phase.TERMINATE, FailureKind.RATE_LIMITED),
]
