"""A run's steps table (`steps/`: one row per executed plan step, runs with `--plan` only) as the analysis reads it.

Every duration in vendor seconds, by the summary's rule for the rollouts table: the compacted file's
`*_vendor_s` columns where they exist, else wall seconds / time scale (shards of a run going or crashed). A run
without a plan has no steps folder: an empty frame, and every reader prints what it printed before.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.errors import UsageError
from harness.results.read.dataset import RunInfo
from harness.results.read.layout import table_files
from harness.wire.records import epoch_seconds

STEPS_TABLE = "steps"
"""The table's folder (harness.wire.schema_version.STEPS_TABLE once the engine writes it; the name is the contract)."""

STEP_KINDS: tuple[str, ...] = (
    "create",
    "pull",
    "ready",
    "fork",
    "upload",
    "exec",
    "background",
    "download",
    "snapshot",
    "terminate",
)
"""Every step kind a plan's row may carry, in the order a rollout meets them (tables and plots keep it)."""

EXEC_PARTS: tuple[str, ...] = ("overhead", "command", "first_byte", "last_byte")
"""An exec step's parts besides its duration: `exec.overhead` is the per-call time beyond the command's own."""

_VENDOR_TWINS = {
    "duration_s": "duration_vendor_s",
    "command_s": "command_vendor_s",
    "overhead_s": "overhead_vendor_s",
    "first_byte_s": None,
    "last_byte_s": None,
    "t_start_s": None,
}
STEP_COLUMNS: tuple[str, ...] = (
    "stage",
    "rollout_id",
    "attempt",
    "step",
    "kind",
    "name",
    "t_start",
    "duration",
    "command",
    "overhead",
    "first_byte",
    "last_byte",
    "bytes",
    "files",
    "copies",
    "ok",
    "failure_kind",
    "failure_phase",
    "sandbox_id",
    "t_rollout",
)
"""The frame `load_steps` returns: the seconds columns renamed without `_s` because they are vendor seconds."""


def has_steps(run_dir: Path | str) -> bool:
    return bool(table_files(Path(run_dir) / STEPS_TABLE))


def _read_files(run_dir: Path) -> pa.Table | None:
    files = table_files(run_dir / STEPS_TABLE)
    if not files:
        return None
    try:
        tables = [pq.read_table(path) for path in files]
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
    except (OSError, pa.ArrowException) as exc:
        raise UsageError(f"{run_dir}: cannot read the steps files: {exc}") from None
    return table


def _column(frame: pd.DataFrame, name: str, dtype: str = "float64") -> pd.Series:
    if name in frame:
        return frame[name].astype(dtype) if dtype != "object" else frame[name].astype(object)
    fill: object = np.nan if dtype == "float64" else None
    return pd.Series([fill] * len(frame), index=frame.index, dtype=dtype if dtype != "float64" else "float64")


def load_steps(info: RunInfo) -> pd.DataFrame:
    """The steps of a run in vendor seconds (`STEP_COLUMNS`); empty when the run wrote none."""
    table = _read_files(Path(info.run_dir))
    if table is None or table.num_rows == 0:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in STEP_COLUMNS})
    raw = pa.table([epoch_seconds(c) for c in table.columns], names=table.column_names).to_pandas()
    for column in ("stage", "kind", "name", "failure_kind", "failure_phase", "rollout_id", "sandbox_id"):
        if column in raw and isinstance(raw[column].dtype, pd.CategoricalDtype):
            raw[column] = raw[column].astype(object)
    factor = info.to_vendor_seconds()
    out = pd.DataFrame(index=raw.index)
    out["stage"] = _column(raw, "stage", "object").astype(str)
    out["rollout_id"] = _column(raw, "rollout_id", "object")
    out["attempt"] = _column(raw, "attempt").fillna(1).astype(int)
    out["step"] = _column(raw, "step").fillna(-1).astype(int)
    out["kind"] = _column(raw, "kind", "object").astype(str)
    names = _column(raw, "name", "object")
    out["name"] = names.where(names.notna(), out["kind"]).astype(str)
    for wall, vendor in _VENDOR_TWINS.items():
        short = wall.removesuffix("_s")
        short = "t_start" if wall == "t_start_s" else short
        seconds = _column(raw, wall) * factor
        if vendor is not None and vendor in raw:
            twin = _column(raw, vendor)
            seconds = twin.where(twin.notna(), seconds)
        out[short] = seconds
    out["overhead"] = out["overhead"].clip(lower=0.0)  # a command reporting more than its call took: no overhead
    for count in ("bytes", "files", "copies"):
        out[count] = _column(raw, count)
    out["ok"] = _column(raw, "ok", "object").fillna(False).astype(bool)
    out["failure_kind"] = _column(raw, "failure_kind", "object")
    out["failure_phase"] = _column(raw, "failure_phase", "object")
    out["sandbox_id"] = _column(raw, "sandbox_id", "object")
    out["t_rollout"] = _column(raw, "t_rollout")  # epoch seconds
    return out.reset_index(drop=True)
