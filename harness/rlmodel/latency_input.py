"""Reading a latency model (export v1 or v2) for the generator-side model: one vendor, at one concurrency.

A v2 export's steps, fork and fresh starts and image cache are read by harness.rlmodel.step_input; a v1 export
reads exactly as before.

`SandboxLatency` is what a rollout meets at a given number of sandboxes in flight. Between two exported
buckets the quantile grids are averaged level by level (quantile averaging) with a weight linear in
log(concurrency), and probabilities linearly; outside the measured range the nearest bucket is used and the
answer says so (an extrapolation the user should see). A bucket's `concurrency` is the one picked by: what the
runs measured in flight (a staggered 100 is ~3 wide, a burst of 100 is 100), never a stage's target, which the
export keeps apart in `target_concurrency` and which plays no part here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from harness.errors import UsageError
from harness.results.export.latency_schema import validate_latency_model
from harness.results.figures.fits import frozen
from harness.rlmodel.duration_dists import ConstantDist, Dist, EmpiricalDist, ScipyDist
from harness.rlmodel.step_input import ImageCache, StepInputs, image_cache, step_inputs

LatencySource = Literal["empirical", "fitted"]


@dataclass(frozen=True, slots=True)
class SandboxLatency:
    """Sandbox behaviour at one concurrency, in vendor seconds."""

    concurrency: float
    buckets_used: tuple[int, ...]
    extrapolated: bool
    startup: Dist  # submit -> usable, successful starts
    exec: Dist | None  # the sandbox work of a rollout as measured (all its commands)
    teardown: Dist
    init_failure_time: Dist  # submit -> failure, failed starts
    p_init_failure: float  # per attempt
    p_exec_failure: float
    p_by_kind: dict[str, float]
    steps: StepInputs | None = None  # a v2 export of runs with a plan: the nearest bucket's steps and starts

    def describe(self) -> str:
        where = "/".join(str(b) for b in self.buckets_used)
        note = " (extrapolated: outside the measured range)" if self.extrapolated else ""
        return (
            f"sandbox latency at {self.concurrency:g} in flight from bucket {where}{note}: startup mean "
            f"{self.startup.mean():.3g} s, init failure {100 * self.p_init_failure:.2f}% per attempt"
        )


@dataclass(frozen=True, slots=True)
class VendorModel:
    provider: str
    profile: str
    levels: np.ndarray
    buckets: list[dict[str, Any]]
    limits: dict[str, Any] | None = None  # the export's `limits` (absent in exports before it was added)
    image_pull: dict[str, Any] | None = None  # v2, runs with a plan: the image cache's cold and warm split

    def image_cache(self) -> ImageCache | None:
        return image_cache(self.image_pull, self.levels)

    @property
    def name(self) -> str:
        return f"{self.provider}/{self.profile}"

    def at(
        self, concurrency: float, source: LatencySource = "empirical", startup_metric: str = "startup"
    ) -> SandboxLatency:
        levels = [int(b["concurrency"]) for b in self.buckets]
        c = max(float(concurrency), 1.0)
        if c <= levels[0] or len(levels) == 1:
            pairs, weight, extrapolated = (0, 0), 0.0, c < levels[0] or (len(levels) == 1 and c != levels[0])
        elif c >= levels[-1]:
            pairs, weight, extrapolated = (len(levels) - 1, len(levels) - 1), 0.0, c > levels[-1]
        else:
            hi = int(np.searchsorted(levels, c))
            lo = hi - 1
            weight = (math.log(c) - math.log(levels[lo])) / (math.log(levels[hi]) - math.log(levels[lo]))
            pairs, extrapolated = (lo, hi), False
        lo_b, hi_b = self.buckets[pairs[0]], self.buckets[pairs[1]]

        def dist(name: str, fallback: str | None = None) -> Dist | None:
            a = _metric(lo_b, name, fallback)
            b = _metric(hi_b, name, fallback)
            if a is None and b is None:
                return None
            a = a or b
            b = b or a
            assert a is not None and b is not None
            if source == "fitted" and a["selected_fit"] and (pairs[0] == pairs[1] or weight in (0.0, 1.0)):
                chosen = a if weight < 0.5 else b
                fit = chosen["fits"][0]
                return ScipyDist(frozen(fit["family"], fit["params"]), f"{name} fit {fit['family']}")
            values = (1 - weight) * np.asarray(a["quantiles"]) + weight * np.asarray(b["quantiles"])
            return EmpiricalDist(self.levels, np.maximum.accumulate(values), label=f"{name} grid")

        def prob(key: str) -> float:
            return float((1 - weight) * lo_b["failure_probability"][key] + weight * hi_b["failure_probability"][key])

        startup = dist(startup_metric, "tti")
        if startup is None:
            raise UsageError(
                f"latency model {self.name}: no successful start near {c:g} in flight (no startup or tti metric)"
            )
        kinds = set(lo_b["failure_probability"]["by_kind"]) | set(hi_b["failure_probability"]["by_kind"])
        by_kind = {
            k: (1 - weight) * lo_b["failure_probability"]["by_kind"].get(k, 0.0)
            + weight * hi_b["failure_probability"]["by_kind"].get(k, 0.0)
            for k in sorted(kinds)
        }
        failure_time = dist("init_failure_time")
        return SandboxLatency(
            concurrency=c,
            buckets_used=tuple(sorted({levels[pairs[0]], levels[pairs[1]]})),
            extrapolated=extrapolated,
            startup=startup,
            exec=dist("exec"),
            teardown=dist("teardown") or ConstantDist(0.0, "no teardown measured"),
            init_failure_time=failure_time or startup,
            p_init_failure=prob("init"),
            p_exec_failure=prob("exec"),
            p_by_kind=by_kind,
            steps=step_inputs(lo_b if weight < 0.5 else hi_b, self.levels),
        )


def _metric(bucket: dict[str, Any], name: str, fallback: str | None) -> dict[str, Any] | None:
    metrics = bucket["metrics"]
    if name in metrics:
        return metrics[name]
    if fallback and fallback in metrics:
        return metrics[fallback]
    return None


@dataclass(frozen=True, slots=True)
class LatencyModelFile:
    path: str
    document: dict[str, Any]
    vendors: list[VendorModel]

    def choose(self, name: str | None) -> VendorModel:
        """The vendor named PROVIDER/PROFILE (or the only one)."""
        names = [v.name for v in self.vendors]
        if name is None:
            if len(self.vendors) == 1:
                return self.vendors[0]
            raise UsageError(f"{self.path} holds {len(names)} vendors ({', '.join(names)}): pick one with --vendor")
        for vendor in self.vendors:
            if vendor.name == name:
                return vendor
        raise UsageError(f"{self.path} has no vendor {name!r} (it has {', '.join(names)})")


def load_latency_model(path: str | Path) -> LatencyModelFile:
    source = str(path)
    try:
        document = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UsageError(f"latency model {source} not found") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"latency model {source} is not readable JSON: {exc}") from None
    except RecursionError:
        raise UsageError(f"latency model {source} is not a latency model: nested too deeply to read") from None
    return latency_model_from_document(document, source)


def latency_model_from_document(document: dict[str, Any], source: str) -> LatencyModelFile:
    """A latency model already in memory (a rehearsal's own, on its loop clock); `source` names it in errors."""
    validate_latency_model(document, source)
    levels = np.asarray(document["quantile_levels"], dtype=float)
    if levels[0] != 0.0 or levels[-1] != 1.0:
        raise UsageError(f"{source}: quantile_levels must run from 0 to 1")
    vendors = [
        VendorModel(
            provider=m["provider"],
            profile=m["profile"],
            levels=levels,
            buckets=sorted(m["buckets"], key=lambda b: b["concurrency"]),
            limits=m.get("limits"),
            image_pull=m.get("image_pull"),
        )
        for m in document["models"]
    ]
    return LatencyModelFile(source, document, vendors)
