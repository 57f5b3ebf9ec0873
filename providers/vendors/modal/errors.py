"""The `modal` SDK's failures on the taxonomy: `modal.exception` classes, raw gRPC statuses and Modal's wording.

Kept apart from the adapter (`provider.py`), as `prime/errors.py` is from `prime/provider.py`: the adapter classifies with
`classify_modal`, and so do the tests of every answer the local control plane gives.
"""

from __future__ import annotations

import os
import re

import grpclib
import grpclib.exceptions
import modal.exception as mexc
from google.protobuf.message import DecodeError

from providers.base import FailureKind, Phase, ProviderError, classify_common, vendor_error_kind

_GRPCLIB_DIR = os.path.dirname(grpclib.__file__)

# Message patterns, checked against the SDK's exception text (Modal's wording where it is known).
_DID_NOT_START = re.compile(r"did not start within|not scheduled within", re.I)
_OOM = re.compile(r"out of memory|\boom(?:_killed)?\b|oom kill", re.I)
_IMAGE = re.compile(r"pull image|image pull|image_pull|image build|build failed", re.I)
_PULL = re.compile(r"pull image|image pull|image_pull", re.I)
_CAPACITY = re.compile(r"insufficient capacity|no capacity", re.I)
_RATE = re.compile(r"rate limit|creation rate|too many requests|throttl", re.I)
_QUOTA = re.compile(r"limit reached|concurrent|quota|maximum number of|max containers|allows \d", re.I)
_STEP_PHASES = (Phase.UPLOAD, Phase.DOWNLOAD, Phase.SNAPSHOT, Phase.FORK)
"""Steps whose own failure Modal answers INTERNAL (the SDK's InternalError): the step's error, not the transport's."""
_DEATH = re.compile(r"terminated|finished|not running|timed out|lifetime|shut down|crashed|killed|exited", re.I)


def classify_modal(exc: BaseException, phase: Phase | None = None) -> FailureKind:
    """`modal.exception` classes, raw gRPC statuses and Modal's messages onto the taxonomy."""
    if isinstance(exc, ProviderError):
        return exc.kind
    message = str(exc)
    if isinstance(exc, mexc.ResourceExhaustedError):
        if _CAPACITY.search(message):
            return FailureKind.CAPACITY
        if _RATE.search(message):
            return FailureKind.RATE_LIMITED
        if _QUOTA.search(message):
            return FailureKind.QUOTA_EXHAUSTED
        return FailureKind.RATE_LIMITED
    if isinstance(exc, (mexc.AuthError, mexc.PermissionDeniedError)):
        return FailureKind.AUTH
    if isinstance(exc, mexc.ImageBuildError):
        return FailureKind.IMAGE
    if isinstance(exc, mexc.ExecTimeoutError):
        return FailureKind.EXEC_TIMEOUT
    if isinstance(exc, mexc.SandboxFilesystemError) and phase in (Phase.UPLOAD, Phase.DOWNLOAD):
        return FailureKind.TRANSFER_ERROR  # the files API refused it (too large, too many at once)
    if isinstance(exc, (mexc.SandboxTimeoutError, mexc.SandboxTerminatedError)):
        return _ended(message, phase, died=True)
    if isinstance(exc, mexc.TimeoutError):
        if _DID_NOT_START.search(message) or phase in (Phase.READY, Phase.PULL, Phase.FORK):
            return FailureKind.READY_TIMEOUT
        if phase is Phase.EXEC:
            return FailureKind.EXEC_TIMEOUT
        if phase in (Phase.UPLOAD, Phase.DOWNLOAD, Phase.SNAPSHOT):
            return vendor_error_kind(phase)
        return FailureKind.TRANSPORT
    if isinstance(exc, mexc.ConflictError):  # e.g. V1 create: "Sandbox already finished" / the reason it ended
        return _ended(message, phase, died=False)
    if isinstance(exc, (mexc.NotFoundError, mexc.ExecutionError)):
        if phase is Phase.CREATE and _cause(message) is None:
            return FailureKind.CREATE_ERROR  # the App or image is missing: nothing was started
        return _ended(message, phase, died=False)
    if isinstance(exc, (mexc.InvalidError, mexc.AlreadyExistsError, mexc.UnimplementedError)):
        return FailureKind.INVALID_REQUEST
    if isinstance(exc, (mexc.InternalError, mexc.DataLossError)) and phase in _STEP_PHASES:
        return vendor_error_kind(phase)  # Modal failed the step itself (a snapshot, a restore, a file), not the wire
    if isinstance(
        exc,
        (mexc.ServiceError, mexc.InternalError, mexc.DataLossError, mexc.ConnectionError, mexc.ClientClosed),
    ):
        if _DID_NOT_START.search(message):
            return FailureKind.READY_TIMEOUT
        return FailureKind.TRANSPORT
    if isinstance(exc, grpclib.GRPCError):
        return _grpc_status(exc, phase)
    if isinstance(exc, (grpclib.exceptions.StreamTerminatedError, grpclib.exceptions.ProtocolError)):
        return FailureKind.TRANSPORT
    if isinstance(exc, DecodeError) or _unanswered_unary_call(exc):
        return FailureKind.TRANSPORT  # a reply the client could not decode, or a call that ended without one
    return classify_common(exc, phase)


def pull_failed(exc: BaseException) -> bool:
    """Modal said the image could not be pulled ("Failed to pull image ..."): a failure of the `pull` step."""
    return not isinstance(exc, ProviderError) and bool(_PULL.search(str(exc)))


def _unanswered_unary_call(exc: BaseException) -> bool:
    """grpclib's unary call asserts it got a reply: a server that sent OK trailers without one trips it."""
    if not isinstance(exc, AssertionError) or exc.__traceback__ is None:
        return False
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return os.path.dirname(tb.tb_frame.f_code.co_filename) == _GRPCLIB_DIR


def _cause(message: str) -> FailureKind | None:
    """A cause named in the message (Modal's startup deadline, an OOM kill, an image failure), if any."""
    if _DID_NOT_START.search(message):
        return FailureKind.READY_TIMEOUT
    if _OOM.search(message):
        return FailureKind.OOM
    if _IMAGE.search(message):
        return FailureKind.IMAGE
    return None


def _ended(message: str, phase: Phase | None, *, died: bool) -> FailureKind:
    """A sandbox (or command) that is gone: why, from the message; when, from the phase."""
    cause = _cause(message)
    if cause is not None:
        return cause
    if phase is Phase.EXEC:
        return FailureKind.DIED_DURING_EXEC if died or _DEATH.search(message) else FailureKind.EXEC_ERROR
    if phase in (Phase.UPLOAD, Phase.DOWNLOAD, Phase.SNAPSHOT):  # the sandbox had been usable
        return FailureKind.DIED_DURING_EXEC if died or _DEATH.search(message) else vendor_error_kind(phase)
    if phase is Phase.TERMINATE:
        return FailureKind.TRANSPORT
    return FailureKind.DIED_BEFORE_READY


def _grpc_status(exc: grpclib.GRPCError, phase: Phase | None) -> FailureKind:
    status = exc.status
    if status is grpclib.Status.RESOURCE_EXHAUSTED:
        return classify_modal(mexc.ResourceExhaustedError(exc.message or ""), phase)
    if status in (grpclib.Status.UNAUTHENTICATED, grpclib.Status.PERMISSION_DENIED):
        return FailureKind.AUTH
    if status in (
        grpclib.Status.INVALID_ARGUMENT,
        grpclib.Status.OUT_OF_RANGE,
        grpclib.Status.UNIMPLEMENTED,
        grpclib.Status.ALREADY_EXISTS,
    ):
        return FailureKind.INVALID_REQUEST
    if status in (grpclib.Status.NOT_FOUND, grpclib.Status.FAILED_PRECONDITION, grpclib.Status.ABORTED):
        return _ended(exc.message or "", phase, died=False)
    if status is grpclib.Status.DEADLINE_EXCEEDED and phase in (Phase.READY, Phase.EXEC):
        return FailureKind.READY_TIMEOUT if phase is Phase.READY else FailureKind.EXEC_TIMEOUT
    return FailureKind.TRANSPORT
