"""Uploads and downloads on the simulated clock: a file takes its size over the bandwidth it gets, and caps refuse.

Why: SWE-style rollouts upload a repository and download a diff, and vendors bound both (issue 30: 100 MiB a file in
one framework, Daytona's upload concurrency of 4; Runloop writes ~10 MB/s a connection). A front's files API asks
`VendorSimulator.transfer` before it answers: the file is one flow (`bandwidth.py`) in its sandbox's direction
(`[sandbox] upload_mb_s` / `download_mb_s` shared by that sandbox's files moving that way) and in the account's
`account_transfer_mb_s` (every sandbox's files, both ways). A file over `max_file_mib`, or one more than
`max_concurrent_transfers` in flight in one sandbox, is refused (`TransferRefused`: the front words the vendor's
error). With every bandwidth infinite (the default) a transfer takes no time and schedules nothing.

Failures (`[errors] upload_error_prob` / `download_error_prob`, a seeded draw per file and direction): the vendor
breaks the file part-way, as RL rollouts see a storage 5xx or a reset mid-transfer. A bounded transfer moves half the
file before it fails (the time a failed transfer still costs); an unbounded one fails at once. Either way it is a
`TransferRefused` with reason "transfer_failed", which every front answers as its vendor's server error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable

from providers.sim.core.bandwidth import SharedBandwidth
from providers.sim.core.clock import SimClock
from providers.sim.core.draws import Stream
from providers.sim.core.profile import Errors, SandboxSpec

DIRECTIONS = ("upload", "download")
MB = 1e6  # bandwidth in MB/s (10^6 bytes), as vendors and networks quote it
MIB = float(1 << 20)  # a file cap in MiB, as vendors' docs give it


REASONS = ("file_too_large", "too_many_transfers", "transfer_failed")
"""Why a file did not move: over the size cap, one transfer too many, or the vendor failed it part-way (a front maps
each to its vendor's answer: a 413, a 503 and a 500 on the REST fronts)."""


class TransferRefused(Exception):
    """The vendor refused or failed a file: `reason` one of REASONS, `limit` the cap it hit (the failure's
    probability for "transfer_failed")."""

    def __init__(self, reason: str, message: str, limit: float) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.limit = limit


class Transfers:
    """One account's files in flight, by sandbox and direction."""

    def __init__(self, spec: SandboxSpec, clock: SimClock, errors: Errors | None = None, seed: int = 0) -> None:
        """`errors`: the profile's injected failures (a file broken part-way); None: none."""
        self.spec = spec
        self.clock = clock
        self.seed = seed
        self.fail_prob = {"upload": 0.0, "download": 0.0}
        if errors is not None:
            self.fail_prob = {"upload": errors.upload_error_prob, "download": errors.download_error_prob}
        self._drawn = {"upload": 0, "download": 0}
        self.failed = {"upload": 0, "download": 0}
        per_direction = {"upload": spec.upload_mb_s, "download": spec.download_mb_s}
        self.links = SharedBandwidth(clock, spec.account_transfer_mb_s, lambda group: per_direction[_direction(group)])
        self.timed = any(math.isfinite(x) for x in (spec.upload_mb_s, spec.download_mb_s, spec.account_transfer_mb_s))
        self.in_flight: dict[str, int] = {}
        self._next = 0
        self.moved_bytes = {"upload": 0, "download": 0}
        self.refused = {"file_too_large": 0, "too_many_transfers": 0}

    def start(
        self,
        sandbox_id: str,
        direction: str,
        size_bytes: int,
        on_done: Callable[[float], None],
        on_failed: Callable[[TransferRefused], None] | None = None,
    ) -> None:
        """Move one file; `on_done(seconds)` when it arrived (at once, synchronously, when nothing bounds it).
        Raises TransferRefused for a file over the cap or one transfer too many, ValueError for a bad call. A file
        the vendor fails part-way calls `on_failed` after half its time (raised at once when nothing bounds it, or
        no `on_failed` is given)."""
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
        k = self._drawn[direction]
        self._drawn[direction] += 1
        p = self.fail_prob[direction]
        failure = None
        if Stream(self.seed, "transfer_fault", direction, k).chance(p):
            self.failed[direction] += 1
            message = f"{direction} of {size_bytes} bytes failed part-way: internal storage error, try again"
            failure = TransferRefused("transfer_failed", message, p)
            if not self.timed or size_bytes == 0 or on_failed is None:
                raise failure
        moved = size_bytes if failure is None else size_bytes // 2
        self.moved_bytes[direction] += moved
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
            if failure is not None and on_failed is not None:
                on_failed(failure)
            else:
                on_done(self.clock.now() - began)

        group: Hashable = (sandbox_id, direction)
        self.links.start(group, name, max(moved, 1) / MB, arrived)

    def close(self) -> None:
        self.links.close()
        self.in_flight.clear()


def _direction(group: Hashable) -> str:
    assert isinstance(group, tuple)
    return str(group[1])
