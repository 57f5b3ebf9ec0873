"""Where a run folder keeps each table's parquet files, in either layout, and where a worker's shipped file goes.

Schema v2 (harness.wire.records `TABLES`): a folder per table, `rollouts/`, `ops/`, `truth/`, `trainer/`.
Schema v1: shards side by side in the run folder (`rollouts-*.parquet`, `ops-*.parquet`, `sim_truth.parquet`,
`trainer-*.parquet`). Readers take both, so a v1 folder reads as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# not harness.wire.records: the Locust side ships files by this module without importing Arrow
from harness.wire.schema_version import (
    ENGINE_HEALTH_TABLE,
    OPS_TABLE,
    ROLLOUTS_TABLE,
    STEPS_TABLE,
    TABLES,
    TRAINER_TABLE,
    TRUTH_TABLE,
)

V1_PATTERNS = {
    ROLLOUTS_TABLE: "rollouts*.parquet",
    OPS_TABLE: "ops*.parquet",
    TRUTH_TABLE: "sim_truth.parquet",
    TRAINER_TABLE: "trainer-*.parquet",
    STEPS_TABLE: "steps-*.parquet",  # v2 only (the steps table came later): matches nothing in a v1 folder
    ENGINE_HEALTH_TABLE: "engine_health-*.parquet",  # v2 only, as steps
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


def files_to_ship(run_dir: Path) -> list[Path]:
    """A worker's complete files for its master: the run folder's own and its table folders' (a hidden name is a
    file still being written)."""
    files = [path for path in run_dir.iterdir() if path.is_file() and not path.name.startswith(".")]
    for table in TABLES:
        folder = run_dir / table
        if folder.is_dir():
            files += [path for path in folder.iterdir() if path.is_file() and not path.name.startswith(".")]
    return sorted(files)


def shipped_path(run_dir: Path, name: str) -> Path | None:
    """Where a file a worker shipped as `name` goes in the master's run folder: `name` or `<table>/name`; None for
    anything else (a way out of the folder, a hidden name, a table folder's own name)."""
    parts = PurePosixPath(name).parts
    if not parts or any(part.startswith(".") or "\\" in part for part in parts):
        return None
    if len(parts) == 1 and parts[0] not in TABLES:
        return run_dir / parts[0]
    if len(parts) == 2 and parts[0] in TABLES:
        return run_dir / parts[0] / parts[1]
    return None
