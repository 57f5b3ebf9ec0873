"""Per worker, whether the harness bound its own figures: the `engine_health/` rows (harness.wire.engine_health).

An engine whose loop fell a stall behind (`engine_load.STALL_MS`, the one stall rule) delayed every answer it
timed in that interval; one near its descriptor limit (`FD_SHARE` of its soft RLIMIT_NOFILE) was about to refuse
connections itself, which the vendor would be blamed for. Either marks the worker `(!)` in the summary, the
convention of the stage table's "harness err": its figures are partly the harness's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.results.figures.engine_load import STALL_MS
from harness.results.read.layout import files_of
from harness.wire.engine_health import ENGINE_HEALTH_SCHEMA, HEALTH_INTERVAL_S
from harness.wire.records import epoch_seconds
from harness.wire.schema_version import ENGINE_HEALTH_TABLE

FD_SHARE = 0.9
"""Descriptors at this share of the process's limit: the next connections may be refused by the harness itself."""
LAG_BOUND_MS = STALL_MS


@dataclass(frozen=True, slots=True)
class WorkerHealth:
    """One engine over the run: its worst interval on each count, and whether either bound the figures."""

    worker: str
    rows: int
    lag_max_ms: float
    fds_max: int
    fd_limit: int  # -1: unlimited or unknown
    sockets_max: int

    @property
    def lag_bound(self) -> bool:
        return self.lag_max_ms > LAG_BOUND_MS

    @property
    def fds_bound(self) -> bool:
        return self.fd_limit > 0 and self.fds_max >= FD_SHARE * self.fd_limit

    @property
    def bound(self) -> bool:
        return self.lag_bound or self.fds_bound

    def to_dict(self) -> dict[str, object]:
        """summary.json's `engine_health[]` entry."""
        return {
            "worker": self.worker,
            "rows": self.rows,
            "loop_lag_max_ms": self.lag_max_ms,
            "open_fds_max": self.fds_max,
            "fd_limit": self.fd_limit if self.fd_limit > 0 else None,
            "sockets_max": self.sockets_max,
            "lag_bound": self.lag_bound,
            "fds_bound": self.fds_bound,
            "bound": self.bound,
        }

    def bound_reasons(self) -> list[str]:
        """Why the harness bound this engine's figures, in words; empty when it did not."""
        return [
            *([f"loop lag over {LAG_BOUND_MS:.0f} ms"] if self.lag_bound else []),
            *([f"fds at {100 * FD_SHARE:.0f}% of the limit"] if self.fds_bound else []),
        ]

    def describe(self) -> str:
        why = self.bound_reasons()
        limit = str(self.fd_limit) if self.fd_limit > 0 else "unlimited"
        verdict = f"(!) harness bound: {', '.join(why)}" if why else "harness not bound"
        return (
            f"engine health {self.worker} ({self.rows} row{'' if self.rows == 1 else 's'}, every {HEALTH_INTERVAL_S:g} s): loop lag max "
            f"{self.lag_max_ms:.0f} ms, open fds max {self.fds_max} of {limit}, sockets max {self.sockets_max}: "
            f"{verdict}"
        )


def load_engine_health(run_dir: Path) -> pd.DataFrame:
    """Every engine_health row of a run (empty for runs written before engines recorded it)."""
    files = files_of(Path(run_dir), ENGINE_HEALTH_TABLE).v2
    if not files:
        return _frame(ENGINE_HEALTH_SCHEMA.empty_table())
    tables = []
    for path in files:
        try:
            tables.append(pq.read_table(path, schema=ENGINE_HEALTH_SCHEMA))
        except (OSError, pa.ArrowException):
            continue  # a damaged shard loses its minute, never the summary
    if not tables:
        return _frame(ENGINE_HEALTH_SCHEMA.empty_table())
    frame = _frame(pa.concat_tables(tables))
    frame["worker"] = frame["worker"].astype(str)
    return frame


def _frame(table: pa.Table) -> pd.DataFrame:
    """The table with its UTC timestamps as epoch seconds, as every reader of ours takes them: a tz-aware column
    needs a time-zone database to reach pandas, which a slim container lacks (deploy/build-image's had none)."""
    columns = [epoch_seconds(table.column(name)) for name in table.column_names]
    return pa.Table.from_arrays(columns, names=table.column_names).to_pandas()


def worker_health(frame: pd.DataFrame) -> list[WorkerHealth]:
    """Per worker, in name order."""
    result = []
    for worker, rows in frame.groupby("worker", sort=True, observed=True):
        limits = rows["fd_limit"][rows["fd_limit"] > 0]
        result.append(
            WorkerHealth(
                worker=str(worker),
                rows=len(rows),
                lag_max_ms=float(rows["loop_lag_max_ms"].max()),
                fds_max=int(rows["open_fds"].max()),
                fd_limit=int(limits.min()) if len(limits) else -1,
                sockets_max=int(rows["sockets"].max()),
            )
        )
    return result


def harness_bound_lines(run_dir: Path) -> list[str]:
    """The summary's lines, one per worker; none for a run without the table."""
    return [health.describe() for health in worker_health(load_engine_health(run_dir))]
