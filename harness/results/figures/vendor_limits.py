"""The vendor limits a run saw, for the latency model's `limits` (its concurrency cap and create rate).

Two kinds of evidence, kept apart and both written:
- the simulated vendor's profile (what the simulator enforced), with the profile's source for each figure or
  `override: set by the user for this run` — the export's caller resolves it (the results room does not read
  simulator profiles; `harness/cli/export.py` does and hands them in as `ProfileLimits`);
- what the rows show (`observed`): the most rollouts in flight, the most sandboxes alive at once (create
  acknowledged, not yet terminated), the peak accepted creates in any one vendor-second, and how many creates
  the vendor refused as quota_exhausted, rate_limited or capacity.
A limit is `measured` only when the vendor pushed back: quota refusals make the most sandboxes alive the cap the
run hit; rate refusals make the accepted creates per second between the first and the last refusal the rate.
Without pushback the observed figures are lower bounds, not limits, and nothing is claimed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

WINDOW_S = 1.0
PUSHBACK_KINDS: tuple[str, ...] = ("quota_exhausted", "rate_limited", "capacity")


@dataclass(frozen=True, slots=True)
class ProfileLimits:
    """A simulated vendor's profile limits after the run's overrides (None: the profile sets no limit)."""

    profile: str
    concurrency_cap: float | None
    concurrency_cap_source: str
    create_rate_per_s: float | None
    create_rate_source: str
    create_burst: float | None
    create_burst_source: str


# (profile name, run.json parameters.profile_overrides) -> the profile's limits, or None (not a profile we know)
ProfileResolver = Callable[[str, Mapping[str, Any]], ProfileLimits | None]


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def observed(rows: pd.DataFrame) -> dict[str, Any]:
    """What the rows show, per run then the largest (rows carry `t_vendor`, vendor seconds since the run's start)."""
    max_alive = 0
    peak_rate = 0.0
    refused = {kind: 0 for kind in PUSHBACK_KINDS}
    measured_rate: float | None = None
    for _, run in rows.groupby("run_id", observed=True, sort=False):
        t = run["t_vendor"].to_numpy(dtype=float)
        create = run["create_s"].to_numpy(dtype=float)
        total = run["total_s"].to_numpy(dtype=float)
        outcome = run["outcome"].astype(str).to_numpy()
        phase = run["failure_phase"].astype(object).to_numpy()
        kind = run["failure_kind"].astype(object).to_numpy()
        refused_create = (outcome == "failed") & (phase == "create")
        made = ~refused_create & np.isfinite(create)
        accepted = np.sort(t[made] + create[made])
        ends = t[made] + np.where(np.isfinite(total[made]), total[made], np.nan)
        starts = t[made] + create[made]
        alive_ends = np.where(np.isfinite(ends), ends, np.inf)
        events = np.concatenate(
            [np.stack([starts, np.ones_like(starts)], 1), np.stack([alive_ends, -np.ones_like(starts)], 1)]
        )
        if len(events):
            order = np.lexsort((events[:, 1], events[:, 0]))  # an end before a start at the same instant
            max_alive = max(max_alive, int(np.cumsum(events[order, 1]).max()))
        if len(accepted):
            within = np.searchsorted(accepted, accepted + WINDOW_S, side="left") - np.arange(len(accepted))
            peak_rate = max(peak_rate, float(within.max()) / WINDOW_S)
        for name in PUSHBACK_KINDS:
            refused[name] += int(((outcome == "failed") & (kind == name)).sum())
        limited = (outcome == "failed") & (kind == "rate_limited")
        if limited.any():
            when = t[limited] + np.where(np.isfinite(total[limited]), total[limited], 0.0)
            first, last = float(when.min()), float(when.max())
            if last - first >= WINDOW_S:
                inside = int(((accepted >= first) & (accepted <= last)).sum())
                rate = inside / (last - first)
            else:
                rate = peak_rate
            measured_rate = rate if measured_rate is None else max(measured_rate, rate)
    return {
        "max_in_flight": int(rows["measured"].max()) if len(rows) else 0,
        "max_sandboxes_alive": max_alive,
        "peak_accepted_creates_per_s": peak_rate,
        "window_s": WINDOW_S,
        "refused": refused,
        "_rate_under_pushback": measured_rate,
    }


def limits_block(rows: pd.DataFrame, profile: ProfileLimits | None) -> dict[str, Any]:
    """The latency model's `limits` for one provider/profile: the cap and create rate, each with its source."""
    seen = observed(rows)
    rate_under_pushback = seen.pop("_rate_under_pushback")
    refused = seen["refused"]
    if profile is not None:
        cap_value = _finite(profile.concurrency_cap)
        cap = {
            "value": None if cap_value is None else int(cap_value),
            "source": "profile",
            "detail": (
                f"profile {profile.profile} quota.max_active: {profile.concurrency_cap_source}"
                if cap_value is not None
                else f"profile {profile.profile} sets no concurrency cap (quota.max_active = inf)"
            ),
        }
        rate_value = _finite(profile.create_rate_per_s)
        rate = {
            "value": rate_value,
            "burst": _finite(profile.create_burst),
            "source": "profile",
            "detail": (
                f"profile {profile.profile} create_rate.per_s: {profile.create_rate_source}; "
                f"burst: {profile.create_burst_source}"
                if rate_value is not None
                else f"profile {profile.profile} sets no create rate (create_rate.per_s = inf)"
            ),
        }
    else:
        if refused["quota_exhausted"]:
            cap = {
                "value": max(int(seen["max_sandboxes_alive"]), 1),
                "source": "measured",
                "detail": (
                    f"the vendor refused {refused['quota_exhausted']} creates as quota_exhausted while at most "
                    f"{seen['max_sandboxes_alive']} sandboxes were alive: the cap the run hit"
                ),
            }
        else:
            cap = {
                "value": None,
                "source": "unknown",
                "detail": f"no quota refusal: the cap is at least {seen['max_sandboxes_alive']} (most sandboxes alive)",
            }
        if refused["rate_limited"] and rate_under_pushback:
            rate = {
                "value": float(rate_under_pushback),
                "burst": None,
                "source": "measured",
                "detail": (
                    f"the vendor refused {refused['rate_limited']} creates as rate_limited; accepted creates per "
                    "vendor-second between the first and the last refusal"
                ),
            }
        else:
            rate = {
                "value": None,
                "burst": None,
                "source": "unknown",
                "detail": (
                    "no rate_limited refusal: creates run at least "
                    f"{seen['peak_accepted_creates_per_s']:g}/s (peak in one vendor-second)"
                ),
            }
    return {"concurrency_cap": cap, "create_rate_per_s": rate, "observed": seen}


__all__ = ["PUSHBACK_KINDS", "ProfileLimits", "ProfileResolver", "limits_block", "observed"]
