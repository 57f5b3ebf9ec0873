"""What a version-2 latency model adds for the generator-side model (runs with a plan; harness.results.export
.step_export): each step's distribution, fork versus fresh starts, the image cache's cold and warm split.

`stampede model` uses them so: a GRPO group of G forked rollouts starts when its one fork call does (every member
waits for the same draw), and the image cache warms as the run goes (the first `cold_per_run` creates of a run pay
a cold pull on top of a warm start, later ones start warm); and it prices the infrastructure tax of the user's shape.
A version-1 export has none of these: the model behaves as it always did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.results.figures.step_figures import InfraTax, tax_from_parts
from harness.rlmodel.duration_dists import Dist, EmpiricalDist


def grid_dist(metric: Mapping[str, Any], levels: np.ndarray, label: str) -> Dist:
    """A metric block's quantile grid as a distribution (the empirical form every v1 metric also reads as)."""
    return EmpiricalDist(levels, np.maximum.accumulate(np.asarray(metric["quantiles"], dtype=float)), label=label)


@dataclass(frozen=True, slots=True)
class StepInputs:
    """The v2 parts of the bucket nearest the concurrency asked for (steps are not interpolated between buckets)."""

    bucket: int
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind (and exec.overhead) -> its metric block
    fresh_start: Dist | None = None
    fork_start: Dist | None = None
    fork_copies: float = 0.0

    def mean(self, kind: str) -> float:
        entry = self.steps.get(kind)
        return float(entry["mean"]) if entry else 0.0

    def per_rollout(self, kind: str) -> float:
        entry = self.steps.get(kind)
        return float(entry["per_rollout"]) if entry else 0.0


def step_inputs(bucket: Mapping[str, Any], levels: np.ndarray) -> StepInputs | None:
    """None for a v1 bucket, or a v2 one whose stages ran no plan."""
    steps = bucket.get("steps")
    if not steps:
        return None
    starts = bucket.get("starts") or {}
    fresh, fork = starts.get("fresh"), starts.get("fork")
    return StepInputs(
        bucket=int(bucket["concurrency"]),
        steps=dict(steps),
        fresh_start=grid_dist(fresh, levels, "fresh start grid") if fresh else None,
        fork_start=grid_dist(fork, levels, "fork grid") if fork else None,
        fork_copies=float(fork["copies"]) if fork else 0.0,
    )


@dataclass(frozen=True, slots=True)
class ImageCache:
    """The export's cold and warm split: a run's first `cold_per_run` creates pull cold, later ones start warm."""

    cold_per_run: int
    cold_pull: Dist
    warm_start: Dist
    pull_share: float  # of fresh-start time, in the measured runs

    def describe(self) -> str:
        return (
            f"image cache warms over the run: the first {self.cold_per_run} creates pull cold (mean "
            f"{self.cold_pull.mean():.3g} s on top of a warm start, mean {self.warm_start.mean():.3g} s); later ones "
            f"start warm (pulls were {100 * self.pull_share:.1f}% of fresh-start time in the measured runs)"
        )


def image_cache(block: Mapping[str, Any] | None, levels: np.ndarray) -> ImageCache | None:
    if not block or not block.get("cold_pull") or not block.get("warm_start"):
        return None
    return ImageCache(
        cold_per_run=round(float(block["cold_per_run"])),
        cold_pull=grid_dist(block["cold_pull"], levels, "cold pull grid"),
        warm_start=grid_dist(block["warm_start"], levels, "warm start grid"),
        pull_share=float(block["pull_share_of_start"]),
    )


def shape_tax(
    steps: StepInputs,
    tool_calls: float | None,
    trajectories_per_run: int,
    cache: ImageCache | None,
    forked: bool,
) -> InfraTax:
    """The infrastructure tax of the user's shape: the config's tool calls per trajectory (`tool_calls`; None: the
    measured runs' count) at the export's per-call overhead; the measured runs' other steps per rollout; a fork group's
    one start shared by its copies; cold pulls spread over the run's trajectories when the cache warms."""
    parts: dict[str, tuple[float, float]] = {}
    share = 1.0 / steps.fork_copies if forked and steps.fork_copies else 1.0
    if cache is not None:
        pulls = cache.cold_per_run / max(trajectories_per_run, 1)
        parts["pull"] = (pulls * cache.cold_pull.mean(), pulls)
        parts["create/ready"] = (cache.warm_start.mean() * share, share)
    elif steps.fresh_start is not None:
        pull = steps.mean("pull") * steps.per_rollout("pull")
        parts["pull"] = (pull * share, steps.per_rollout("pull") * share)
        parts["create/ready"] = (max(steps.fresh_start.mean() - pull, 0.0) * share, share)
    if forked and steps.fork_start is not None:
        parts["fork"] = (steps.fork_start.mean() * share, share)
    calls = steps.per_rollout("exec.overhead") if tool_calls is None else float(tool_calls)
    if "exec.overhead" in steps.steps:
        parts["exec overhead"] = (calls * steps.mean("exec.overhead"), calls)
    for kind in ("upload", "background", "download", "snapshot", "terminate"):
        count = steps.per_rollout(kind)
        if count:
            parts[kind] = (count * steps.mean(kind), count)
    return tax_from_parts(parts, trajectories_per_run)
