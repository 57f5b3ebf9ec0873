"""Every exception daytona 0.226.1 raises, onto the failure taxonomy, for the `daytona` adapter (`provider.py`):
the SDK's error classes first, then the HTTP status and Daytona's own wording (a quota, no runner, a snapshot it
cannot find, a sandbox stopped under a command). docs/vendors.md's Daytona section is the table."""

from __future__ import annotations

import aiohttp

# The SDK's plain modules only (as provider.py: `daytona._async` cannot be imported under gevent).
from daytona.common.errors import (
    DaytonaAuthenticationError,
    DaytonaBadRequestError,
    DaytonaConflictError,
    DaytonaConnectionError,
    DaytonaConnectionTimeoutError,
    DaytonaError,
    DaytonaForbiddenError,
    DaytonaGoneError,
    DaytonaNotFoundError,
    DaytonaProcessExecutionTimeoutError,
    DaytonaQueueTimeoutError,
    DaytonaRateLimitError,
    DaytonaSpotEvictedError,
    DaytonaTimeoutError,
    DaytonaUnprocessableEntityError,
)

from providers.base import FailureKind, Phase, ProviderError, classify_common, gone_kind, vendor_error_kind

_QUOTA_TEXTS = ("Total CPU limit exceeded", "Total memory limit exceeded", "Total disk limit exceeded")


def classify_daytona(exc: BaseException, phase: Phase | None) -> FailureKind:
    """Every exception daytona 0.226.1 raises, onto the taxonomy (docs/vendors.md, Daytona)."""
    if isinstance(exc, ProviderError):
        return exc.kind
    if isinstance(exc, DaytonaError):
        return _daytona_error(exc, phase)
    if isinstance(exc, aiohttp.ServerTimeoutError):  # outside the SDK's own wrapping (it never reached it)
        return classify_common(TimeoutError(), phase)
    if isinstance(exc, aiohttp.ClientError):
        return FailureKind.TRANSPORT
    return classify_common(exc, phase)


def _daytona_error(exc: DaytonaError, phase: Phase | None) -> FailureKind:
    message = exc.message or str(exc)
    status = exc.status_code
    if isinstance(exc, DaytonaRateLimitError):
        return FailureKind.RATE_LIMITED
    if isinstance(exc, DaytonaQueueTimeoutError):
        return FailureKind.CAPACITY  # destroyed after waiting longer than its queue timeout for a runner
    if isinstance(exc, DaytonaProcessExecutionTimeoutError):
        return FailureKind.READY_TIMEOUT if phase is Phase.READY else FailureKind.EXEC_TIMEOUT
    if isinstance(exc, (DaytonaConnectionTimeoutError, DaytonaTimeoutError)) and status in (None, 408):
        return classify_common(TimeoutError(), phase)  # the SDK's own deadline, or the transport's
    if isinstance(exc, DaytonaConnectionError):
        return FailureKind.TRANSPORT
    if isinstance(exc, DaytonaSpotEvictedError):
        return gone_kind(phase)
    if isinstance(exc, DaytonaAuthenticationError):
        return FailureKind.AUTH
    if isinstance(exc, DaytonaForbiddenError):
        if any(quota in message for quota in _QUOTA_TEXTS):
            return FailureKind.QUOTA_EXHAUSTED  # the organization's vCPU / memory / disk pool
        if "exceeds maximum allowed per sandbox" in message:
            return FailureKind.INVALID_REQUEST
        return FailureKind.AUTH
    if isinstance(exc, DaytonaBadRequestError):
        if "No available runners" in message:
            return FailureKind.CAPACITY
        if "Snapshot" in message and ("not found" in message or " is " in message):
            return FailureKind.IMAGE
        return FailureKind.INVALID_REQUEST if phase in (None, Phase.CREATE) else vendor_error_kind(phase)
    if isinstance(exc, DaytonaUnprocessableEntityError):
        return FailureKind.INVALID_REQUEST
    if isinstance(exc, DaytonaNotFoundError):
        if phase in (None, Phase.CREATE):
            return FailureKind.IMAGE if "napshot" in message else FailureKind.INVALID_REQUEST
        return gone_kind(phase)
    if isinstance(exc, DaytonaConflictError):
        if phase is Phase.EXEC and "state: error" in message:
            return FailureKind.DIED_DURING_EXEC
        return FailureKind.INVALID_REQUEST if phase in (None, Phase.CREATE) else vendor_error_kind(phase)
    if isinstance(exc, DaytonaGoneError):
        return FailureKind.EXEC_ERROR if phase is Phase.EXEC else gone_kind(phase)
    if status is not None:
        return _status_error(status, message, phase)
    return _sdk_error(exc, message, phase)


def _status_error(status: int, message: str, phase: Phase | None) -> FailureKind:
    """A 5xx (or another status without a class of its own)."""
    if phase is Phase.EXEC and status == 502:
        if "OOM" in message:
            return FailureKind.OOM
        if "stopped during the command" in message or "no longer running" in message:
            return FailureKind.DIED_DURING_EXEC
        return FailureKind.EXEC_ERROR
    if status == 504:
        return classify_common(TimeoutError(), phase)
    return vendor_error_kind(phase)


def _sdk_error(exc: DaytonaError, message: str, phase: Phase | None) -> FailureKind:
    """An error the SDK raised itself, with no HTTP status: a state it refused, or its own trouble."""
    if "entered error state" in message:  # the readiness wait saw `error` / `build_failed`
        if "build_failed" in message or "BUILD_FAILED" in message or "pull" in message.lower():
            return FailureKind.IMAGE
        if "did not start within" in message or "timed out" in message:
            return FailureKind.READY_TIMEOUT
        return FailureKind.DIED_BEFORE_READY if phase is not Phase.EXEC else FailureKind.DIED_DURING_EXEC
    if "was destroyed" in message or "is destroyed" in message:
        return gone_kind(phase)
    if "client is closed" in message:
        return FailureKind.HARNESS  # the provider was closed under a rollout still running: ours
    cause = exc.__cause__
    if isinstance(cause, (aiohttp.ClientError, OSError)):
        return FailureKind.TRANSPORT
    return vendor_error_kind(phase)
