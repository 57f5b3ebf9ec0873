"""Every exception prime-sandboxes 0.5.1 raises, onto the failure taxonomy, for the `prime` adapter (`provider.py`).

The SDK hides most of what happened in its exceptions' text and their `raise ... from` chain: a control-plane
answer is `APIError("HTTP <status>: <detail>")`, a gateway answer `APIError("Connect RPC failed (<code>): ...")`,
and a transport failure an `APIError` whose cause is httpx's or pyqwest's. Each is read back here, by phase, so a
dead sandbox, a throttled call and a lost answer stay apart.
"""

from __future__ import annotations

import re

import httpx
import pydantic
import pyqwest
from connectrpc.code import Code as ConnectCode
from connectrpc.errors import ConnectError
from prime_sandboxes import (
    APIError,
    APITimeoutError,
    CommandTimeoutError,
    PaymentRequiredError,
    SandboxImagePullError,
    SandboxNotRunningError,
    SandboxOOMError,
    SandboxTimeoutError,
    UnauthorizedError,
)

from providers.base import FailureKind, Phase, ProviderError, classify_common, gone_kind, vendor_error_kind
from providers.vendors.prime.statuses import status_kind

# The SDK's error texts (0.5.1): `APIError("HTTP <status>: <detail>")` from the control plane,
# `APIError("Connect RPC failed (<code>): <message>")` from the gateway.
_HTTP = re.compile(r"^HTTP (\d{3}): (.*)$", re.S)
_CONNECT = re.compile(r"^Connect RPC failed \((\w+)\): (.*)$", re.S)
_GATEWAY_TROUBLE = frozenset({ConnectCode.UNKNOWN.value, ConnectCode.UNAVAILABLE.value, ConnectCode.INTERNAL.value})
_THROTTLED = re.compile(r"too many requests|rate limit", re.I)
_UNREADABLE_CONNECT = re.compile(r"invalid content-type|protocol error|invalid message|unexpected EOF", re.I)
_READY_TIMEOUT_TYPES = frozenset({"PROVISIONING_TIMEOUT", "GATEWAY_REACHABILITY_TIMEOUT"})
TRANSPORT_ERRORS = (
    httpx.TransportError,
    pyqwest.ReadError,
    pyqwest.WriteError,
    pyqwest.RemoteProtocolError,
    OSError,
    EOFError,
)


def classify_prime(exc: BaseException, phase: Phase | None) -> FailureKind:
    """Every exception prime-sandboxes 0.5.1 raises, onto the taxonomy (docs/vendors.md)."""
    if isinstance(exc, ProviderError):
        return exc.kind
    if isinstance(exc, UnauthorizedError):
        return FailureKind.AUTH
    if isinstance(exc, PaymentRequiredError):
        return FailureKind.QUOTA_EXHAUSTED
    if isinstance(exc, SandboxOOMError):
        return FailureKind.OOM
    if isinstance(exc, SandboxImagePullError):
        return FailureKind.IMAGE
    if isinstance(exc, CommandTimeoutError):
        return FailureKind.READY_TIMEOUT if phase is Phase.READY else FailureKind.EXEC_TIMEOUT
    if isinstance(exc, SandboxTimeoutError):  # the sandbox's lifetime ran out
        return gone_kind(phase)
    if isinstance(exc, SandboxNotRunningError):
        return _not_running(exc, phase)
    if isinstance(exc, APITimeoutError):
        return classify_common(TimeoutError(), phase)
    if isinstance(exc, APIError):
        return _api_error(exc, phase)
    if isinstance(exc, ConnectError):
        return _connect_code(exc.code.value, exc, phase)
    if isinstance(exc, pyqwest.ConnectTimeout):
        return FailureKind.TRANSPORT
    if isinstance(exc, (httpx.TimeoutException, TimeoutError)):  # TimeoutError is an OSError: first
        return classify_common(TimeoutError(), phase)
    if isinstance(exc, TRANSPORT_ERRORS):
        return FailureKind.TRANSPORT
    if type(exc).__name__ == "_BatcherClosedError":
        return FailureKind.HARNESS  # the client was closed under a rollout still running: ours
    if isinstance(exc, pydantic.ValidationError):
        return vendor_error_kind(phase)  # the API answered something the SDK's models cannot read
    if isinstance(exc, ValueError):  # not JSON at all (garbage, cut short, an HTML page): the answer was lost
        return FailureKind.TRANSPORT if phase in (Phase.READY, Phase.TERMINATE) else vendor_error_kind(phase)
    return classify_common(exc, phase)


def image_pull_failed(exc: BaseException) -> bool:
    """Prime said the image could not be pulled (its own error class, or the sandbox's `IMAGE_PULL_FAILED`): a
    failure of the `pull` step inside readiness."""
    if isinstance(exc, SandboxImagePullError):
        return True
    return isinstance(exc, SandboxNotRunningError) and (exc.error_type or "") == "IMAGE_PULL_FAILED"


def _not_running(exc: SandboxNotRunningError, phase: Phase | None) -> FailureKind:
    error_type = exc.error_type or ""
    message = str(exc)
    if error_type in _READY_TIMEOUT_TYPES or "did not reach RUNNING" in message or "image build" in message:
        return FailureKind.READY_TIMEOUT
    if error_type == "OOM_KILLED":
        return FailureKind.OOM
    if error_type == "IMAGE_PULL_FAILED":
        return FailureKind.IMAGE
    return gone_kind(phase)


def _api_error(exc: APIError, phase: Phase | None) -> FailureKind:
    message = str(exc)
    if any(isinstance(cause, TRANSPORT_ERRORS) for cause in _causes(exc)) or message.startswith("Request failed"):
        return FailureKind.TRANSPORT  # httpx / pyqwest never got an answer
    if match := _HTTP.match(message):
        return status_kind(int(match.group(1)), phase, match.group(2))
    if match := _CONNECT.match(message):
        cause = exc.__cause__
        if (
            isinstance(cause, ConnectError)
            and cause.__cause__ is not None
            and not isinstance(cause.__cause__, ConnectError)
        ):
            return FailureKind.TRANSPORT  # minted client-side from a transport failure, not sent by the gateway
        if _UNREADABLE_CONNECT.search(match.group(2)):  # minted client-side: the gateway's answer was not Connect
            return FailureKind.EXEC_ERROR if phase is Phase.EXEC else FailureKind.TRANSPORT
        return _connect_code(match.group(1), exc, phase)
    if "status lookup failed" in message:  # a batch-status error item: NOT_FOUND, FORBIDDEN, MANAGED
        return FailureKind.AUTH if "FORBIDDEN" in message else gone_kind(phase)
    if "is being deleted" in message:
        return FailureKind.HARNESS  # our own terminate raced our own call on the same sandbox
    return vendor_error_kind(phase)


def _connect_code(code: str, exc: BaseException, phase: Phase | None) -> FailureKind:
    if code in (ConnectCode.UNAUTHENTICATED.value, ConnectCode.PERMISSION_DENIED.value):
        return FailureKind.AUTH
    if code == ConnectCode.UNAVAILABLE.value and _THROTTLED.search(str(exc)):
        # The Connect client maps a gateway's HTTP 429 onto `unavailable` with the status's phrase as the message
        # (connectrpc's from_http_status): the vendor's rate limit, not the command or the sandbox failing.
        return FailureKind.RATE_LIMITED
    if code == ConnectCode.CANCELED.value:
        return FailureKind.TRANSPORT  # not ours (that is re-raised as CancelledError): a stream the far end reset
    if code == ConnectCode.RESOURCE_EXHAUSTED.value:
        return FailureKind.RATE_LIMITED
    if code == ConnectCode.DEADLINE_EXCEEDED.value:
        return classify_common(TimeoutError(), phase)
    if code == ConnectCode.NOT_FOUND.value:
        return gone_kind(phase)
    if code in (ConnectCode.INVALID_ARGUMENT.value, ConnectCode.UNIMPLEMENTED.value, ConnectCode.OUT_OF_RANGE.value):
        return FailureKind.INVALID_REQUEST
    if phase is Phase.TERMINATE:
        return FailureKind.TRANSPORT
    if phase is Phase.READY and code in _GATEWAY_TROUBLE:
        return FailureKind.TRANSPORT  # the readiness probe's gateway failed (a 5xx, a proxy): not the sandbox dying
    return FailureKind.EXEC_ERROR if phase is Phase.EXEC else vendor_error_kind(phase)


def _causes(exc: BaseException) -> list[BaseException]:
    """The explicit `raise ... from` chain (what the SDK wraps), not incidental contexts."""
    chain: list[BaseException] = []
    current = exc.__cause__
    while current is not None and current not in chain and len(chain) < 8:
        chain.append(current)
        current = current.__cause__
    return chain
