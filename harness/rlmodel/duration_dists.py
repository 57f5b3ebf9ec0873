"""Duration distributions both model engines share: the closed forms read their CDF and mean, the simulation
draws from them. One object per distribution, so the two engines can only disagree through their method.

- EmpiricalDist: a quantile grid from the latency model, read as a piecewise-linear inverse CDF (sampling is
  interpolation between grid points; the mean is that of the interpolated distribution, exactly).
- ScipyDist: a parametric form (a config's generation time, or a fit from the latency model).
- ConstantDist: a fixed duration.
- ShiftedDist: another moved by a constant (a rehearsal's generation, as its loop slept it).

A config gives a duration as seconds, a table ({ dist = "gamma", mean = 30, cv = 0.5 }: more forms than the
run draws from), or a string in the run's `kind:params` syntax, which `harness.wire.durations` parses (the
one parser) and `table_from_wire` turns into the equivalent table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from harness.errors import UsageError
from harness.wire.durations import Distribution

TAIL_EPS = 1e-9  # mass past which an unbounded distribution is cut for the closed forms' grid


class Dist(Protocol):
    @property
    def label(self) -> str: ...

    def mean(self) -> float: ...
    def cdf(self, t: np.ndarray) -> np.ndarray: ...
    def ppf(self, u: np.ndarray) -> np.ndarray: ...
    def upper(self, eps: float = TAIL_EPS) -> float: ...


def sample(dist: Dist, rng: np.random.Generator, size: int) -> np.ndarray:
    """Inverse-transform draws (one uniform per value), clipped at zero: durations are never negative."""
    return np.maximum(dist.ppf(rng.random(size)), 0.0)


@dataclass(frozen=True, slots=True)
class ConstantDist:
    value: float
    label: str = ""

    def mean(self) -> float:
        return self.value

    def cdf(self, t: np.ndarray) -> np.ndarray:
        return (np.asarray(t, dtype=float) >= self.value).astype(float)

    def ppf(self, u: np.ndarray) -> np.ndarray:
        return np.full(np.shape(u), self.value, dtype=float)

    def upper(self, eps: float = TAIL_EPS) -> float:
        return self.value


@dataclass(frozen=True, slots=True)
class EmpiricalDist:
    levels: np.ndarray  # increasing, from 0 to 1
    values: np.ndarray  # non-decreasing
    label: str = ""

    def mean(self) -> float:
        widths = np.diff(self.levels)
        return float(np.sum(widths * (self.values[:-1] + self.values[1:]) / 2.0))

    def ppf(self, u: np.ndarray) -> np.ndarray:
        return np.interp(u, self.levels, self.values)

    def cdf(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=float)
        values, levels = self.values, self.levels
        index = np.searchsorted(values, t, side="right") - 1
        out = np.where(index < 0, 0.0, 1.0)
        inside = (index >= 0) & (index < values.size - 1)
        i = index[inside]
        lo, hi = values[i], values[i + 1]
        span = np.where(hi > lo, hi - lo, 1.0)
        out[inside] = levels[i] + (t[inside] - lo) / span * (levels[i + 1] - levels[i])
        return np.clip(out, 0.0, 1.0)

    def upper(self, eps: float = TAIL_EPS) -> float:
        return float(self.values[-1])


@dataclass(frozen=True, slots=True)
class ScipyDist:
    frozen: Any  # a scipy.stats frozen distribution
    label: str = ""

    def mean(self) -> float:
        return float(self.frozen.mean())

    def cdf(self, t: np.ndarray) -> np.ndarray:
        return np.asarray(self.frozen.cdf(np.asarray(t, dtype=float)), dtype=float)

    def ppf(self, u: np.ndarray) -> np.ndarray:
        return np.asarray(self.frozen.ppf(np.clip(u, 0.0, 1.0 - 1e-12)), dtype=float)

    def upper(self, eps: float = TAIL_EPS) -> float:
        return float(self.frozen.ppf(1.0 - eps))


@dataclass(frozen=True, slots=True)
class ShiftedDist:
    """`base` moved by `shift` seconds, clipped at zero: a configured generation time with the late wake-ups of the
    rehearsal loop that slept it."""

    base: Dist
    shift: float
    label: str = ""

    def mean(self) -> float:
        if self.shift >= 0:
            return self.base.mean() + self.shift
        u = (np.arange(20_000) + 0.5) / 20_000  # the clip at zero bites: integrate the quantile function
        return float(np.mean(self.ppf(u)))

    def cdf(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=float)
        return np.where(t < 0, 0.0, self.base.cdf(t - self.shift))

    def ppf(self, u: np.ndarray) -> np.ndarray:
        return np.maximum(self.base.ppf(u) + self.shift, 0.0)

    def upper(self, eps: float = TAIL_EPS) -> float:
        return max(self.base.upper(eps) + self.shift, 0.0)


# The `kind:params` syntax (`harness.wire.durations`, the one parser) against a config table's names:
# wire kind -> (table dist, table keys in the wire's parameter order).
WIRE_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "const": ("constant", ("value",)),
    "uniform": ("uniform", ("low", "high")),
    "lognormal": ("lognormal", ("median", "sigma")),
    "exp": ("exponential", ("mean",)),
}
_TABLE_TO_WIRE = {table: wire for wire, (table, _) in WIRE_KINDS.items()}


def parse_text(text: str, where: str) -> Distribution:
    """`stampede run --gen-time` syntax, parsed by the run's own parser; a UsageError naming `where`."""
    try:
        return Distribution.parse(text)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None


def table_from_wire(dist: Distribution) -> dict[str, Any]:
    """A parsed `kind:params` as the config table it stands for (`lognormal:20,0.8` -> dist, median, sigma)."""
    name, keys = WIRE_KINDS[dist.kind]
    return {"dist": name, **dict(zip(keys, dist.params, strict=True))}


def to_wire(spec: Any, where: str) -> Distribution:
    """A config value (seconds, a `kind:params` string or a table) as the distribution the engine draws from.

    For a rehearsal: the engine draws constant, uniform, lognormal and exponential times only.
    """
    if isinstance(spec, int | float) and not isinstance(spec, bool):
        return parse_text(f"const:{spec}", where)
    if isinstance(spec, str):
        return parse_text(spec, where)
    if isinstance(spec, dict):
        kind = _TABLE_TO_WIRE.get(str(spec.get("dist")))
        if kind is None:
            raise UsageError(
                f"{where}: a rehearsal draws constant, lognormal, uniform or exponential times (got {spec.get('dist')!r})"
            )
        keys = WIRE_KINDS[kind][1]
        if set(spec) - {"dist"} != set(keys):
            raise UsageError(f"{where}: dist {spec['dist']!r} takes {', '.join(keys)}")
        return parse_text(f"{kind}:{','.join(str(spec[key]) for key in keys)}", where)
    raise UsageError(f"{where}: expected seconds or a distribution")


def from_spec(spec: Any, where: str) -> Dist:
    """A distribution from a config value: a number (constant), a table {dist = ..., ...}, or a string in
    `stampede run --gen-time` syntax.

    dist = "constant" (value) | "lognormal" (median, sigma) | "gamma" (mean, cv) | "exponential" (mean) |
    "uniform" (low, high) | "weibull" (shape, scale). Raises ValueError naming `where` on bad input.
    """
    from scipy import stats

    if isinstance(spec, str):
        spec = table_from_wire(parse_text(spec, where))
    if isinstance(spec, bool):
        raise ValueError(f"{where}: expected a number of seconds or a distribution table")
    if isinstance(spec, int | float):
        if spec < 0:
            raise ValueError(f"{where}: a duration cannot be negative")
        return ConstantDist(float(spec), label=f"{spec:g} s")
    if not isinstance(spec, dict) or "dist" not in spec:
        raise ValueError(
            f'{where}: expected a number of seconds or a table like {{ dist = "lognormal", median = 30, sigma = 0.8 }}'
        )
    kind = spec["dist"]
    known = {
        "constant": {"value"},
        "lognormal": {"median", "sigma"},
        "gamma": {"mean", "cv"},
        "exponential": {"mean"},
        "uniform": {"low", "high"},
        "weibull": {"shape", "scale"},
    }
    if kind not in known:
        raise ValueError(f"{where}: unknown dist {kind!r} (one of {', '.join(known)})")
    params = {k: v for k, v in spec.items() if k != "dist"}
    if set(params) != known[kind]:
        raise ValueError(
            f"{where}: dist {kind!r} takes {', '.join(sorted(known[kind]))}, got {', '.join(sorted(params)) or 'nothing'}"
        )
    for key, value in params.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{where}: {key} must be a non-negative number")
    p = {k: float(v) for k, v in params.items()}
    label = f"{kind}(" + ", ".join(f"{k}={v:g}" for k, v in p.items()) + ")"
    if kind == "constant":
        return ConstantDist(p["value"], label=label)
    positive = [k for k in p if k not in ("low",)]
    if any(p[k] <= 0 for k in positive):
        raise ValueError(f"{where}: {', '.join(positive)} must be positive")
    if kind == "lognormal":
        return ScipyDist(stats.lognorm(s=p["sigma"], scale=p["median"]), label)
    if kind == "gamma":
        shape = 1.0 / p["cv"] ** 2
        return ScipyDist(stats.gamma(a=shape, scale=p["mean"] / shape), label)
    if kind == "exponential":
        return ScipyDist(stats.expon(scale=p["mean"]), label)
    if kind == "uniform":
        if p["high"] <= p["low"]:
            raise ValueError(f"{where}: high must exceed low")
        return ScipyDist(stats.uniform(loc=p["low"], scale=p["high"] - p["low"]), label)
    return ScipyDist(stats.weibull_min(c=p["shape"], scale=p["scale"]), label)
