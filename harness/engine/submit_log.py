"""The write-ahead of submits: every rollout attempt is on disk before its first vendor call leaves.

Rows reach parquet every flush interval (2 s); a kill -9 of every process loses the rows still buffered and the
rows of rollouts still in flight. This log is what lets the read side (`harness.results.read.submit_ledger`) give each
of those a row of its own (outcome `unfinished`), so counts include them.

Lines are JSON, appended with one `os.write` per event-loop iteration (the batch of submits made in it), scheduled
before the batch's rollout tasks take their first step: a kill -9 after that write loses nothing (the page cache
outlives the process). Kinds: `run` (once per segment: who writes), `submit` (rollout, attempt, stage, load,
t_submit), `created` (the vendor acknowledged a sandbox id). Segments are written under a hidden name and renamed
(`submits-<worker>-<seq>.jsonl`) every `rotate_s` and at close, so a distributed worker ships only whole segments;
readers also read the open (hidden) one.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from harness.wire.json_lines import one_shot_encoder

SUBMIT_GLOB = "submits-*.jsonl"
OPEN_SUBMIT_GLOB = ".submits-*.jsonl.open"
DEFAULT_ROTATE_S = 2.0
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)  # json.dumps with options builds one per call
_ENCODE = one_shot_encoder(_ENCODER)  # and JSONEncoder.encode a C encoder per call: made once


class SubmitLog:
    """Append-only, batched per loop iteration; never raises into a rollout (a full disk loses only the log)."""

    def __init__(
        self, run_dir: Path, worker: str, header: dict[str, Any], *, rotate_s: float = DEFAULT_ROTATE_S
    ) -> None:
        self.run_dir = Path(run_dir)
        self.worker = worker
        self.header = {"kind": "run", **header}
        self.rotate_s = rotate_s
        self._lines: list[bytes] = []
        self._scheduled = False
        self._fd: int | None = None
        self._seq = 0
        self._opened_at = 0.0
        self.written = 0
        self.error: str | None = None

    # -- what the engine records -------------------------------------------------------------------------
    def submitted(self, rollout_id: str, attempt: int, fields: dict[str, Any]) -> None:
        self._add({"kind": "submit", "rollout_id": rollout_id, "attempt": attempt, "t_submit": time.time(), **fields})

    def created(self, rollout_id: str, sandbox_id: str | None) -> None:
        if sandbox_id:
            self._add({"kind": "created", "rollout_id": rollout_id, "sandbox_id": sandbox_id})

    def _add(self, entry: dict[str, Any]) -> None:
        self._lines.append(_ENCODE(entry).encode() + b"\n")
        if not self._scheduled:
            self._scheduled = True
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop (a test, or after the loop stopped): write now
                self.flush()

    # -- disk ------------------------------------------------------------------------------------------------
    def _open_path(self, seq: int) -> Path:
        return self.run_dir / f".submits-{self.worker}-{seq:05d}.jsonl.open"

    def _final_path(self, seq: int) -> Path:
        return self.run_dir / f"submits-{self.worker}-{seq:05d}.jsonl"

    def flush(self) -> None:
        self._scheduled = False
        lines, self._lines = self._lines, []
        if not lines or self.error is not None:
            return
        try:
            if self._fd is not None and time.monotonic() - self._opened_at >= self.rotate_s:
                self._seal()
            if self._fd is None:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self._open_path(self._seq), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                self._opened_at = time.monotonic()
                lines.insert(0, _ENCODE(self.header).encode() + b"\n")
            data = b"".join(lines)
            while data:
                written = os.write(self._fd, data)
                data = data[written:]
            self.written += len(lines)
        except OSError as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def _seal(self) -> None:
        """Close the open segment and give it its final name (a worker ships only sealed segments)."""
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        os.replace(self._open_path(self._seq), self._final_path(self._seq))
        self._seq += 1

    def close(self) -> None:
        self.flush()
        try:
            self._seal()
        except OSError as exc:
            self.error = f"{type(exc).__name__}: {exc}"
