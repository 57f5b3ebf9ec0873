"""Every connection or socket in flight is a file descriptor: thousands of rollouts need more than the usual
soft limit of 1024, so the processes that hold them lift it toward the hard limit."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import resource

log = logging.getLogger(__name__)

FDS_PER_ROLLOUT = 1  # measured 1.00 in an engine (the connection of the call in flight), and in the stub vendor
FD_RESERVE = 512  # a process's own: its sockets, shards, SDK imports, a connection pool at rest
UNBOUNDED_TARGET = 262144  # what to aim for when the caller names no need: 20,000 rollouts hold ~2 sockets each


def raise_open_files_limit(wanted: int | None = None) -> None:
    """Lift the soft RLIMIT_NOFILE to `wanted` (default: UNBOUNDED_TARGET), never lowering it. A hard limit
    below that is lifted too where the process may (root, CAP_SYS_RESOURCE; up to the kernel's nr_open);
    where it may not, the soft limit goes up to the hard one and things work up to there."""
    target = wanted if wanted is not None else UNBOUNDED_TARGET
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and hard < target:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, min(target, _kernel_cap())))
            except (ValueError, OSError):
                target = hard  # not permitted: as far as the hard limit goes
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            if hard != resource.RLIM_INFINITY:
                target = min(target, hard)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        log.debug("could not raise RLIMIT_NOFILE", exc_info=True)


def reachable_open_files() -> int:
    """The most open files a process started from this one can hold: what `raise_open_files_limit` reaches.

    A hard limit below the kernel's cap is lifted here when this process may (so its children inherit it);
    root in a container without CAP_SYS_RESOURCE may not, and then the hard limit is the answer (being root
    alone says nothing: this machine's root is held at 20,000)."""
    cap = _kernel_cap()
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard >= cap:
            return cap
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, cap))
        return cap
    except (ValueError, OSError):
        return int(resource.getrlimit(resource.RLIMIT_NOFILE)[1])


def processes_for_open_files(peak_in_flight: int | None, open_files: int | None = None) -> int:
    """How many processes it takes to hold one connection per rollout in flight under the per-process limit on
    open files (this machine's root is held at 20,000: one process cannot hold 20,000 rollouts)."""
    if not peak_in_flight:
        return 1
    limit = open_files if open_files is not None else reachable_open_files()
    return max(1, math.ceil(peak_in_flight * FDS_PER_ROLLOUT / max(1, limit - FD_RESERVE)))


def count_open_files(fd_dir: str = "/proc/self/fd") -> tuple[int, int]:
    """(open descriptors, sockets among them) of this process; (-1, -1) where /proc cannot tell."""
    total = sockets = 0
    try:
        with os.scandir(fd_dir) as entries:
            for entry in entries:
                total += 1
                with contextlib.suppress(OSError):  # closed between the listing and the readlink
                    if os.readlink(entry.path).startswith("socket:"):
                        sockets += 1
    except OSError:
        return -1, -1
    return max(0, total - 1), sockets  # less the descriptor the listing itself held


def open_files_soft_limit() -> int:
    """This process's soft RLIMIT_NOFILE, what it may open now; -1 when unlimited."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return -1 if soft == resource.RLIM_INFINITY else int(soft)


def _kernel_cap() -> int:
    try:
        with open("/proc/sys/fs/nr_open") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return 1048576
