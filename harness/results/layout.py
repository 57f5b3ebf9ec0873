"""Where a run folder keeps each table's parquet files, in either layout.

Schema v2 (harness.wire.records `TABLES`): a folder per table, `rollouts/`, `ops/`, `truth/`, `trainer/`.
Schema v1: shards side by side in the run folder (`rollouts-*.parquet`, `ops-*.parquet`, `sim_truth.parquet`,
`trainer-*.parquet`). Readers take both, so a v1 folder reads as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.wire.records import OPS_TABLE, ROLLOUTS_TABLE, TRAINER_TABLE, TRUTH_TABLE

V1_PATTERNS = {
    ROLLOUTS_TABLE: "rollouts*.parquet",
    OPS_TABLE: "ops*.parquet",
    TRUTH_TABLE: "sim_truth.parquet",
    TRAINER_TABLE: "trainer-*.parquet",
}


@dataclass(frozen=True, slots=True)
class TableFiles:
    v2: list[Path]  # in the table's folder: the v2 file schema
    v1: list[Path]  # flat in the run folder: the v1 schema (floats and plain strings)

    def __bool__(self) -> bool:
        return bool(self.v2 or self.v1)

    @property
    def all(self) -> list[Path]:
        return [*self.v2, *self.v1]


def table_files(table_dir: Path) -> list[Path]:
    """The parquet files a table folder holds (hidden and `_`-prefixed names skipped, as pyarrow does)."""
    if not table_dir.is_dir():
        return []
    return sorted(p for p in table_dir.glob("*.parquet") if not p.name.startswith((".", "_")) and p.is_file())


def files_of(run_dir: Path, table: str) -> TableFiles:
    """A table's files in a run folder, v2 and v1."""
    run_dir = Path(run_dir)
    v1 = sorted(p for p in run_dir.glob(V1_PATTERNS[table]) if p.is_file())
    return TableFiles(v2=table_files(run_dir / table), v1=v1)
