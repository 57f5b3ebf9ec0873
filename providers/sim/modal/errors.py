"""The simulator's refusals and endings in Modal's words: gRPC statuses, messages and GenericResults.

What the `modal` SDK does with each (1.6.4, research providers.md section 1.5) is why they are chosen:

| simulator | gRPC status | SDK raises |
|---|---|---|
| create rate bucket empty | RESOURCE_EXHAUSTED "Sandbox creation rate limit exceeded (30/s)" + `RPCRetryPolicy` | `ResourceExhaustedError` (retried by the SDK unless `MODAL_MAX_THROTTLE_WAIT=0`) |
| account cap | RESOURCE_EXHAUSTED "Sandbox limit reached: N active sandboxes, ..." (no retry policy) | `ResourceExhaustedError` |
| no capacity | RESOURCE_EXHAUSTED "Insufficient capacity to create sandbox." | `ResourceExhaustedError` |
| injected transient create error | UNAVAILABLE | `ServiceError` after the SDK's 3 retries |
| invalid request | INVALID_ARGUMENT | `InvalidError` |
| command-router call on a task that ended | NOT_FOUND "Task ... is not running: <why>" (the SDK's own comments say the router answers NOT_FOUND for a task that shut down) | `NotFoundError` |
| V1 sandbox that ended before it was scheduled | `SandboxGetTaskId` answers `task_result` with the reason | `ConflictError(reason)`, e.g. "Runtime did not start within 299s" |

A sandbox's end state is a `GenericResult` (`SandboxWait`, `SandboxList`): TERMINATED by the user,
TIMEOUT at its lifetime, INIT_FAILURE when it never started (startup deadline, boot crash, image pull),
KERNEL_OOM_KILL when a command ran it out of memory, FAILURE when it crashed.
"""

from __future__ import annotations

from grpclib import GRPCError, Status
from modal_proto import api_pb2

from providers.sim.core.simulator import ErrorType, Rejected, RejectReason, SandboxStatus, SimSandbox

CAPACITY_MESSAGE = "Insufficient capacity to create sandbox."
_TRANSIENT_MESSAGES = (
    "Internal error while creating the sandbox, please retry",
    "Service temporarily unavailable",
)
_INIT_FAILURES = frozenset({ErrorType.PROVISIONING_TIMEOUT, ErrorType.BOOT_FAILED, ErrorType.IMAGE_PULL_FAILED})


def rejection_error(exc: Rejected, time_scale: float) -> GRPCError:
    """A refused create as the gRPC error Modal's control plane sends."""
    if exc.reason is RejectReason.RATE_LIMITED:
        real = max(0.1, (exc.retry_after or 0.0) * time_scale)
        policy = api_pb2.RPCRetryPolicy(retry_after_secs=round(real, 3))
        return GRPCError(Status.RESOURCE_EXHAUSTED, exc.message, [policy])
    if exc.reason is RejectReason.QUOTA_EXHAUSTED:
        return GRPCError(Status.RESOURCE_EXHAUSTED, exc.message)
    if exc.reason is RejectReason.CAPACITY:
        return GRPCError(Status.RESOURCE_EXHAUSTED, CAPACITY_MESSAGE)
    if exc.reason is RejectReason.INVALID:
        return GRPCError(Status.INVALID_ARGUMENT, exc.message)
    if exc.restore:  # a start from a snapshot image that failed: the SDK's InternalError, the fork's own failure
        return GRPCError(Status.INTERNAL, exc.message)
    return GRPCError(Status.UNAVAILABLE, _TRANSIENT_MESSAGES[(exc.attempt or 0) % len(_TRANSIENT_MESSAGES)])


def end_reason(sb: SimSandbox) -> str:
    """Why a sandbox is no longer running, in one line (Modal's wording where it is known)."""
    if sb.status is SandboxStatus.TERMINATED:
        return "Sandbox was terminated"
    if sb.error_message:
        return sb.error_message
    return f"Sandbox ended ({sb.status})"


def task_gone_error(task_id: str, sb: SimSandbox) -> GRPCError:
    """What the command router answers about a task whose sandbox ended."""
    return GRPCError(Status.NOT_FOUND, f"Task {task_id} is not running: {end_reason(sb)}")


def generic_result(sb: SimSandbox) -> api_pb2.GenericResult | None:
    """The end state of a sandbox, or None while it has not ended."""
    if sb.active:
        return None
    status = sb.status
    error = sb.error_type or ""
    if status is SandboxStatus.TERMINATED:
        return api_pb2.GenericResult(
            status=api_pb2.GenericResult.GENERIC_STATUS_TERMINATED, exception=end_reason(sb), exitcode=137
        )
    if status is SandboxStatus.TIMEOUT:
        return api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_TIMEOUT, exception=end_reason(sb))
    if error in _INIT_FAILURES or sb.running_at is None:
        return api_pb2.GenericResult(
            status=api_pb2.GenericResult.GENERIC_STATUS_INIT_FAILURE, exception=end_reason(sb), exitcode=1
        )
    if error == ErrorType.OOM_KILLED:
        return api_pb2.GenericResult(
            status=api_pb2.GenericResult.GENERIC_STATUS_KERNEL_OOM_KILL, exception=end_reason(sb), exitcode=137
        )
    return api_pb2.GenericResult(
        status=api_pb2.GenericResult.GENERIC_STATUS_FAILURE, exception=end_reason(sb), exitcode=1
    )
