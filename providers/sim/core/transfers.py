"""Uploads and downloads on the simulated clock: a file takes its size over the bandwidth it gets, and caps refuse.

Why: SWE-style rollouts upload a repository and download a diff, and vendors bound both (issue 30: 100 MiB a file in
one framework, Daytona's upload concurrency of 4; Runloop writes ~10 MB/s a connection). A front's files API asks
`VendorSimulator.transfer` before it answers: the file is one flow (`bandwidth.py`) in its sandbox's direction
(`[sandbox] upload_mb_s` / `download_mb_s` shared by that sandbox's files moving that way) and in the account's
`account_transfer_mb_s` (every sandbox's files, both ways). A file over `max_file_mib`, or one more than
`max_concurrent_transfers` in flight in one sandbox, is refused (`TransferRefused`: the front words the vendor's
error). With every bandwidth infinite (the default) a transfer takes no time and schedules nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable

from providers.sim.core.bandwidth import SharedBandwidth
from providers.sim.core.clock import SimClock
from providers.sim.core.profile import SandboxSpec

DIRECTIONS = ("upload", "download")
MB = 1e6  # bandwidth in MB/s (10^6 bytes), as vendors and networks quote it
MIB = float(1 << 20)  # a file cap in MiB, as vendors' docs give it


class TransferRefused(Exception):
    """The vendor refused a file: `reason` "file_too_large" or "too_many_transfers", `limit` the cap it hit."""

    def __init__(self, reason: str, message: str, limit: float) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.limit = limit


class Transfers:
    """One account's files in flight, by sandbox and direction."""

    def __init__(self, spec: SandboxSpec, clock: SimClock) -> None:
        self.spec = spec
        self.clock = clock
        per_direction = {"upload": spec.upload_mb_s, "download": spec.download_mb_s}
        self.links = SharedBandwidth(clock, spec.account_transfer_mb_s, lambda group: per_direction[_direction(group)])
        self.timed = any(math.isfinite(x) for x in (spec.upload_mb_s, spec.download_mb_s, spec.account_transfer_mb_s))
        self.in_flight: dict[str, int] = {}
        self._next = 0
        self.moved_bytes = {"upload": 0, "download": 0}
        self.refused = {"file_too_large": 0, "too_many_transfers": 0}

    def start(self, sandbox_id: str, direction: str, size_bytes: int, on_done: Callable[[float], None]) -> None:
        """Move one file; `on_done(seconds)` when it arrived (at once, synchronously, when nothing bounds it).
        Raises TransferRefused for a file over the cap or one transfer too many, ValueError for a bad call."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
        if size_bytes < 0:
            raise ValueError(f"size_bytes must be >= 0, got {size_bytes!r}")
        spec = self.spec
        if size_bytes > spec.max_file_mib * MIB:
            self.refused["file_too_large"] += 1
            mib = size_bytes / MIB
            message = f"file of {mib:.1f} MiB exceeds the {spec.max_file_mib:g} MiB limit"
            raise TransferRefused("file_too_large", message, spec.max_file_mib)
        busy = self.in_flight.get(sandbox_id, 0)
        if busy >= spec.max_concurrent_transfers:
            self.refused["too_many_transfers"] += 1
            message = (
                f"too many concurrent transfers for sandbox {sandbox_id} (limit {spec.max_concurrent_transfers:g})"
            )
            raise TransferRefused("too_many_transfers", message, spec.max_concurrent_transfers)
        self.moved_bytes[direction] += size_bytes
        if not self.timed or size_bytes == 0:
            on_done(0.0)
            return
        self.in_flight[sandbox_id] = busy + 1
        began = self.clock.now()
        name = self._next
        self._next += 1

        def arrived() -> None:
            left = self.in_flight.get(sandbox_id, 1) - 1
            if left > 0:
                self.in_flight[sandbox_id] = left
            else:
                self.in_flight.pop(sandbox_id, None)
            on_done(self.clock.now() - began)

        group: Hashable = (sandbox_id, direction)
        self.links.start(group, name, size_bytes / MB, arrived)

    def close(self) -> None:
        self.links.close()
        self.in_flight.clear()


def _direction(group: Hashable) -> str:
    assert isinstance(group, tuple)
    return str(group[1])
