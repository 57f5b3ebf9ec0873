"""The latency model's version-2 parts, from the steps table of runs with a plan (`stampede export`).

Per bucket (the rows of its stages):
- `steps`: per step kind (and `exec.overhead`, each tool call's time beyond its command's own), the distribution of
  its successful steps (quantile grid, fits, as v1 does per phase), how many a rollout runs (`per_rollout`) and the
  share that failed (`failure_probability`);
- `starts`: `fresh` (create + ready of one sandbox created from an image, per rollout) and `fork` (per group: its
  fork call and the slowest of its copies' ready steps, when the group's G copies are all usable; `copies` the
  mean G), separate distributions.
Per model (every bucket pooled: a cache warms over a run, not per concurrency):
- `image_pull`: the creates that pulled cold (a pull step above `WARM_PULL_MAX_S`) and those that did not, the cold
  pull's distribution, a warm start's (fresh starts with no cold pull), the cold pulls per run (the first creates
  of a run pay them, later ones not: what `stampede model` replays) and the pull share of fresh-start time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from harness.results.figures.fits import fit_sample
from harness.results.figures.quantiles import group_sorted
from harness.results.figures.step_figures import OVERHEAD, kind_order

WARM_PULL_MAX_S = 0.05
"""A pull step at or under this many vendor seconds found its image cached (a manifest check, not a download)."""

MetricBlock = Callable[[np.ndarray], dict[str, Any] | None]


def metric_maker(levels: tuple[float, ...], fit: bool, max_fit_samples: int) -> MetricBlock:
    """One sample as a v1 metric block (n, mean, quantile grid, fits), or None when it is empty."""

    def block(values: np.ndarray) -> dict[str, Any] | None:
        x = np.asarray(values, dtype=float)
        x = x[np.isfinite(x)]
        if x.size == 0:
            return None
        sample = group_sorted(np.zeros(x.size, dtype=np.int64), x, 1)
        grid = sample.quantiles(levels)[0]
        fits = fit_sample(x, max_fit_samples=max_fit_samples) if fit else []
        return {
            "n": int(x.size),
            "mean": float(max(float(x.mean()), 0.0)),
            "quantiles": [float(max(v, 0.0)) for v in np.maximum.accumulate(grid)],
            "fits": [f.to_json() for f in fits],
            "selected_fit": fits[0].family if fits else None,
        }

    return block


def _per_rollout(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rollout attempt: its fresh start (create + ready, both ok) and whether it pulled cold."""
    keys = ["run_id", "rollout_id", "attempt"]
    ok = steps.loc[steps["ok"]]
    create = ok.loc[ok["kind"] == "create"].groupby(keys)["duration"].sum()
    ready = ok.loc[ok["kind"] == "ready"].groupby(keys)["duration"].sum()
    pulls = steps.loc[steps["kind"] == "pull"].groupby(keys)["duration"].max()
    frame = pd.DataFrame({"create": create, "ready": ready}).dropna()
    frame["fresh"] = frame["create"] + frame["ready"]
    frame["pull"] = pulls.reindex(frame.index).fillna(0.0)
    frame["cold"] = frame["pull"] > WARM_PULL_MAX_S
    return frame


def bucket_blocks(steps: pd.DataFrame, make: MetricBlock) -> dict[str, Any]:
    """A bucket's `steps` and `starts` (empty dict when its stages ran no plan)."""
    if steps.empty:
        return {}
    rollouts = max(int(steps[["run_id", "rollout_id", "attempt"]].drop_duplicates().shape[0]), 1)
    blocks: dict[str, Any] = {}
    for kind in kind_order(steps["kind"]):
        rows = steps.loc[steps["kind"] == kind]
        entries = [(kind, rows, rows.loc[rows["ok"], "duration"])]
        if kind == "exec" and rows["overhead"].notna().any():
            measured = rows.loc[rows["overhead"].notna()]
            entries.append((OVERHEAD, measured, measured.loc[measured["ok"], "overhead"]))
        for name, part, values in entries:
            metric = make(values.to_numpy(dtype=float))
            if metric is None:
                continue
            blocks[name] = {
                **metric,
                "per_rollout": len(part) / rollouts,
                "failure_probability": float((~part["ok"]).sum()) / len(part),
            }
    starts: dict[str, Any] = {}
    fresh = make(_per_rollout(steps)["fresh"].to_numpy(dtype=float))
    if fresh is not None:
        starts["fresh"] = fresh
    forks = steps.loc[(steps["kind"] == "fork") & steps["ok"]]
    fork = make(fork_starts(steps, forks))
    if fork is not None:
        copies = forks["copies"].dropna()
        starts["fork"] = {**fork, "copies": float(copies.mean()) if len(copies) else 1.0}
    return {"steps": blocks, "starts": starts} if blocks else {}


def fork_starts(steps: pd.DataFrame, forks: pd.DataFrame) -> np.ndarray:
    """One start per group: its fork call, then the slowest of its copies' ready steps (a copy `<group>-<i>` is
    usable once it is ready; the group starts together)."""
    if forks.empty:
        return np.empty(0)
    ready = steps.loc[(steps["kind"] == "ready") & steps["ok"]]
    group = ready["rollout_id"].astype(str).str.replace(r"-\d+$", "", regex=True)
    copies = ready.loc[group != ready["rollout_id"].astype(str)]
    slowest = copies.groupby([copies["run_id"], group.loc[copies.index]])["duration"].max()
    keys = list(zip(forks["run_id"], forks["rollout_id"].astype(str), strict=True))
    after = np.array([float(slowest.get(key, 0.0)) for key in keys])
    return forks["duration"].to_numpy(dtype=float) + after


def image_pull_block(steps: pd.DataFrame, make: MetricBlock) -> dict[str, Any] | None:
    """The model's `image_pull` (None when no fresh start was recorded)."""
    if steps.empty:
        return None
    per = _per_rollout(steps)
    if per.empty:
        return None
    cold = per.loc[per["cold"]]
    runs = max(int(steps["run_id"].nunique()), 1)
    fresh_total = float(per["fresh"].sum())
    return {
        "warm_pull_max_s": WARM_PULL_MAX_S,
        "creates": len(per),
        "cold": len(cold),
        "cold_per_run": len(cold) / runs,
        "p_cold": len(cold) / len(per),
        "pull_share_of_start": float(per["pull"].sum()) / fresh_total if fresh_total > 0 else 0.0,
        "cold_pull": make(cold["pull"].to_numpy(dtype=float)),
        "warm_start": make(per.loc[~per["cold"], "fresh"].to_numpy(dtype=float)),
    }


def split_by_bucket(steps: pd.DataFrame, buckets: Mapping[tuple[str, str], int]) -> dict[int, pd.DataFrame]:
    """The steps of each bucket, by the (run_id, stage) its rollouts were bucketed in."""
    if steps.empty:
        return {}
    keys = list(zip(steps["run_id"], steps["stage"], strict=True))
    codes = np.array([buckets.get(key, -1) for key in keys], dtype=np.int64)
    return {int(level): steps.loc[codes == level] for level in np.unique(codes) if level >= 0}


def describe_bucket(bucket: Mapping[str, Any], levels: list[float]) -> list[str]:
    """`stampede export`'s lines for a bucket's v2 parts: each step's p50/p99 and count per rollout, the starts."""
    p50, p99 = levels.index(0.5), levels.index(0.99)
    lines = []
    steps = bucket.get("steps") or {}
    if steps:
        parts = [
            f"{name} {m['quantiles'][p50]:.3g}/{m['quantiles'][p99]:.3g} s x{m['per_rollout']:.2g}"
            for name, m in steps.items()
        ]
        lines.append("    steps p50/p99 (vendor) x per rollout: " + ", ".join(parts))
    starts = bucket.get("starts") or {}
    described = [
        f"{name} p50 {m['quantiles'][p50]:.3g} s p99 {m['quantiles'][p99]:.3g} s (n={m['n']}"
        + (f", {m['copies']:.3g} copies)" if name == "fork" else ")")
        for name, m in starts.items()
    ]
    if described:
        lines.append("    starts: " + "; ".join(described))
    return lines


def describe_image_pull(model: Mapping[str, Any]) -> str | None:
    pull = model.get("image_pull")
    if not pull:
        return None
    return (
        f"  image cache: {pull['cold']} of {pull['creates']} creates pulled cold ({pull['cold_per_run']:.3g} per run),"
        f" pulls {100 * pull['pull_share_of_start']:.1f}% of fresh-start time"
    )
