"""Write a run folder in the v1 results layout (flat shards, float epoch seconds) from chosen distributions,
without running anything (v1 folders must keep reading).

For the report benchmark (a million rows in seconds) and for tests of the export and the model, where the
truth behind the data must be known. Rows are built column-wise with numpy; shards are written like the
collector writes them (many files, the union is the run).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from harness.wire.records import ROLLOUT_READ_SCHEMA as ROLLOUT_SCHEMA  # the v1 file schema


@dataclass(frozen=True, slots=True)
class SyntheticStage:
    target_users: int
    rollouts: int
    ready_median_s: float = 3.0
    ready_sigma: float = 0.6
    init_failure_p: float = 0.01  # create/ready-phase failures
    exec_failure_p: float = 0.0
    cancelled: int = 0
    stagger_s: float | None = (
        None  # one submit every stagger_s (the staggered shape: target = the count, not in flight)
    )
    burst_spread_s: float | None = None  # every submit within this spread (a burst: all in flight at once)


@dataclass(frozen=True, slots=True)
class SyntheticRun:
    run_id: str = "synthetic"
    provider: str = "stub"
    profile: str = "synthetic"
    scenario: str = "ramp"
    time_scale: float | None = 1.0
    stages: tuple[SyntheticStage, ...] = field(default_factory=tuple)
    create_median_s: float = 0.05
    exec_s: float = 2.0
    exec_count: int = 3
    teardown_median_s: float = 0.02
    ready_timeout_s: float = 60.0
    seed: int = 0
    rows_per_shard: int = 5000


def ramp_stages(total_rows: int, levels: tuple[int, ...] = (60, 120, 240, 480, 960)) -> tuple[SyntheticStage, ...]:
    """A ramp whose tail and failure rate grow with concurrency, rows split in proportion to the level."""
    weights = np.asarray(levels, dtype=float) / sum(levels)
    counts = np.floor(weights * total_rows).astype(int)
    counts[-1] += total_rows - counts.sum()
    return tuple(
        SyntheticStage(
            target_users=level,
            rollouts=int(count),
            ready_median_s=2.5 + 0.002 * level,
            ready_sigma=0.5 + 0.0004 * level,
            init_failure_p=0.005 + 0.00005 * level,
            exec_failure_p=0.001,
            cancelled=min(level // 4, int(count) // 10) if i == len(levels) - 1 else 0,
        )
        for i, (level, count) in enumerate(zip(levels, counts, strict=True))
    )


def write_synthetic_run(out_dir: Path, spec: SyntheticRun) -> Path:
    """Write run.json and rollouts-*.parquet shards under out_dir/spec.run_id; return the run folder."""
    rng = np.random.default_rng(spec.seed)
    run_dir = Path(out_dir) / spec.run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    scale = spec.time_scale if spec.time_scale else 1.0
    columns: dict[str, list[np.ndarray]] = {name: [] for name in ROLLOUT_SCHEMA.names}
    t = 1.8e9
    offset = 0
    for index, stage in enumerate(spec.stages):
        n = stage.rollouts
        name = f"{index + 1:02d}-{spec.scenario}{stage.target_users}"
        create = rng.lognormal(np.log(spec.create_median_s), 0.3, n)
        ready = rng.lognormal(np.log(stage.ready_median_s), stage.ready_sigma, n)
        first_cmd = np.full(n, 0.01)
        execs = rng.normal(spec.exec_s, 0.02 * spec.exec_s, n).clip(min=0.001)
        teardown = rng.lognormal(np.log(spec.teardown_median_s), 0.5, n)
        u = rng.random(n)
        init_fail = u < stage.init_failure_p
        exec_fail = (~init_fail) & (u < stage.init_failure_p + stage.exec_failure_p)
        timeout = init_fail & (rng.random(n) < 0.5)
        ready = np.where(timeout, spec.ready_timeout_s, np.minimum(ready, 0.999 * spec.ready_timeout_s))
        outcome = np.where(init_fail | exec_fail, "failed", "ok").astype(object)
        kind = np.full(n, None, dtype=object)
        kind[init_fail] = "died_before_ready"
        kind[timeout] = "ready_timeout"
        kind[exec_fail] = "died_during_exec"
        phase = np.full(n, None, dtype=object)
        phase[init_fail] = "ready"
        phase[exec_fail] = "exec"
        ready_col = np.where(init_fail, np.nan, ready)
        tti = np.where(init_fail, np.nan, create + ready + first_cmd)
        exec_col = np.where(init_fail, np.nan, execs)
        total = np.where(init_fail, create + ready, create + ready + execs) + teardown
        # the stage's rollouts spread over a hold: concurrency / mean duration submits per second
        duration = float(np.mean(total))
        if stage.stagger_s is not None:
            submit = t + np.arange(n) * stage.stagger_s
        elif stage.burst_spread_s is not None:
            submit = t + np.sort(rng.random(n)) * stage.burst_spread_s
        else:
            # in wall seconds, as the durations are recorded: a run at time scale 0.1 submits 10x as fast
            submit = t + np.sort(rng.random(n)) * max(n * duration * scale / stage.target_users, 1e-3)
        t = float(submit.max()) + 0.5
        cxl = np.zeros(n, dtype=bool)
        if stage.cancelled:
            cxl[-stage.cancelled :] = True
            pre = cxl & (rng.random(n) < 0.5)
            outcome[cxl] = "cancelled"
            kind[cxl] = None
            phase[cxl] = np.where(pre[cxl], "ready", "exec")
            tti[pre] = np.nan
            ready_col[pre] = np.nan
            exec_col[cxl] = np.nan
        ids = np.arange(offset, offset + n)
        offset += n
        w = lambda x: np.asarray(x) * scale  # noqa: E731  (durations are recorded in wall seconds)
        columns["run_id"].append(np.full(n, spec.run_id, dtype=object))
        columns["worker"].append(np.full(n, "local", dtype=object))
        columns["rollout_id"].append(np.char.add("local-", ids.astype(str)).astype(object))
        columns["provider"].append(np.full(n, spec.provider, dtype=object))
        columns["profile"].append(np.full(n, spec.profile, dtype=object))
        columns["scenario"].append(np.full(n, spec.scenario, dtype=object))
        columns["stage"].append(np.full(n, name, dtype=object))
        columns["target_users"].append(np.full(n, stage.target_users, dtype=np.int32))
        columns["inflight_at_submit"].append(rng.integers(1, stage.target_users + 1, n).astype(np.int32))
        columns["t_submit"].append(submit)
        columns["create_s"].append(w(create))
        columns["ready_s"].append(w(ready_col))
        columns["tti_s"].append(w(tti))
        columns["exec_count"].append(np.where(init_fail, 0, spec.exec_count).astype(np.int32))
        columns["exec_s"].append(w(exec_col))
        columns["terminate_s"].append(w(teardown))
        columns["total_s"].append(w(total))
        columns["outcome"].append(outcome)
        columns["failure_kind"].append(kind)
        columns["failure_phase"].append(phase)
        error = np.full(n, None, dtype=object)
        error[outcome == "failed"] = "ProviderError: synthetic"
        columns["error"].append(error)
        columns["sandbox_id"].append(np.char.add("sb", ids.astype(str)).astype(object))
        columns["sdk_version"].append(np.full(n, "synthetic", dtype=object))
        columns["t_intended"].append(submit)
        columns["attempt"].append(np.ones(n, dtype=np.int16))
    merged = {name: np.concatenate(parts) for name, parts in columns.items() if parts}
    rows = int(sum(stage.rollouts for stage in spec.stages))
    arrays = {  # columns this writer does not know (added to the schema later) are written as nulls
        f.name: pa.array(merged[f.name], type=f.type, from_pandas=True) if f.name in merged else pa.nulls(rows, f.type)
        for f in ROLLOUT_SCHEMA
    }
    table = pa.table(arrays, schema=ROLLOUT_SCHEMA)
    for shard, start in enumerate(range(0, max(table.num_rows, 1), spec.rows_per_shard)):
        pq.write_table(table.slice(start, spec.rows_per_shard), run_dir / f"rollouts-local-{shard:05d}.parquet")
    manifest = {
        "run_id": spec.run_id,
        "provider": spec.provider,
        "profile": spec.profile,
        "scenario": spec.scenario,
        "time_scale": spec.time_scale,
        "schema_version": 1,
        "status": "complete",
        "versions": {"stampede": "synthetic"},
        "rows": {"rollouts": table.num_rows},
        "synthetic": True,
    }
    (run_dir / "run.json").write_text(json.dumps(manifest, indent=2))
    return run_dir
