"""Every built-in profile against its public figures (providers/sim/core/targets/), on the VirtualClock.

`stampede calibrate` prints the same rows; providers/sim/README.md holds its output, checked here to be current.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from foundation.sandbox_client import CLIENT_DEADLINE_KIND, CLIENTS
from providers.sim.core.calibration import calibrate, computesdk_stats, load_figures, render, render_sweep, sweep
from providers.sim.core.experiments import simulate_burst
from providers.sim.core.profile import profile_names
from tests.support.commands import stampede

README = Path(__file__).resolve().parents[2] / "providers" / "sim" / "README.md"


@pytest.mark.parametrize("name", profile_names())
def test_profile_within_tolerance_of_every_public_figure(name: str) -> None:
    rows = calibrate(name)
    bad = [(r.figure.protocol, r.figure.stat, r.simulated) for r in rows if not r.ok]
    assert not bad, bad


def test_readme_calibration_tables_are_the_generators_output() -> None:
    text = README.read_text()
    for name in profile_names():
        assert render(name, calibrate(name), 10) in text, f"regenerate the {name} table (see the README's command)"


def test_computesdk_stats_trim_five_percent_then_nearest_rank() -> None:
    values = list(range(1, 101))  # trims 1-5 and 96-100
    assert computesdk_stats(values) == {"p50": 50.5, "p95": 91, "p99": 95}


def test_modal_like_960_shows_both_symptoms_with_retries() -> None:
    r = simulate_burst("modal-like", 960, seed=0, client=CLIENTS["swe-rex-uni-agent-pre47"])
    assert r.attempt_failures[CLIENT_DEADLINE_KIND] >= 0.3 * 960  # the client's deadline, not the vendor's
    assert r.startups()[-1] >= 600.0  # tens of minutes, in the same run
    assert r.failure_rate < 0.10  # most start in the end; the rest ran out of the client's 900 s init budget


def test_modal_like_starter_quota_via_override() -> None:
    from providers.sim.core.profile import load_profile

    starter = load_profile("modal-like").with_overrides({"quota.max_active": 100})
    r = simulate_burst(starter, 300, seed=1)
    assert r.failures()["QUOTA_EXHAUSTED"] >= 195


def test_readme_names_the_generating_command() -> None:
    assert re.search(r"stampede calibrate", README.read_text())


def test_prime_like_held_burst_waits_in_pending_past_115s() -> None:
    """verifiers PR #2414: under load Prime's sandboxes sit in PENDING past 115 s. A burst past the warm pool,
    each sandbox held for a rollout's length, leaves the rest waiting for new hosts (vendor seconds, VirtualClock)."""
    from providers.sim.core.calibration import HELD_BURST_HOLD_S, HELD_BURST_N

    r = simulate_burst("prime-like", HELD_BURST_N, seed=0, hold_s=HELD_BURST_HOLD_S)
    assert r.pending_max > 115.0
    assert r.pending_p99 > 115.0
    assert r.pending_share_over(115.0) >= 0.25  # the 512 past the 1,024 warm slots, of 1,536
    assert r.never_left_pending() == 0 and r.failure_rate < 0.02  # they wait; they do not fail


@pytest.mark.parametrize(("n", "hold_s"), [(1536, 0.0), (960, 600.0)], ids=["no-holds", "within-warm-pool"])
def test_prime_like_pending_stays_short_without_holds_or_within_the_warm_pool(n: int, hold_s: float) -> None:
    """The control: the same burst released after its first command frees slots in seconds, and a held burst
    that fits the warm pool never queues, so the held burst's figure comes from the holds and the pool size."""
    r = simulate_burst("prime-like", n, seed=0, hold_s=hold_s)
    assert 0.0 <= r.pending_max < 30.0
    assert r.pending_share_over(115.0) == 0.0


def test_pending_time_is_acceptance_to_placement_and_holds_only_delay_the_terminate() -> None:
    held = simulate_burst("ideal", 50, seed=3, hold_s=100.0)
    free = simulate_burst("ideal", 50, seed=3)
    assert [s.tti_s for s in held.samples] == [s.tti_s for s in free.samples]  # the hold starts after the command
    assert all(s.pending_s is not None and s.pending_s >= 0.0 for s in held.samples if s.ok)
    assert held.stats["ended"] == free.stats["ended"] == {"TERMINATED": 50}  # every sandbox let go, by the client
    assert free.stats["now"] < 100.0 <= held.stats["now"]  # ... 100 vendor seconds after its command when held
    with pytest.raises(ValueError):
        simulate_burst("ideal", 1, hold_s=-1.0)


@pytest.mark.parametrize(
    ("override", "failing"),
    [
        ("boot.congestion_knee=64", "modal-like: burst/p95"),  # 100 at once already past the knee: a slow burst
        ("boot.congestion_knee=512", "modal-like: burst960/init_failure_rate"),  # 960 no longer collapses
        ("boot.congestion_exponent=3", "modal-like: burst960-retries/startup_max"),  # no tens-of-minutes startups
    ],
)
def test_calibrate_fails_naming_the_check_when_a_value_is_moved_where_the_public_figures_rule_it_out(
    override: str, failing: str
) -> None:
    done = stampede("calibrate", "modal-like", "--seeds", "2", "--profile-set", override, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("calibration FAILED") and failing in last


def test_calibrate_passes_at_the_profiles_own_values() -> None:
    done = stampede("calibrate", "modal-like", "--seeds", "2", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAILED" not in done.stdout and "| NO |" not in done.stdout


def test_every_point_figure_has_a_window_from_the_public_records_own_spread() -> None:
    """Windows, not a blanket percentage: each public value sits inside its window, every window says where it
    comes from, and none is the old 'anything from 5% to 100%' for a figure that has a public value."""
    for name in profile_names():
        for fig in load_figures(name):
            assert fig.spread, (name, fig.name)
            if fig.public is None:
                continue
            assert fig.low is not None and fig.high is not None, (name, fig.name)
            assert fig.low <= fig.public <= fig.high, (name, fig.name)
            if fig.stat != "success":
                assert fig.high / fig.low < 12, (name, fig.name)  # a month's spread, not an open door


def test_sweep_tabulates_the_960_outcome_and_names_the_failing_checks() -> None:
    points = sweep("modal-like", "boot.congestion_knee", ["64", "128", "512"], seeds=2)
    assert [p.value for p in points] == ["64", "128", "512"]
    assert "burst/p95" in points[0].failing and points[1].failing == []
    assert points[2].failure_960 < 0.05 < points[1].failure_960  # a knee past 960 leaves nothing to collapse
    table = render_sweep("modal-like", "boot.congestion_knee", points, 2)
    assert "| 128 (profile) |" in table and "burst960/init_failure_rate" in table.splitlines()[-1]


def test_calibrate_sweep_writes_the_figure(tmp_path: Path) -> None:
    out = tmp_path / "sweep.png"
    done = stampede(
        "calibrate", "modal-like", "--seeds", "1", "--sweep", "boot.congestion_exponent=2,6", "--figure", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| 6 (profile) |" in done.stdout
    for args, said in [
        (("modal-like", "--sweep", "boot.nope=1"), "boot.nope"),
        (("modal-like", "--sweep", "client.nope=1"), "unknown client field 'nope'"),
        (("modal-like", "e2b-like", "--sweep", "quota.max_active=1"), "exactly one PROFILE"),
        (("modal-like", "--figure", str(out)), "--figure draws a sweep"),
    ]:
        bad = stampede("calibrate", *args)
        assert bad.returncode == 2 and said in bad.stderr and bad.stderr.count("\n") == 1, (args, bad.stderr)


def test_public_trimmed_quantiles_are_printed_beside_stampedes_untrimmed_ones() -> None:
    """computesdk trims 5% at each end, so its "p99" is about the raw p94: the table compares like for like and
    shows stampede's own untrimmed quantile of the same runs beside it (on a heavy tail, far above)."""
    rows = calibrate("modal-like-2026-04", seeds=3)
    p99 = next(r for r in rows if r.figure.name == "sequential/p99")
    assert p99.untrimmed is not None and p99.untrimmed > 1.5 * p99.simulated
    text = render("modal-like-2026-04", rows, 3)
    assert "| p99 (5% trimmed) |" in text and "| untrimmed |" in text


def test_readme_sweep_tables_and_provenance_counts_are_the_generators_output() -> None:
    """providers/sim/README.md's sensitivity tables come from the command it shows (figure included)."""
    from harness.cli.profiles import provenance_table
    from providers.sim.core.profile import load_profile

    text = README.read_text()
    command = re.search(r"^stampede calibrate modal-like --seeds 3 (--sweep .*?) --figure (\S+)", text, re.M)
    assert command, "the README shows the sweep command"
    assert (README.parent.parent.parent / command.group(2)).is_file()
    for key, values in re.findall(r"--sweep (\S+?)=(\S+)", command.group(1)):
        points = sweep("modal-like", key, values.split(","), seeds=3)
        assert render_sweep("modal-like", key, points, 3) in text, f"regenerate the {key} sweep (see the README)"
    for name in profile_names():
        assert provenance_table(load_profile(name)).splitlines()[0] in text, f"regenerate {name}'s provenance count"
