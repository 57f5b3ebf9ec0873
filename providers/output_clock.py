"""Timing a streamed command's output for `Provider.exec_stream`: the first and last chunk, from the call.

Shared by adapters without one importing another (each SDK hands chunks to a callback or an iterator; this notes
when they came and passes them on). Imports nothing of ours but the contract's records.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from providers.base import ExecResult, StreamedExec


class OutputClock:
    """Started at the call: `seen(chunk)` per output chunk (stdout or stderr), `done(result)` at the end."""

    def __init__(self, on_output: Callable[[str], None] | None = None) -> None:
        self.started = time.perf_counter()
        self.first: float | None = None
        self.last: float | None = None
        self.on_output = on_output

    def seen(self, chunk: str | bytes) -> None:
        """A chunk arrived: an empty one is no output (an SDK's keepalive), so it is not a byte."""
        if not chunk:
            return
        now = time.perf_counter() - self.started
        if self.first is None:
            self.first = now
        self.last = now
        if self.on_output is not None:
            self.on_output(chunk.decode(errors="replace") if isinstance(chunk, bytes) else chunk)

    def done(self, result: ExecResult) -> StreamedExec:
        return StreamedExec(result=result, first_byte_s=self.first, last_byte_s=self.last)
