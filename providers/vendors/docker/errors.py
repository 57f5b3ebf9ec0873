"""The Docker daemon's answers on the failure taxonomy, for the `docker` adapter (`provider.py`).

A daemon error is an HTTP status and a message; which kind it is depends on the phase it came in (a 404 on create
is a missing image, on start a container removed underfoot, on exec a dead sandbox). `daemon_errors` wraps one
daemon call so its timeout, the daemon's answer or no answer at all each raise one `ProviderError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import aiohttp
from aiodocker.exceptions import DockerError

from providers.base import FailureKind, Phase, ProviderError

TRANSPORT_STATUS = 900  # aiodocker's status for "could not connect to the daemon"


def docker_error_kind(exc: DockerError, phase: Phase | None) -> FailureKind:
    """Map a daemon answer (HTTP status + message) in a phase onto the taxonomy."""
    status, message = exc.status, (exc.message or "").lower()
    if status == TRANSPORT_STATUS:
        return FailureKind.TRANSPORT
    if status in (401, 403):
        return FailureKind.AUTH
    if status == 429:
        return FailureKind.RATE_LIMITED
    if phase is Phase.CREATE or phase is None:
        if status == 404 and "image" in message:
            return FailureKind.IMAGE
        if status == 400 or (status == 404 and "network" in message):
            return FailureKind.INVALID_REQUEST
        if "no space left" in message:
            return FailureKind.CAPACITY
        return FailureKind.CREATE_ERROR  # conflicts (name in use), 5xx
    if phase is Phase.READY:
        if status in (404, 409):
            return FailureKind.DIED_BEFORE_READY  # removed, or marked for removal, under our feet
        if status == 400:
            return FailureKind.INVALID_REQUEST  # e.g. the command is not in the image
        return FailureKind.CREATE_ERROR  # the runtime could not create the container's process
    if phase is Phase.EXEC:
        if status == 404 or "not running" in message:
            return FailureKind.DIED_DURING_EXEC
        return FailureKind.EXEC_ERROR
    return FailureKind.UNKNOWN  # terminate: a 5xx after retries (the taxonomy has no terminate kind)


def container_death(state: Mapping[str, Any], phase: Phase, *, memory_mb: int, ran_a_command: bool) -> ProviderError:
    """The container is gone or stopped: OOM, or died before/after it ever ran a command."""
    status = state.get("Status", "removed")
    code = state.get("ExitCode")
    if state.get("OOMKilled"):
        return ProviderError(FailureKind.OOM, f"container killed by the OOM killer (memory limit {memory_mb} MB)")
    detail = f"container {status}" + (f" with code {code}" if status in {"exited", "dead"} else "")
    if state.get("Error"):
        detail += f": {str(state['Error'])[:200]}"
    if phase is Phase.READY or not ran_a_command:
        return ProviderError(FailureKind.DIED_BEFORE_READY, f"{detail} before it was usable")
    return ProviderError(FailureKind.DIED_DURING_EXEC, f"{detail} during exec")


@contextlib.contextmanager
def daemon_errors(verb: str, phase: Phase | None, timeout_kind: FailureKind, timed_out: str) -> Iterator[None]:
    """A daemon call's failures on the taxonomy: its own timeout, the daemon's answer, or no answer at all."""
    try:
        yield
    except TimeoutError:  # before OSError, of which it is a subclass
        raise ProviderError(timeout_kind, timed_out) from None
    except DockerError as exc:
        raise ProviderError(docker_error_kind(exc, phase), f"{verb}: {short_error(exc)}") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise ProviderError(FailureKind.TRANSPORT, f"{verb}: {short_error(exc)}") from None


def short_error(exc: BaseException) -> str:
    text = exc.message if isinstance(exc, DockerError) else (str(exc) or type(exc).__name__)
    text = " ".join(str(text).split())
    return text if len(text) <= 300 else text[:297] + "..."
