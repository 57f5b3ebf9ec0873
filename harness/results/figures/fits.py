"""Parametric forms for a latency sample, ranked by a goodness-of-fit test (scipy).

Families (all on durations in seconds; the JSON names the parameters and gives scipy's equivalents):
- lognormal          mu, sigma                 scipy.stats.lognorm(s=sigma, scale=exp(mu))
- shifted_lognormal  mu, sigma, shift          lognorm(s=sigma, loc=shift, scale=exp(mu))
- gamma              shape, scale              gamma(a=shape, scale=scale)
- weibull            shape, scale              weibull_min(c=shape, scale=scale)
- loglogistic        shape, scale              fisk(c=shape, scale=scale)
Each fit records the Kolmogorov–Smirnov statistic and p-value, the Anderson–Darling statistic and the AIC;
the selected form is the one with the smallest KS statistic. Maximum likelihood runs on at most
`max_fit_samples` values (a seeded random subset; recorded as `n`): past tens of thousands the parameters do
not move, and the KS p-value rejects every parametric form anyway. The p-values use parameters estimated from
the same data, so they are optimistic (Lilliefors); read them as a ranking aid, the statistic as the distance.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

DEFAULT_MAX_FIT_SAMPLES = 20_000
MIN_FIT_SAMPLES = 8


@dataclass(frozen=True, slots=True)
class Fit:
    family: str
    params: dict[str, float]
    ks_statistic: float
    ks_pvalue: float
    ad_statistic: float
    aic: float
    n: int

    def to_json(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "params": self.params,
            "ks_statistic": self.ks_statistic,
            "ks_pvalue": self.ks_pvalue,
            "ad_statistic": self.ad_statistic,
            "aic": self.aic,
            "n": self.n,
        }


def frozen(family: str, params: dict[str, float]) -> Any:
    """The scipy distribution behind a fit (for sampling, CDFs and checks)."""
    if family == "lognormal":
        return stats.lognorm(s=params["sigma"], scale=math.exp(params["mu"]))
    if family == "shifted_lognormal":
        return stats.lognorm(s=params["sigma"], loc=params["shift"], scale=math.exp(params["mu"]))
    if family == "gamma":
        return stats.gamma(a=params["shape"], scale=params["scale"])
    if family == "weibull":
        return stats.weibull_min(c=params["shape"], scale=params["scale"])
    if family == "loglogistic":
        return stats.fisk(c=params["shape"], scale=params["scale"])
    raise ValueError(f"unknown family {family!r}")


def _lognormal(x: np.ndarray) -> tuple[dict[str, float], int]:
    logs = np.log(x)
    return {"mu": float(logs.mean()), "sigma": float(max(logs.std(), 1e-9))}, 2


def _shifted_lognormal(x: np.ndarray) -> tuple[dict[str, float], int]:
    shape, loc, scale = stats.lognorm.fit(x, loc=0.9 * float(x.min()))
    if not (loc < x.min() and shape > 0 and scale > 0):
        raise ValueError("degenerate shift")
    return {"mu": float(math.log(scale)), "sigma": float(shape), "shift": float(loc)}, 3


def _two_param(dist: Any) -> Callable[[np.ndarray], tuple[dict[str, float], int]]:
    def fit(x: np.ndarray) -> tuple[dict[str, float], int]:
        shape, _, scale = dist.fit(x, floc=0)
        if not (shape > 0 and scale > 0):
            raise ValueError("degenerate fit")
        return {"shape": float(shape), "scale": float(scale)}, 2

    return fit


FAMILIES: dict[str, Callable[[np.ndarray], tuple[dict[str, float], int]]] = {
    "lognormal": _lognormal,
    "shifted_lognormal": _shifted_lognormal,
    "gamma": _two_param(stats.gamma),
    "weibull": _two_param(stats.weibull_min),
    "loglogistic": _two_param(stats.fisk),
}


def _anderson_darling(sorted_x: np.ndarray, cdf: np.ndarray) -> float:
    n = sorted_x.size
    cdf = np.clip(cdf, 1e-300, 1 - 1e-16)
    i = np.arange(1, n + 1)
    return float(-n - np.mean((2 * i - 1) * (np.log(cdf) + np.log1p(-cdf[::-1]))))


def fit_sample(
    values: np.ndarray,
    families: tuple[str, ...] = tuple(FAMILIES),
    max_fit_samples: int = DEFAULT_MAX_FIT_SAMPLES,
    seed: int = 0,
) -> list[Fit]:
    """Every family that fits (positive values only), best first by KS statistic; [] when too few values."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    if x.size < MIN_FIT_SAMPLES or np.ptp(x) <= 0:
        return []
    if x.size > max_fit_samples:
        x = np.random.default_rng(seed).choice(x, max_fit_samples, replace=False)
    x = np.sort(x)
    fits: list[Fit] = []
    for family in families:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                params, k = FAMILIES[family](x)
                dist = frozen(family, params)
                ks = stats.kstest(x, dist.cdf)
                loglik = float(np.sum(dist.logpdf(x)))
                ad = _anderson_darling(x, dist.cdf(x))
        except (ValueError, RuntimeError, FloatingPointError, ZeroDivisionError):
            continue
        if not (math.isfinite(ks.statistic) and math.isfinite(loglik)):
            continue
        fits.append(
            Fit(
                family=family,
                params=params,
                ks_statistic=float(ks.statistic),
                ks_pvalue=float(ks.pvalue),
                ad_statistic=ad if math.isfinite(ad) else 1e300,
                aic=2 * k - 2 * loglik,
                n=int(x.size),
            )
        )
    fits.sort(key=lambda f: f.ks_statistic)
    return fits
