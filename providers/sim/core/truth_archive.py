"""The truth rows of sandboxes the simulator has forgotten, kept on disk so a long soak's memory stays flat.

A vendor forgets a sandbox some time after it ended; the run still wants the vendor's own record of it
(the run folder's `truth/` table is written from `VendorSimulator.truth()` when the run ends). So the simulator
moves a pruned sandbox's truth row here: rows wait in a small buffer and go to an anonymous temporary file (deleted
by the OS when closed, even after a crash) as JSON lines; `rows()` reads them all back.
"""

from __future__ import annotations

import json
import tempfile
from collections import deque
from collections.abc import Callable
from typing import IO, Any

from providers.sim.core.records import SimSandbox

FLUSH_EVERY = 512  # rows held in memory before they are written out


class TruthArchive:
    """Append-only truth rows: at most `FLUSH_EVERY` in memory, the rest in a temporary file."""

    def __init__(self) -> None:
        self._buffer: list[str] = []
        self._file: IO[str] | None = None
        self.count = 0

    def append(self, row: dict[str, Any]) -> None:
        self._buffer.append(json.dumps(row, separators=(",", ":")))
        self.count += 1
        if len(self._buffer) >= FLUSH_EVERY:
            self._flush()

    def rows(self) -> list[dict[str, Any]]:
        """Every archived row, oldest first."""
        self._flush()
        if self._file is None:
            return []
        self._file.seek(0)
        rows = [json.loads(line) for line in self._file if line.strip()]
        self._file.seek(0, 2)
        return rows

    def close(self) -> None:
        self._buffer.clear()
        if self._file is not None:
            self._file.close()
            self._file = None

    def _flush(self) -> None:
        if not self._buffer:
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile(mode="w+", encoding="utf-8", prefix="stampede-sim-truth-")
        self._file.write("\n".join(self._buffer) + "\n")
        self._file.flush()
        self._buffer.clear()


class Retention:
    """The ended sandboxes a simulator still knows, oldest ended first, and the archived rows of those it forgot.

    `retention_s` in vendor seconds; prune `listeners` get `(sandbox, truth_row)` before the row is archived (a
    front drops its own state for the sandbox, and may add its fields to the row)."""

    def __init__(
        self, retention_s: float, wall: Callable[[float], float], forget: Callable[[SimSandbox], bool]
    ) -> None:
        """`forget(sb)` drops a sandbox from the simulator's memory (False when it was already gone)."""
        self.retention_s = retention_s
        self.archive = TruthArchive()
        self.listeners: list[Callable[[SimSandbox, dict[str, Any]], None]] = []
        self._wall = wall
        self._forget = forget
        self._fifo: deque[SimSandbox] = deque()
        self.ended: Callable[[SimSandbox], None] = self._fifo.append  # a sandbox just ended (the hot path: no wrapper)

    def prune(self, now: float) -> None:
        """Forget the sandboxes that ended more than `retention_s` ago; archive their truth rows first."""
        fifo = self._fifo
        horizon = now - self.retention_s
        while fifo and (fifo[0].ended_at or 0.0) <= horizon:
            sb = fifo.popleft()
            if not self._forget(sb):
                continue
            row = sb.truth_row(self._wall)
            for callback in self.listeners:
                callback(sb, row)
            self.archive.append(row)

    def truth(self, live: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every sandbox's truth row, the archived and the `live` ones, in acceptance order."""
        archived = self.archive.rows()
        if not archived:
            return live
        return sorted(archived + live, key=lambda row: int(row["seq"]))
