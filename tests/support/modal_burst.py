"""A live Modal-like burst set beside the offline model given the same create arrivals.

Both the README's burst of 960 and the adapter's own 960 test compare a live run with `simulate_burst` fed the
vendor's own record of when each first-wave create arrived; the rule for when that comparison holds lives here once.
"""

from __future__ import annotations

import math

import pandas as pd

from foundation.sandbox_client import SandboxClient
from providers.sim.core.calibration import first_attempt_init_failure_rate
from providers.sim.core.experiments import simulate_burst
from providers.sim.core.profile import Profile

BURST_SPREAD_S = 5.0
"""Past this spread of the first wave's creates (vendor seconds) the live run and the offline model part ways: a
quiet machine sends 960 within 1-2 vendor s and the two agree within 1 point (11 runs on 2026-12-07, beside CPU
burners and staggered sends up to 8 ms apart); CI runs that sent over 17.3 and 69.8 vendor s failed 45.7% and 31.6%
of first attempts where the model said 32.3% and 0.6% (a starved vendor also ends its boots late, which the model
cannot know)."""


def first_wave_arrivals(created_s: pd.Series, size: int, within_s: float = math.inf) -> list[float]:
    """The first `size` creates' arrivals at the vendor, from its truth, in vendor seconds after the first.

    A create the vendor refused has no arrival and counts as the last; `within_s` drops later sandboxes (a retry's).
    """
    arrivals = sorted(t for t in (created_s - created_s.min()).tolist() if t < within_s)[:size]
    return arrivals + [arrivals[-1]] * (size - len(arrivals))


def offline_first_attempt_failure(
    profile: str | Profile, arrivals: list[float], client: SandboxClient | None = None
) -> float:
    """The offline model's share of first attempts that fail, given those arrivals."""
    burst = simulate_burst(profile, len(arrivals), seed=0, arrivals_s=arrivals, client=client)
    return first_attempt_init_failure_rate(burst)
