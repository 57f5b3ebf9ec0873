"""Vendor seconds that do not depend on the time scale: only the vendor's own share of a duration is scaled.

A simulated vendor runs `1 / time_scale` times faster than real time, but the harness and the front end do not:
their round trips, poll windows and queueing are real milliseconds. Dividing a whole wall duration by the time
scale multiplies that harness share by `1 / time_scale` (at 0.1, 60 ms of client overhead became 0.6 vendor s).
The simulator's truth says when the vendor held each sandbox (accepted -> RUNNING, and the commands it ran), so a
duration in vendor seconds is its wall duration with only those spans stretched:
`vendor = wall - held_wall + held_vendor`, with `held_vendor` from the vendor's own clock (truth `*_s`; older truth:
`held_wall / time_scale`). Runs without truth (real vendors, old runs) keep `wall / time_scale`.

The same per-row seconds reach the compacted rollouts file as `*_vendor_s` columns (harness.results.read.compaction), so
a plain reader's quantiles are summary.json's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness.results.read.dataset import RunInfo, load_rollout_frame, load_truth
from harness.wire.records import VENDOR_SECONDS_COLUMNS

DURATIONS: tuple[str, ...] = tuple(VENDOR_SECONDS_COLUMNS)
"""The rollouts' duration columns (wall seconds), each with a vendor-seconds twin in the compacted file."""
_TRUTH_COLUMNS = ("created_wall", "ready_wall", "ended_wall", "first_exec_start_wall", "first_exec_done_wall")
_TRUTH_VENDOR_COLUMNS = ("created_s", "ready_s", "ended_s", "first_exec_start_s", "first_exec_done_s")


def _overlap(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
    return np.clip(np.minimum(a1, b1) - np.maximum(a0, b0), 0.0, None)


@dataclass(frozen=True)
class VendorHeld:
    """Per duration column, the span of each row the simulated vendor held: in wall seconds and in vendor seconds."""

    wall: dict[str, np.ndarray]
    vendor: dict[str, np.ndarray]


def _col(frame: pd.DataFrame, name: str) -> np.ndarray:
    return frame[name].to_numpy(dtype=float) if name in frame.columns else np.full(len(frame), np.nan)


def usable_truth(truth: pd.DataFrame) -> bool:
    """Whether a run's `truth/` holds what the join needs (a simulated vendor's record with its wall instants)."""
    return not truth.empty and set(_TRUTH_COLUMNS) | {"exec_busy_s"} <= set(truth.columns)


def vendor_seconds_source(info: RunInfo, truth: pd.DataFrame | None) -> str:
    """How `to_vendor_seconds` makes a run's vendor seconds: `wall` (time scale 1: the same seconds), `truth` (the
    vendor's own record joined), `scaled` (wall / time scale)."""
    if info.time_scale == 1.0:
        return "wall"
    return "truth" if truth is not None and usable_truth(truth) else "scaled"


def vendor_held(info: RunInfo, frame: pd.DataFrame, truth: pd.DataFrame | None = None) -> VendorHeld | None:
    """The wall and vendor seconds the simulated vendor held each row's durations; None without usable truth.

    `truth` is the run's `truth/` table when the caller has it loaded already; the rows' sandbox ids come from
    `frame` when it has them (its rows then need not be the whole run's), else from the run folder.

    The vendor's share in vendor seconds comes from its own clock (the truth's `*_s` columns) where the truth has
    them: a live simulated vendor plays a burst's sending 1:1 with real time (providers.sim.core.clock.LoopClock),
    so its wall spans are not always vendor spans times the time scale. A span the rollout overlaps only in part
    gets the vendor seconds of that part at the span's mean pace. Older truth (walls only) keeps wall / time scale.
    """
    if info.time_scale == 1.0:
        return None
    if truth is None:
        truth = load_truth(Path(info.run_dir))
    if not usable_truth(truth):
        return None
    with_ids = frame if "sandbox_id" in frame.columns else load_rollout_frame(Path(info.run_dir), ("sandbox_id",))
    ids = with_ids["sandbox_id"].astype(object)
    if len(ids) != len(frame):
        return None
    joined = pd.DataFrame({"id": ids.to_numpy()}).merge(truth.drop_duplicates("id"), on="id", how="left")
    factor = info.to_vendor_seconds()
    has_vendor = set(_TRUTH_VENDOR_COLUMNS) <= set(truth.columns)
    submit = frame["t_submit"].to_numpy(dtype=float)
    created = _col(joined, "created_wall")
    # the vendor starts the sandbox from acceptance until RUNNING (or its end, if it never ran)
    ready_wall, ended_wall = _col(joined, "ready_wall"), _col(joined, "ended_wall")
    boot_end = np.where(np.isnan(ready_wall), ended_wall, ready_wall)
    exec0, exec1 = _col(joined, "first_exec_start_wall"), _col(joined, "first_exec_done_wall")
    busy_vendor = np.nan_to_num(_col(joined, "exec_busy_s"))
    first_exec_wall = np.nan_to_num(exec1 - exec0)
    if has_vendor:
        ready_s, ended_s = _col(joined, "ready_s"), _col(joined, "ended_s")
        boot_vendor = np.where(np.isnan(ready_s), ended_s, ready_s) - _col(joined, "created_s")
        boot_wall = boot_end - created
        with np.errstate(divide="ignore", invalid="ignore"):
            boot_pace = np.where(boot_wall > 0, boot_vendor / boot_wall, factor)
        boot_pace = np.nan_to_num(boot_pace, nan=factor)
        first_exec_vendor = np.nan_to_num(_col(joined, "first_exec_done_s") - _col(joined, "first_exec_start_s"))
    else:
        boot_pace = np.full(len(frame), factor)
        first_exec_vendor = first_exec_wall * factor

    def col(name: str) -> np.ndarray:
        return np.nan_to_num(frame[name].to_numpy(dtype=float), nan=0.0)

    create_end = submit + col("create_s")
    ready_end = create_end + col("ready_s")
    boot = lambda t0, t1: np.nan_to_num(_overlap(t0, t1, created, boot_end))  # noqa: E731
    spans = {
        "create_s": (boot(submit, create_end), 0.0, 0.0),
        "ready_s": (boot(create_end, ready_end), 0.0, 0.0),
        "tti_s": (boot(submit, submit + col("tti_s")), first_exec_wall, first_exec_vendor),
        # commands: their vendor seconds are known; their wall share is taken at the nominal scale
        "exec_s": (np.zeros(len(frame)), busy_vendor / factor, busy_vendor),
        "terminate_s": (np.zeros(len(frame)), 0.0, 0.0),
        "total_s": (boot(submit, submit + col("total_s")), busy_vendor / factor, busy_vendor),
    }
    wall = {name: b + extra_wall for name, (b, extra_wall, _) in spans.items()}
    vendor = {name: b * boot_pace + extra_vendor for name, (b, _, extra_vendor) in spans.items()}
    return VendorHeld(wall=wall, vendor=vendor)


def vendor_held_wall(info: RunInfo, frame: pd.DataFrame) -> dict[str, np.ndarray] | None:
    """Per row and duration column, the wall seconds the simulated vendor held it; None without usable truth."""
    held = vendor_held(info, frame)
    return None if held is None else held.wall


@dataclass(frozen=True)
class VendorSeconds:
    """A run's durations in vendor seconds, and what its harness-side seconds (loop lag, poll windows) became."""

    durations: dict[str, np.ndarray]
    harness_factor: float  # 1 where the vendor's share was separated out (truth); else 1 / time scale, like all


def to_vendor_seconds(info: RunInfo, frame: pd.DataFrame, truth: pd.DataFrame | None = None) -> VendorSeconds:
    """Every duration column in vendor seconds: harness time kept as measured, the vendor's share in its own
    seconds. Row by row: a row's seconds do not depend on the other rows of `frame` (see `vendor_held`)."""
    factor = info.to_vendor_seconds()
    held = vendor_held(info, frame, truth)
    out: dict[str, np.ndarray] = {}
    for name in DURATIONS:
        wall = frame[name].to_numpy(dtype=float)
        if held is None:
            out[name] = wall * factor
            continue
        held_wall = held.wall[name]
        share = np.minimum(held_wall, np.nan_to_num(wall))
        # a span clipped by the rollout's own duration keeps the vendor seconds of what is left of it
        with np.errstate(divide="ignore", invalid="ignore"):
            kept = np.where(held_wall > 0, share / held_wall, 0.0)
        out[name] = wall - share + held.vendor[name] * kept
    return VendorSeconds(durations=out, harness_factor=factor if held is None else 1.0)
