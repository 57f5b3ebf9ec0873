"""A run's stages reach the fit in the order they began, whatever order their rows were written in.

A stage whose rollouts are all still in flight at the run's end (modal-like's ramp at 960: 592 of 593 stuck in the
runtime-start queue, cancelled at the end) has its rows written last; a ramp replayed in row order played its stages
out of turn (480, 1,920, 3,840, then 960), and its prediction with them.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.fitting.observations import observations_from_run
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run


def test_stages_come_in_the_order_they_began_not_the_order_their_rows_were_written(tmp_path: Path) -> None:
    stages = tuple(SyntheticStage(target_users=level, rollouts=level) for level in (40, 80, 160))
    run = write_synthetic_run(tmp_path, SyntheticRun(stages=stages))
    shards = sorted(run.glob("rollouts*.parquet"))
    table = pa.concat_tables([pq.read_table(p) for p in shards])
    second = pc.equal(table["stage"], "02-ramp80")
    reordered = pa.concat_tables([table.filter(pc.invert(second)), table.filter(second)])  # its rows last
    for path in shards:
        path.unlink()
    pq.write_table(reordered, run / "rollouts-00000.parquet")
    assert [o.concurrency for o in observations_from_run(run)] == [40, 80, 160]
