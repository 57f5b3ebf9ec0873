"""Every connection or socket in flight is a file descriptor: thousands of rollouts need more than the usual
soft limit of 1024, so the processes that hold them lift it toward the hard limit."""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

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


def _kernel_cap() -> int:
    try:
        with open("/proc/sys/fs/nr_open") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return 1048576
