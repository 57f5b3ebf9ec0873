"""Load a run's shards (or several runs') as one table; readers take the union of whatever shards exist."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.records import OP_SCHEMA, ROLLOUT_SCHEMA


def _read(run_dir: Path, prefix: str, schema: pa.Schema) -> pd.DataFrame:
    paths = sorted(Path(run_dir).glob(f"{prefix}*.parquet"))
    if not paths:
        return schema.empty_table().to_pandas()
    tables = [pq.read_table(path, schema=schema) for path in paths]
    return pa.concat_tables(tables).to_pandas()


def load_rollouts(run_dir: Path) -> pd.DataFrame:
    return _read(run_dir, "rollouts", ROLLOUT_SCHEMA)


def load_ops(run_dir: Path) -> pd.DataFrame:
    return _read(run_dir, "ops", OP_SCHEMA)
