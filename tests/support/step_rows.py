"""A run folder of a plan's rollouts, written without running anything: its rollouts table (rows from
`finished_rollout`) and a steps table built with pyarrow in the documented schema (docs/results-schema.md, steps):
the truth behind the step figures is then known exactly.

`plan_rollout` gives one rollout's steps the way the engine writes them: create, pull (inside ready), ready,
upload, `execs` tool calls (each with the command's own time and the overhead beyond it), download, terminate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.wire.records import ROLLOUT_SCHEMA, file_table
from tests.support.rollout_rows import finished_rollout

_REPEATED = pa.dictionary(pa.int32(), pa.string())
_CLOCK = pa.timestamp("us", tz="UTC")
STEP_FILE_SCHEMA = pa.schema(
    [
        pa.field("run_id", _REPEATED),
        pa.field("worker", _REPEATED),
        pa.field("rollout_id", pa.string()),
        pa.field("provider", _REPEATED),
        pa.field("profile", _REPEATED),
        pa.field("scenario", _REPEATED),
        pa.field("stage", _REPEATED),
        pa.field("target_users", pa.int32()),
        pa.field("inflight_at_submit", pa.int32()),
        pa.field("sdk_version", _REPEATED),
        pa.field("t_intended", _CLOCK),
        pa.field("attempt", pa.int16()),
        pa.field("step", pa.int16()),
        pa.field("kind", _REPEATED),
        pa.field("name", _REPEATED),
        pa.field("t_start_s", pa.float64()),
        pa.field("duration_s", pa.float64()),
        pa.field("bytes", pa.int64()),
        pa.field("files", pa.int32()),
        pa.field("copies", pa.int16()),
        pa.field("first_byte_s", pa.float64()),
        pa.field("last_byte_s", pa.float64()),
        pa.field("command_s", pa.float64()),
        pa.field("overhead_s", pa.float64()),
        pa.field("ok", pa.bool_()),
        pa.field("failure_kind", _REPEATED),
        pa.field("failure_phase", _REPEATED),
        pa.field("sandbox_id", pa.string()),
        pa.field("t_rollout", _CLOCK),
    ],
    metadata={b"stampede.schema_version": b"2", b"stampede.table": b"steps"},
)
"""The steps shard schema as the engine engineer documented it (draft 1), built here so tests need no engine."""
VENDOR_TWINS = {"duration_s": "duration_vendor_s", "command_s": "command_vendor_s", "overhead_s": "overhead_vendor_s"}


@dataclass(slots=True)
class PlanRollout:
    """One rollout of a plan: its row's overrides and its steps (dicts of step columns)."""

    i: int
    stage: str = "01-ramp"
    row: dict[str, Any] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def rollout_id(self) -> str:
        return str(self.row.get("rollout_id", f"w0-{self.i:07d}"))


def plan_rollout(
    i: int,
    *,
    stage: str = "01-ramp",
    create_s: float = 0.1,
    pull_s: float = 0.0,
    ready_s: float = 0.2,
    upload_s: float = 0.5,
    execs: int = 3,
    command_s: float = 0.1,
    overhead_s: float = 0.01,
    download_s: float = 0.05,
    terminate_s: float = 0.02,
    failed_at: str | None = None,
    failure_kind: str = "transfer_error",
) -> PlanRollout:
    """A swe-task-like rollout; `failed_at` (a kind) fails that step and ends the rollout there."""
    plan: list[tuple[str, str, dict[str, Any]]] = [
        ("create", "create", {"duration_s": create_s}),
        ("pull", "pull", {"duration_s": pull_s}),
        ("ready", "ready", {"duration_s": ready_s}),
        ("upload", "repo", {"duration_s": upload_s, "bytes": 50_000_000, "files": 2000}),
        *(
            (
                "exec",
                "pytest" if n == execs - 1 else "bash",
                {"duration_s": command_s + overhead_s, "command_s": command_s, "overhead_s": overhead_s},
            )
            for n in range(execs)
        ),
        ("download", "diff", {"duration_s": download_s, "bytes": 20_000, "files": 1}),
        ("terminate", "terminate", {"duration_s": terminate_s}),
    ]
    steps, t, index = [], 0.0, 0
    for kind, name, values in plan:
        row = {"kind": kind, "name": name, "step": index, "t_start_s": t, "ok": True, **values}
        if kind == failed_at:
            row |= {"ok": False, "failure_kind": failure_kind, "failure_phase": kind}
        steps.append(row)
        if kind != "pull":  # a pull lies inside ready
            t += float(values["duration_s"])
        index += kind not in ("create", "pull")
        if kind == failed_at:
            break
    failed = failed_at is not None
    exec_rows = [s for s in steps if s["kind"] == "exec" and s["ok"]]
    row = {
        "stage": stage,
        "create_s": create_s,
        "ready_s": ready_s,
        "tti_s": create_s + ready_s + upload_s + command_s + overhead_s if exec_rows else None,
        "exec_count": len(exec_rows),
        "exec_s": sum(s["duration_s"] for s in exec_rows) or None,
        "terminate_s": terminate_s,
        "total_s": t,
        "outcome": "failed" if failed else "ok",
        "failure_kind": failure_kind if failed else None,
        "failure_phase": failed_at,
    }
    return PlanRollout(i=i, stage=stage, row=row, steps=steps)


def write_plan_run(
    out_dir: Path, rollouts: list[PlanRollout], *, run_id: str = "plan", time_scale: float = 1.0, compacted: bool = True
) -> Path:
    """run.json, rollouts/ and steps/ (compacted: one file with the vendor-seconds twins; else a shard)."""
    run_dir = Path(out_dir) / run_id
    (run_dir / "rollouts").mkdir(parents=True, exist_ok=True)
    (run_dir / "steps").mkdir(exist_ok=True)
    records = [
        finished_rollout(r.i, **({"run_id": run_id, "stage": r.stage, "t_submit": 1.8e9 + r.i} | r.row))
        for r in rollouts
    ]
    pq.write_table(file_table(records, ROLLOUT_SCHEMA), run_dir / "rollouts" / "rollouts-w0-00000.parquet")
    rows: list[dict[str, Any]] = []
    for rollout, record in zip(rollouts, records, strict=True):
        identity = {name: getattr(record, name) for name in STEP_FILE_SCHEMA.names[:12]}
        for step in rollout.steps:
            rows.append({**identity, "sandbox_id": record.sandbox_id, "t_rollout": record.t_submit, **step})
    table = file_table(rows, STEP_FILE_SCHEMA)
    if compacted:
        for wall, vendor in VENDOR_TWINS.items():
            values = [None if row.get(wall) is None else row[wall] / time_scale for row in rows]
            table = table.append_column(pa.field(vendor, pa.float64()), pa.array(values, pa.float64()))
        pq.write_table(table, run_dir / "steps" / "steps.parquet")
    else:
        pq.write_table(table, run_dir / "steps" / "steps-w0-00000.parquet")
    manifest = {
        "run_id": run_id,
        "provider": "stub",
        "profile": "ideal",
        "scenario": "swe-task",
        "status": "completed",
        "time_scale": time_scale,
        "wall_s": 10.0,
    }
    (run_dir / "run.json").write_text(json.dumps(manifest))
    return run_dir


def fork_group(
    g: int, copies: int = 4, fork_s: float = 1.0, stage: str = "01-ramp", execs: int = 2, copy_ready_s: float = 0.0
) -> list[PlanRollout]:
    """A grpo-fork group: the prepared sandbox `<group>` (create, ready, snapshot, one fork of `copies`) and each copy
    `<group>-<i>` (its tool calls and terminate, from the fork's start)."""
    group_id = f"g{g:04d}"
    base = 1000 * (g + 1)
    prepared = PlanRollout(
        i=base,
        stage=stage,
        row={"rollout_id": group_id, "exec_count": 0, "exec_s": None, "tti_s": None, "total_s": 2.0 + fork_s},
        steps=[
            {"kind": "create", "name": "create", "step": 0, "t_start_s": 0.0, "duration_s": 0.1, "ok": True},
            {"kind": "ready", "name": "ready", "step": 0, "t_start_s": 0.1, "duration_s": 0.3, "ok": True},
            {"kind": "snapshot", "name": "snapshot", "step": 1, "t_start_s": 0.4, "duration_s": 0.5, "ok": True},
            {
                "kind": "fork",
                "name": "fork",
                "step": 2,
                "t_start_s": 0.9,
                "duration_s": fork_s,
                "ok": True,
                "copies": copies,
            },
        ],
    )
    members = []
    for c in range(copies):
        steps = [
            {
                "kind": "exec",
                "name": "bash",
                "step": 3 + n,
                "t_start_s": fork_s + 0.2 * n,
                "duration_s": 0.2,
                "command_s": 0.19,
                "overhead_s": 0.01,
                "ok": True,
            }
            for n in range(execs)
        ]
        if copy_ready_s:  # the engine's ready row of a copy after the fork (named fork); the last copy the slowest
            ready = {"kind": "ready", "name": "fork", "step": 2, "t_start_s": fork_s, "ok": True}
            steps.insert(0, ready | {"duration_s": copy_ready_s * (c + 1) / copies})
        steps.append(
            {
                "kind": "terminate",
                "name": "terminate",
                "step": 3 + execs,
                "t_start_s": fork_s + 0.4,
                "duration_s": 0.02,
                "ok": True,
            }
        )
        members.append(
            PlanRollout(
                i=base + 1 + c,
                stage=stage,
                row={
                    "rollout_id": f"{group_id}-{c}",
                    "create_s": None,
                    "ready_s": None,
                    "tti_s": fork_s + 0.2,
                    "exec_count": execs,
                    "exec_s": 0.2 * execs,
                    "total_s": fork_s + 0.42,
                },
            )
        )
        members[-1].steps = steps
    return [prepared, *members]
