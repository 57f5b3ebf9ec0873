"""The boot's load delay read from a trial's ramp where the burst is slow for another reason (cold nodes pulling).

coreweave-like's trial: its burst of 100 waits ~8 s for image pulls and fits no delay; its ramp to 400 on warm nodes
shows the 0.002 s a booting sandbox adds. Here the "measured" ramp is the simulator's own, so the truth is known.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.fitting.live_run import LiveRun, Shape
from harness.fitting.observations import CreateTimeline, ProtocolObservation
from harness.fitting.ramp_load import fit_load_from_ramp
from providers.sim.core.profile import Profile, load_profile
from providers.sim.core.timed_ramp import simulate_timed_ramp
from tests.support.sim_observations import observed

LEVELS = (25, 50, 100, 200, 400)
HOLD_S = 10.0
LIVE = LiveRun(time_scale=1.0, spawn_rate=100.0, commands=(("true",),))


def live_of(_: Path | str) -> tuple[LiveRun, float | None]:
    return LIVE, HOLD_S


def measured_ramp(profile: Profile, seed: int = 7) -> list[ProtocolObservation]:
    shapes = [Shape("ramp", users, users, HOLD_S) for users in LEVELS]
    stages = simulate_timed_ramp(profile, list(LEVELS), LIVE.timing(profile, shapes), seed=seed)
    timeline = CreateTimeline(run="ramp-run", accepted_s=(), ended_s=(), refused_s={})
    return [
        observed("ramp", users, stage, f"ramp-run (ramp{users})", creates=timeline)
        for users, stage in zip(LEVELS, stages, strict=True)
    ]


def test_a_ramp_wider_than_the_burst_gives_the_delay_the_burst_hid() -> None:
    truth = load_profile("coreweave-like")  # 0.002 s a booting sandbox, up to 2 s
    unloaded = truth.with_overrides({"boot.load_delay_s": 0.0, "boot.load_delay_max_s": 0.0})  # the burst's fit
    found = fit_load_from_ramp(unloaded, measured_ramp(truth), burst_width=100, live_of=live_of)
    assert found is not None and found.stages == (200, 400) and found.run == "ramp-run"
    assert found.profile.boot.load_delay_s == pytest.approx(0.002, rel=0.35)
    # growth past the widest stage read is not identified: held where it left it (399 booting)
    assert found.profile.boot.load_delay_max_s == pytest.approx(399 * found.profile.boot.load_delay_s)


def test_a_ramp_with_no_load_delay_gives_none() -> None:
    unloaded = load_profile("coreweave-like").with_overrides({"boot.load_delay_s": 0.0, "boot.load_delay_max_s": 0.0})
    found = fit_load_from_ramp(unloaded, measured_ramp(unloaded), burst_width=100, live_of=live_of)
    assert found is None or found.profile.boot.load_delay_s < 0.0005


def test_stages_no_wider_than_the_burst_or_refused_tell_nothing() -> None:
    truth = load_profile("coreweave-like")
    unloaded = truth.with_overrides({"boot.load_delay_s": 0.0, "boot.load_delay_max_s": 0.0})
    ramp = measured_ramp(truth)
    assert fit_load_from_ramp(unloaded, ramp, burst_width=400, live_of=live_of) is None
    refused = [
        o if o.concurrency <= 100 else ProtocolObservation(**{**_fields(o), "failures": {"rate_limited@create": 3}})
        for o in ramp
    ]
    assert fit_load_from_ramp(unloaded, refused, burst_width=100, live_of=live_of) is None


def _fields(o: ProtocolObservation) -> dict:
    return {name: getattr(o, name) for name in ProtocolObservation.__dataclass_fields__}
