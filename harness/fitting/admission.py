"""The control plane's admission rate, fitted from when a burst's creates were let in (issue #31).

A vendor's API takes a burst's creates one after another: 100 sent at once are accepted over tens of
milliseconds, 960 over ten times as long, and every create's wait counts in its TTI. Without that term a profile
fitted at 100 wide puts the whole of a burst's extra time into the per-sandbox load delay, and misses a burst of
960 by the admission it never modelled. The rate shows in a burst's create times (`CreateTimeline.accepted_s`): the
slope of the accepted times against their order. Only a burst the create bucket did not refuse counts: past a
429 the acceptances follow the bucket's refill, not the control plane's pace (limits.py fits that).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.fitting.observations import ProtocolObservation

KEY = "account.admit_per_s"
MIN_CREATES = 10  # a burst with fewer accepted creates gives no slope worth fitting
RATE_REFUSALS = ("rate_limited",)  # a burst with one of these was paced by the bucket, not by admission


@dataclass(frozen=True, slots=True)
class AdmissionFit:
    """The fitted admission rate (creates a second) and how, or None and why not."""

    rate: float | None
    note: str
    unidentified: str | None


def _refused_by_bucket(obs: ProtocolObservation) -> bool:
    if obs.creates is not None and any(k in RATE_REFUSALS for k in obs.creates.refused_s):
        return True
    return any(key.partition("@")[0] in RATE_REFUSALS for key in obs.failures)


def acceptance_slope(accepted_s: Sequence[float]) -> float:
    """Seconds between successive acceptances: the least-squares slope of the sorted accepted times against
    their order (robust to one late straggler in a way the first-to-last span is not)."""
    times = np.sort(np.asarray(accepted_s, dtype=float))
    if len(times) < 2:
        raise ValueError("a slope needs at least two accepted creates")
    order = np.arange(len(times), dtype=float)
    return float(np.polyfit(order, times, 1)[0])


def fit_admission(observations: Sequence[ProtocolObservation], min_width: int) -> AdmissionFit:
    """The admission rate from the bursts at least `min_width` wide whose creates were all let in by the bucket:
    the median over them of 1 / the acceptance slope."""
    rates: list[float] = []
    used: list[str] = []
    for obs in observations:
        if obs.protocol != "burst" or obs.concurrency < min_width or obs.creates is None:
            continue
        if len(obs.creates.accepted_s) < MIN_CREATES or _refused_by_bucket(obs):
            continue
        slope = acceptance_slope(obs.creates.accepted_s)
        if slope > 0:
            rates.append(1.0 / slope)
            used.append(f"burst@{obs.concurrency} ({len(obs.creates.accepted_s)} creates)")
    if not rates:
        return AdmissionFit(
            None,
            "",
            f"no burst of {min_width} or more with its create times and no create-rate refusal",
        )
    rate = statistics.median(rates)
    return AdmissionFit(rate, f"the acceptance times' slope of {', '.join(used)}", None)
