"""Reconcile the engines' write-ahead of submits (`submits-*.jsonl`, harness.engine.submit_log) with the rows.

Every rollout attempt an engine submitted has a row: the one it wrote, or, when the run was cut short before that
row reached parquet (kill -9, an abort that did not wait), a row made here with outcome `unfinished`: who it was,
its stage, the load it met, when it was submitted and (if the vendor had acknowledged one) its sandbox id; every
duration null. Finished rollouts lost this way are at most one shard flush interval's worth (2 s).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from harness.wire.records import IDENTITY_FIELDS, ROLLOUT_READ_SCHEMA

OUTCOME_UNFINISHED = "unfinished"
UNFINISHED_ERROR = "no record: the run ended (crashed or aborted) before this rollout's row was written"
SUBMIT_LOG_GLOBS = ("submits-*.jsonl", ".submits-*.jsonl.open")


@dataclass(slots=True)
class Submit:
    fields: dict[str, Any]
    sandbox_id: str | None = None


def submit_logs(run_dir: Path) -> list[Path]:
    return sorted(path for pattern in SUBMIT_LOG_GLOBS for path in Path(run_dir).glob(pattern))


def read_submits(run_dir: Path) -> dict[tuple[str, int], Submit]:
    """(rollout_id, attempt) -> what the engine wrote ahead; a torn or foreign line is skipped."""
    submits: dict[tuple[str, int], Submit] = {}
    current_attempt: dict[str, int] = {}
    for path in submit_logs(run_dir):
        header: dict[str, Any] = {}
        try:
            lines = path.read_bytes().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                entry = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if not isinstance(entry, dict):
                continue
            kind = entry.get("kind")
            if kind == "run":
                header = entry
            elif kind == "submit" and entry.get("rollout_id"):
                rollout_id, attempt = str(entry["rollout_id"]), int(entry.get("attempt") or 1)
                current_attempt[rollout_id] = attempt
                submits[(rollout_id, attempt)] = Submit({**header, **entry})
            elif kind == "created" and entry.get("rollout_id") in current_attempt:
                rollout_id = str(entry["rollout_id"])
                found = submits.get((rollout_id, current_attempt[rollout_id]))
                if found is not None:
                    found.sandbox_id = entry.get("sandbox_id")
    return submits


def unfinished_rows(run_dir: Path, recorded: set[tuple[str, int]]) -> pa.Table:
    """Rows (the read schema: float epoch seconds) for every submitted attempt not in `recorded`
    (rollout_id, attempt)."""
    return pa.Table.from_pylist(unfinished_records(run_dir, recorded), schema=ROLLOUT_READ_SCHEMA)


def unfinished_records(run_dir: Path, recorded: set[tuple[str, int]]) -> list[dict[str, Any]]:
    """The same rows as plain dicts (wall-clock instants in float epoch seconds), for either schema."""
    rows: list[dict[str, Any]] = []
    for key, submit in read_submits(run_dir).items():
        if key in recorded:
            continue
        f = submit.fields
        row = {name: f.get(name) for name in IDENTITY_FIELDS}  # the header's run part, the submit line's rest
        row.update(
            rollout_id=key[0],
            attempt=key[1],
            sdk_version=f.get("sdk_version") or "",
            t_submit=f.get("t_submit"),
            exec_count=0,
            outcome=OUTCOME_UNFINISHED,
            error=UNFINISHED_ERROR,
            sandbox_id=submit.sandbox_id,
            turns=0,
        )
        rows.append(row)
    return rows


def recorded_keys(rollout_ids: Any, attempts: Any) -> set[tuple[str, int]]:
    return {(str(rollout), int(attempt or 1)) for rollout, attempt in zip(rollout_ids, attempts, strict=True)}
