"""Vendor seconds that do not depend on the time scale: only the vendor's own share of a duration is scaled.

A simulated vendor runs `1 / time_scale` times faster than real time, but the harness and the front end do not:
their round trips, poll windows and queueing are real milliseconds. Dividing a whole wall duration by the time
scale multiplies that harness share by `1 / time_scale` (at 0.1, 60 ms of client overhead became 0.6 vendor s).
The simulator's truth says when the vendor held each sandbox (accepted -> RUNNING, and the commands it ran), so a
duration in vendor seconds is its wall duration with only those spans stretched:
`vendor = wall + held_wall x (1 / time_scale - 1)`.
Runs without truth (real vendors, old runs) keep `wall / time_scale`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.results.dataset import RunInfo, load_rollout_frame

DURATIONS: tuple[str, ...] = ("create_s", "ready_s", "tti_s", "exec_s", "terminate_s", "total_s")
_TRUTH_COLUMNS = ("created_wall", "ready_wall", "ended_wall", "first_exec_start_wall", "first_exec_done_wall")


def _overlap(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
    return np.clip(np.minimum(a1, b1) - np.maximum(a0, b0), 0.0, None)


def vendor_held_wall(info: RunInfo, frame: pd.DataFrame) -> dict[str, np.ndarray] | None:
    """Per row and duration column, the wall seconds the simulated vendor held it; None without usable truth."""
    path = Path(info.run_dir) / "sim_truth.parquet"
    if info.time_scale == 1.0 or not path.exists():
        return None
    truth = pd.read_parquet(path)
    if not set(_TRUTH_COLUMNS) | {"exec_busy_s"} <= set(truth.columns):
        return None
    ids = load_rollout_frame(Path(info.run_dir), ("sandbox_id",))["sandbox_id"].astype(object)
    if len(ids) != len(frame):
        return None
    joined = pd.DataFrame({"id": ids.to_numpy()}).merge(truth.drop_duplicates("id"), on="id", how="left")
    submit = frame["t_submit"].to_numpy(dtype=float)
    created = joined["created_wall"].to_numpy(dtype=float)
    # the vendor starts the sandbox from acceptance until RUNNING (or its end, if it never ran)
    boot_end = np.where(np.isnan(joined["ready_wall"]), joined["ended_wall"], joined["ready_wall"]).astype(float)
    exec0 = joined["first_exec_start_wall"].to_numpy(dtype=float)
    exec1 = joined["first_exec_done_wall"].to_numpy(dtype=float)
    busy = joined["exec_busy_s"].to_numpy(dtype=float) * info.time_scale

    def col(name: str) -> np.ndarray:
        return np.nan_to_num(frame[name].to_numpy(dtype=float), nan=0.0)

    create_end = submit + col("create_s")
    ready_end = create_end + col("ready_s")
    boot = lambda t0, t1: np.nan_to_num(_overlap(t0, t1, created, boot_end))  # noqa: E731
    first_exec = np.nan_to_num(exec1 - exec0)
    return {
        "create_s": boot(submit, create_end),
        "ready_s": boot(create_end, ready_end),
        "tti_s": boot(submit, submit + col("tti_s")) + first_exec,
        "exec_s": np.nan_to_num(busy),
        "terminate_s": np.zeros(len(frame)),
        "total_s": boot(submit, submit + col("total_s")) + np.nan_to_num(busy),
    }


def to_vendor_seconds(info: RunInfo, frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """Every duration column in vendor seconds: harness time kept as measured, vendor time unscaled to vendor s."""
    factor = info.to_vendor_seconds()
    held = vendor_held_wall(info, frame)
    out: dict[str, np.ndarray] = {}
    for name in DURATIONS:
        wall = frame[name].to_numpy(dtype=float)
        if held is None:
            out[name] = wall * factor
        else:
            out[name] = wall + np.minimum(held[name], np.nan_to_num(wall)) * (factor - 1.0)
    return out
