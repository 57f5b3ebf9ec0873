"""Every connection or socket in flight is a file descriptor: thousands of rollouts need more than the usual
soft limit of 1024, so the processes that hold them lift it toward the hard limit."""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

UNBOUNDED_TARGET = 65536  # what to aim for when the hard limit is unlimited and the caller names no need


def raise_open_files_limit(wanted: int | None = None) -> None:
    """Lift the soft RLIMIT_NOFILE to `wanted` (default: as high as allowed), never above the hard limit and
    never lowering it. Where that is not permitted, things still work up to the current limit."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY:
            target = wanted if wanted is not None else UNBOUNDED_TARGET
        else:
            target = hard if wanted is None else min(wanted, hard)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        log.debug("could not raise RLIMIT_NOFILE", exc_info=True)
