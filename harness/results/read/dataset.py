"""Load a run's tables; readers take the union of whatever files exist, in either layout (harness.results.read.layout).

v2 files hold UTC timestamps and dictionary-encoded strings; every reader here hands the analysis float epoch
seconds (what v1 files hold, and what its arithmetic is written for) and plain strings or categories.

`load_rollouts`/`load_ops` read every column with the exact schema (what `stampede summary` uses).
Both rollout readers reconcile the engines' write-ahead of submits (`harness.results.read.submit_ledger`): a rollout
submitted but never recorded (the run crashed or was aborted first) gets a row with outcome `unfinished`.
`read_run_info` and `load_rollout_frame` are the analysis side's entry: what a run is (provider, profile, time
scale) and only the columns a report needs, read in parallel with repeated strings as categories, because a
million-row run must load in well under a second.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from harness.errors import UsageError
from harness.results.read.layout import files_of
from harness.results.read.run_pointer import resolve_run_dir
from harness.results.read.run_repair import repair_crashed_run
from harness.results.read.submit_ledger import recorded_keys, submit_logs, unfinished_rows
from harness.wire.records import (
    OP_READ_SCHEMA,
    OP_SCHEMA,
    OPS_TABLE,
    ROLLOUT_READ_SCHEMA,
    ROLLOUT_SCHEMA,
    ROLLOUTS_TABLE,
    TRUTH_TABLE,
    epoch_seconds,
)
from harness.wire.run_endings import CRASHED

_FILE_SCHEMAS = {ROLLOUTS_TABLE: ROLLOUT_SCHEMA, OPS_TABLE: OP_SCHEMA}
_READ_SCHEMAS = {ROLLOUTS_TABLE: ROLLOUT_READ_SCHEMA, OPS_TABLE: OP_READ_SCHEMA}


def _for_analysis(table: pa.Table, keep_dictionaries: bool) -> pa.Table:
    """Timestamps as float epoch seconds; dictionaries as plain strings unless kept (vectorised, per column)."""
    arrays = []
    for column in table.columns:
        column = epoch_seconds(column)
        if not keep_dictionaries and pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        arrays.append(column)
    return pa.table(arrays, names=table.column_names)


def read_table(
    run_dir: Path, table: str, columns: list[str] | None = None, *, keep_dictionaries: bool = False
) -> pa.Table:
    """One table (rollouts or ops) of a run, both layouts, in the read schema (`ROLLOUT_READ_SCHEMA` types)."""
    files = files_of(run_dir, table)
    read_schema = _READ_SCHEMAS[table]
    names = list(columns) if columns is not None else read_schema.names
    try:
        parts = []
        if files.v2:
            v2 = pads.dataset([str(p) for p in files.v2], schema=_FILE_SCHEMAS[table], format="parquet")
            parts.append(
                _for_analysis(v2.to_table(columns=names, use_threads=True), keep_dictionaries and not files.v1)
            )
        if files.v1:
            v1 = pads.dataset([str(p) for p in files.v1], schema=read_schema, format="parquet")
            parts.append(v1.to_table(columns=names, use_threads=True))
    except (OSError, pa.ArrowException) as exc:
        raise UsageError(f"{run_dir}: cannot read the {table} files: {exc}") from None
    if not parts:
        return pa.schema([read_schema.field(name) for name in names]).empty_table()
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def _read(run_dir: Path, table: str) -> pd.DataFrame:
    return read_table(run_dir, table).to_pandas()


def load_rollouts(run_dir: Path) -> pd.DataFrame:
    """Every row written, plus an `unfinished` row per submitted attempt that has none."""
    frame = _read(run_dir, ROLLOUTS_TABLE)
    if not submit_logs(run_dir):
        return frame
    missing = unfinished_rows(run_dir, recorded_keys(frame["rollout_id"], frame["attempt"]))
    if missing.num_rows == 0:
        return frame
    if frame.empty:
        return missing.to_pandas()
    return pd.concat([frame, missing.to_pandas()], ignore_index=True)


def load_ops(run_dir: Path) -> pd.DataFrame:
    return _read(run_dir, OPS_TABLE)


def load_truth(run_dir: Path) -> pd.DataFrame:
    """The simulated vendor's own records (`truth/`, v1 `sim_truth.parquet`), walls as float epoch seconds;
    an empty frame when the run has none (a real vendor)."""
    files = files_of(run_dir, TRUTH_TABLE)
    if not files:
        return pd.DataFrame()
    try:
        tables = [_for_analysis(pq.read_table(path), keep_dictionaries=False) for path in files.all]
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")
    except (OSError, pa.ArrowException) as exc:
        raise UsageError(f"{run_dir}: cannot read the simulated vendor's truth: {exc}") from None
    return table.to_pandas()


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What a results folder is, from run.json (or from the shards alone when run.json is missing)."""

    run_dir: Path
    run_id: str
    provider: str
    profile: str
    scenario: str
    time_scale: float  # wall seconds per vendor second (run.json `time_scale`); 1.0 when none was recorded
    time_scale_recorded: bool
    status: str
    stampede_version: str
    started_at: str | None
    manifest: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def label(self) -> str:
        """How a run is named in tables: provider/profile plus a short run id."""
        return f"{self.provider}/{self.profile} ({self.run_id})"

    def to_vendor_seconds(self) -> float:
        """Multiplier from the parquet's wall seconds to vendor seconds."""
        return 1.0 / self.time_scale


ROLLOUT_REPORT_COLUMNS: tuple[str, ...] = (
    "provider",
    "profile",
    "stage",
    "target_users",
    "inflight_at_submit",
    "t_submit",
    "create_s",
    "ready_s",
    "tti_s",
    "exec_count",
    "exec_s",
    "terminate_s",
    "total_s",
    "outcome",
    "failure_kind",
    "failure_phase",
    "attempt",
    "loop_lag_s",
    "ready_poll_s",
)
"""Everything the report, the export and the model read; the wide strings (error, ids) stay on disk."""

_CATEGORICAL = ("provider", "profile", "stage", "outcome", "failure_kind", "failure_phase")


def rollout_shards(run_dir: Path) -> list[Path]:
    """Every rollouts file of a run, v2 (`rollouts/`) and v1 (flat `rollouts-*.parquet`)."""
    return files_of(run_dir, ROLLOUTS_TABLE).all


def is_run_folder(run_dir: Path) -> bool:
    """Anything a run writes from its first second: run.json, a file of either table, a write-ahead of submits.

    A run killed before its first rollouts shard still has its run.json, ops shards and submits: not refused.
    """
    path = Path(run_dir)
    return (
        (path / "run.json").is_file()
        or bool(files_of(path, ROLLOUTS_TABLE))
        or bool(files_of(path, OPS_TABLE))
        or bool(submit_logs(path))
    )


def read_run_info(run_dir: Path | str) -> RunInfo:
    """Describe a results folder (or the run a `results/latest` pointer names); not a run: a one-line UsageError."""
    path = resolve_run_dir(run_dir)
    if not path.exists():
        raise UsageError(f"{path} does not exist")
    if not path.is_dir():
        raise UsageError(f"{path} is not a directory")
    if not is_run_folder(path):
        raise UsageError(f"{path} is not a stampede run folder (no run.json, rollouts/ or ops/ parquet files)")
    manifest: dict[str, Any] = {}
    manifest_path = path / "run.json"
    if manifest_path.exists():
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"{manifest_path} is not readable JSON: {exc}") from None
        except RecursionError:
            raise UsageError(f"{manifest_path} is not a run.json: nested too deeply to read") from None
        check_manifest(manifest, manifest_path)
    provider, profile, scenario = _identity_from_shards(path)
    raw_scale = manifest.get("time_scale")
    scale = float(raw_scale) if raw_scale is not None else None
    versions = manifest.get("versions") or {}
    profile_label = str(profile or manifest.get("profile") or "-")
    parameters = manifest.get("parameters") if isinstance(manifest.get("parameters"), dict) else {}
    overrides = parameters.get("profile_overrides") if parameters else None
    if isinstance(overrides, dict) and overrides:
        # a profile with overrides is another vendor behaviour: never pooled with the plain profile
        profile_label += "[" + ",".join(f"{k}={v}" for k, v in sorted(overrides.items())) + "]"
    status = _ending(manifest) if manifest else "no run.json"
    if status == CRASHED:
        repair_crashed_run(path)  # a plain parquet reader then sees every attempt this reader reconciles
    return RunInfo(
        run_dir=path,
        run_id=str(manifest.get("run_id") or path.resolve().name),
        provider=str(manifest.get("provider") or provider or "-"),
        profile=profile_label,
        scenario=str(manifest.get("scenario") or scenario or "-"),
        time_scale=scale if scale is not None else 1.0,
        time_scale_recorded=scale is not None,
        status=status,
        stampede_version=str(versions.get("stampede", "")) if isinstance(versions, dict) else "",
        started_at=manifest.get("started_at"),
        manifest=manifest,
    )


MANIFEST_FIELDS: dict[str, tuple[type, ...]] = {
    "run_id": (str,),
    "provider": (str,),
    "profile": (str,),
    "scenario": (str,),
    "status": (str,),
    "started_at": (str,),
    "base_url": (str,),
    "final_stage": (str,),
    "versions": (dict,),
    "parameters": (dict,),
    "processes": (dict,),
    "dropped_starts": (dict,),
    "shape_outcome": (dict,),
    "thresholds": (list,),
    "exit_code": (int,),
    "wall_s": (int, float),
}
"""The run.json fields stampede reads, each with the JSON types it may hold (null is always allowed: an old or a
crashed run leaves some unset); `time_scale` has its own rule (`check_manifest`)."""


def check_manifest(manifest: Any, source: Path) -> None:
    """A run.json's fields as stampede reads them, checked on read: a wrong type is one line, not a traceback in
    whichever report reads the field, and a time scale of 0, -1 or "abc" is refused rather than read as 1 (every
    vendor-seconds figure divides by it)."""
    if not isinstance(manifest, dict):
        raise UsageError(f"{source} is not a JSON object")
    for name, types in MANIFEST_FIELDS.items():
        value = manifest.get(name)
        if value is not None and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            wanted = " or ".join(
                "an object" if t is dict else "a list" if t is list else f"a {t.__name__}" for t in types
            )
            raise UsageError(f"{source}: {name} must be {wanted}, not {json.dumps(value)[:60]}")
    scale = manifest.get("time_scale")
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale) or scale <= 0
    ):
        raise UsageError(f"{source}: time_scale must be a positive finite number, not {json.dumps(scale)[:60]}")


def _ending(manifest: dict[str, Any]) -> str:
    """How the run ended (`crashed` when run.json still says running and its owner process is gone)."""
    from harness.results.read.run_ending import ending_of  # deferred: run_ending reads knee, which reads this module

    return ending_of(manifest)


def _identity_from_shards(run_dir: Path) -> tuple[str, str, str]:
    """Provider, profile and scenario as the rows record them (the profile is empty for real vendors)."""
    shards = rollout_shards(run_dir)
    if not shards:
        return "", "", ""
    first = shards[0]
    try:
        table = pq.read_table(first, columns=["provider", "profile", "scenario"])
    except (OSError, pa.ArrowException, KeyError) as exc:
        raise UsageError(f"{first} is not a readable rollouts shard: {exc}") from None
    if table.num_rows == 0:
        return "", "", ""
    row = table.slice(0, 1).to_pylist()[0]
    return str(row["provider"] or ""), str(row["profile"] or ""), str(row["scenario"] or "")


def load_rollout_frame(run_dir: Path, columns: tuple[str, ...] = ROLLOUT_REPORT_COLUMNS) -> pd.DataFrame:
    """The columns asked for, from every rollouts file, repeated strings as categories (fast, compact)."""
    table = read_table(run_dir, ROLLOUTS_TABLE, list(columns), keep_dictionaries=True)
    if submit_logs(run_dir):
        keys = read_table(run_dir, ROLLOUTS_TABLE, ["rollout_id", "attempt"])
        missing = unfinished_rows(run_dir, recorded_keys(keys.column(0).to_pylist(), keys.column(1).to_pylist()))
        if missing.num_rows:
            table = pa.concat_tables([_as_plain(table), missing.select(list(columns))])
    arrays = []
    for name in table.column_names:
        column = table.column(name)
        if name in _CATEGORICAL and not pa.types.is_dictionary(column.type):
            column = column.dictionary_encode()
        elif name not in _CATEGORICAL and pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        arrays.append(column)
    frame = pa.table(arrays, names=table.column_names).to_pandas(self_destruct=True)
    for name in _CATEGORICAL:
        if name in frame and not isinstance(frame[name].dtype, pd.CategoricalDtype):
            frame[name] = frame[name].astype("category")
    return frame


def _as_plain(table: pa.Table) -> pa.Table:
    """Dictionary columns as plain strings (to join rows made from the write-ahead log)."""
    return _for_analysis(table, keep_dictionaries=False)
