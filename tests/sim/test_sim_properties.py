"""Property tests of the vendor simulator's invariants (hypothesis; a virtual clock, so each example takes
milliseconds): whatever the profile's limits and whatever a client does and when,

- the account never holds more active sandboxes than its quota;
- the create-rate bucket lets at most `burst + rate * t` creates through in any window of length t;
- a sandbox's status only moves forward (PENDING -> PROVISIONING -> RUNNING -> one end), and every
  sandbox ever accepted ends in exactly one terminal state, counted once in the simulator's own stats;
- the same calls at the same times on the same seed give the same truth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from providers.sim.core.clock import VirtualClock
from providers.sim.core.profile import load_profile
from providers.sim.core.simulator import (
    ACTIVE_STATUSES,
    CreateRequest,
    NotFound,
    NotRunning,
    Rejected,
    RejectReason,
    SandboxStatus,
    SimSandbox,
    VendorSimulator,
)

RANK = {SandboxStatus.PENDING: 0, SandboxStatus.PROVISIONING: 1, SandboxStatus.RUNNING: 2}
TERMINAL = frozenset(SandboxStatus) - ACTIVE_STATUSES
EXAMPLES = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True, database=None
)

profiles = st.fixed_dictionaries(
    {
        "quota.max_active": st.integers(1, 8),
        "create_rate.per_s": st.sampled_from([0.5, 2.0, 10.0, math.inf]),
        "create_rate.burst": st.sampled_from([1.0, 3.0, 10.0, math.inf]),
        "pool.slots_per_node": st.sampled_from([1.0, 2.0, 4.0]),
        "pool.max_nodes": st.integers(1, 3),
        "pool.scale_up_lag_s": st.sampled_from([0.0, 2.0, 20.0]),
        "boot.median_s": st.sampled_from([0.01, 1.0, 30.0]),
        "boot.sigma": st.sampled_from([0.0, 0.8]),
        "image.pull_median_s": st.sampled_from([0.0, 5.0]),
        "image.pull_failure_prob": st.sampled_from([0.0, 0.3]),
        "startup.deadline_s": st.sampled_from([10.0, 60.0, 3600.0]),
        "errors.create_transient_prob": st.sampled_from([0.0, 0.2]),
        "errors.boot_crash_prob": st.sampled_from([0.0, 0.3]),
        "errors.exec_death_prob": st.sampled_from([0.0, 0.3]),
    }
)
steps = st.lists(
    st.tuples(
        st.sampled_from(["create", "create", "create", "terminate", "exec", "wait"]),
        st.floats(0.0, 30.0, allow_nan=False),  # vendor seconds before the step
        st.integers(0, 63),  # which sandbox (terminate, exec)
        st.sampled_from([5.0, 60.0, 600.0]),  # lifetime of a created sandbox
    ),
    min_size=1,
    max_size=40,
)


@dataclass
class Observed:
    """What a client and a listener saw: every create attempt and every status each sandbox passed."""

    attempts: list[tuple[float, RejectReason | None]] = field(default_factory=list)
    statuses: dict[str, list[SandboxStatus]] = field(default_factory=dict)
    max_active: int = 0
    accepted: list[str] = field(default_factory=list)


def _play(
    overrides: dict[str, Any], script: list[tuple[str, float, int, float]], seed: int
) -> tuple[VendorSimulator, Observed]:
    """Run a client's script on a fresh simulator, then the clock until every sandbox has ended."""
    clock = VirtualClock()
    sim = VendorSimulator(load_profile("ideal").with_overrides(overrides), seed=seed, clock=clock)
    seen = Observed()

    def on_change(sb: SimSandbox) -> None:
        seen.statuses.setdefault(sb.id, []).append(sb.status)
        seen.max_active = max(seen.max_active, sim.stats()["active"])

    sim.add_listener(on_change)
    for op, wait, pick, lifetime in script:
        clock.run_until(clock.now() + wait)
        if op == "create":
            try:
                sb = sim.create(CreateRequest(image="python:3.12", labels=("prop",), lifetime_s=lifetime))
            except Rejected as exc:
                seen.attempts.append((clock.now(), exc.reason))
            else:
                seen.attempts.append((clock.now(), None))
                seen.accepted.append(sb.id)
        elif seen.accepted and op == "terminate":
            sim.terminate(seen.accepted[pick % len(seen.accepted)])
        elif seen.accepted and op == "exec":
            try:
                target = seen.accepted[pick % len(seen.accepted)]
                sim.exec_start(target, "echo hi", timeout_s=5.0, on_done=lambda _: None)
            except (NotFound, NotRunning):
                pass
        seen.max_active = max(seen.max_active, sim.stats()["active"])
    clock.run(max_events=200_000)  # every lifetime is finite: everything ends
    return sim, seen


@EXAMPLES
@given(profiles, steps, st.integers(0, 3))
def test_active_sandboxes_never_exceed_the_quota(overrides: dict[str, Any], script: list[Any], seed: int) -> None:
    _, seen = _play(overrides, script, seed)
    assert seen.max_active <= overrides["quota.max_active"]
    quota_refusals = [t for t, reason in seen.attempts if reason is RejectReason.QUOTA_EXHAUSTED]
    assert not quota_refusals or seen.max_active == overrides["quota.max_active"]  # refused only when full


@EXAMPLES
@given(profiles, steps, st.integers(0, 3))
def test_the_token_bucket_never_lets_more_than_burst_plus_rate_times_t_through(
    overrides: dict[str, Any], script: list[Any], seed: int
) -> None:
    _, seen = _play(overrides, script, seed)
    rate, burst = overrides["create_rate.per_s"], overrides["create_rate.burst"]
    through = [t for t, reason in seen.attempts if reason is not RejectReason.RATE_LIMITED]
    if math.isinf(rate) or math.isinf(burst):  # no limit: nothing is ever rate limited
        assert len(through) == len(seen.attempts)
        return
    for i, start in enumerate(through):
        for j in range(i, len(through)):
            assert j - i + 1 <= burst + rate * (through[j] - start) + 1e-6, (start, through[j], j - i + 1)


@EXAMPLES
@given(profiles, steps, st.integers(0, 3))
def test_states_only_move_forward_and_every_sandbox_ends_once(
    overrides: dict[str, Any], script: list[Any], seed: int
) -> None:
    sim, seen = _play(overrides, script, seed)
    for sandbox_id in seen.accepted:
        path = seen.statuses[sandbox_id]
        assert path[0] is SandboxStatus.PENDING, path
        ranks = [RANK.get(status, 3) for status in path]
        assert ranks == sorted(ranks), path  # never backwards
        assert sum(status in TERMINAL for status in path) == 1 and path[-1] in TERMINAL, path  # one end, the last
        sb = sim.get(sandbox_id)
        assert sb.status is path[-1] and sb.ended_at is not None and sb.ended_at >= sb.created_at
    stats = sim.stats()
    assert stats["active"] == 0 and stats["created"] == len(seen.accepted)
    assert sum(stats["ended"].values()) == len(seen.accepted)


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(profiles, steps, st.integers(0, 3))
def test_the_same_calls_at_the_same_times_give_the_same_truth(
    overrides: dict[str, Any], script: list[Any], seed: int
) -> None:
    first, _ = _play(overrides, script, seed)
    again, _ = _play(overrides, script, seed)
    assert first.truth() == again.truth()
