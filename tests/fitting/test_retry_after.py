"""Whether a vendor's 429s past its create-rate limit carried Retry-After, and how long (issue #31, Deliver 1).

Read off the ops of the creates refused for the rate limit (`retry_after_s`, harness.engine.rollout). No profile
setting holds it, so the fit names it beside the profile (printed, and comments in the TOML), never as a value.
The fast tests feed fixed observations; the slow one runs the embedded stub vendor with a small create bucket.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness.cli.calibrate import render_fit
from harness.fitting.fit import fit_profile, profile_toml
from harness.fitting.limits import RETRY_AFTER_KEY, RetryAfterFit, fit_limits
from harness.fitting.observations import CreateTimeline, ProtocolObservation, join_timelines, observations_from_run
from providers.sim.core.profile import load_profile
from tests.support.commands import stampede


def _burst(waits: tuple[float | None, ...] | None, refused: int = 4) -> ProtocolObservation:
    """A burst of 5 let in and `refused` turned away for the rate limit, whose ops carried `waits` (None: the run's
    ops did not record it)."""
    accepted = tuple(0.01 * k for k in range(5))
    return ProtocolObservation(
        protocol="burst",
        concurrency=5 + refused,
        attempts=5 + refused,
        tti_s=(1.0,) * 5,
        quantiles={"p50": 1.0, "p90": 1.0},
        trimmed=0.0,
        success_rate=5 / (5 + refused),
        failures={"rate_limited@create": refused} if refused else {},
        source="synthetic",
        creates=CreateTimeline(
            run="synthetic",
            accepted_s=accepted,
            ended_s=(math.inf,) * 5,
            refused_s={"rate_limited": tuple((0.05, 0.06) for _ in range(refused))} if refused else {},
            retry_after_s=waits,
        ),
    )


def test_429s_with_retry_after_give_its_share_median_and_p90() -> None:
    fit = fit_limits([_burst((0.2, 0.4, None, 0.3))])
    assert fit.retry_after == RetryAfterFit(limited=4, carried_s=(0.2, 0.3, 0.4))
    assert fit.retry_after.median_s == 0.3 and fit.retry_after.p90_s == 0.4
    said = fit.observed[RETRY_AFTER_KEY]
    assert said.startswith("carried by 3 of 4 creates refused for the rate limit: median 0.3 vendor s, p90 0.4 s")
    assert "1 without" in said and "no profile setting holds it" in said
    assert RETRY_AFTER_KEY not in fit.unidentified and RETRY_AFTER_KEY not in fit.fitted


def test_429s_without_retry_after_say_it_was_absent() -> None:
    fit = fit_limits([_burst((None,) * 4)])
    assert fit.retry_after == RetryAfterFit(limited=4, carried_s=())
    assert fit.retry_after.median_s is None
    assert fit.observed[RETRY_AFTER_KEY].startswith("absent: none of 4 creates refused for the rate limit carried one")


def test_no_429_or_none_recorded_leaves_it_unidentified() -> None:
    unseen = fit_limits([_burst((), refused=0)])
    assert unseen.retry_after is None and not unseen.observed
    assert unseen.unidentified[RETRY_AFTER_KEY].startswith("no create was refused for the rate limit (no 429 seen)")
    old = fit_limits([_burst(None)])  # 429s counted, ops from before the column: unknown, not absent
    assert old.retry_after is None and not old.observed
    assert old.unidentified[RETRY_AFTER_KEY].startswith("the runs' 429s did not record it")


def test_a_runs_stages_join_their_retry_afters() -> None:
    first, second, old = _burst((0.2, None)).creates, _burst((0.5,)).creates, _burst(None).creates
    assert first is not None and second is not None and old is not None
    joined = join_timelines([first, second])
    assert joined is not None and sorted(joined.retry_after_s or (), key=str) == [0.2, 0.5, None]
    unknown = join_timelines([old, old])
    assert unknown is not None and unknown.retry_after_s is None


@pytest.mark.parametrize(
    ("waits", "printed"),
    [
        ((1.0, 1.0, 2.0, 1.0), "carried by 4 of 4 creates refused for the rate limit: median 1 vendor s, p90 2 s"),
        ((None,) * 4, "absent: none of 4 creates refused for the rate limit carried one"),
    ],
)
def test_the_printed_fit_and_the_profile_name_it(waits: tuple[float | None, ...], printed: str) -> None:
    prior = load_profile("e2b-like")
    result = fit_profile([_burst(waits)], prior, "ra")
    shown = render_fit(result)
    seen = shown.split("Seen in the runs, with no profile setting to hold it")[1].split("Not identifiable")[0]
    assert f"- {RETRY_AFTER_KEY}: {printed}" in seen
    text = profile_toml(result)
    assert f"# {RETRY_AFTER_KEY} (seen; no profile setting): {printed}" in text
    parsed = tomllib.loads(text)
    assert set(parsed["create_rate"]) == set(
        tomllib.loads(profile_toml(fit_profile([_burst(())], prior, "x")))["create_rate"]
    )


def test_a_fit_with_no_429_names_it_unidentified_in_print_and_profile() -> None:
    result = fit_profile([_burst((), refused=0)], load_profile("e2b-like"), "calm")
    unidentified = render_fit(result).split("Not identifiable from these runs")[1]
    assert f"- {RETRY_AFTER_KEY}: no create was refused for the rate limit (no 429 seen)" in unidentified
    assert f"# {RETRY_AFTER_KEY}: not identifiable from these runs: no create was refused" in profile_toml(result)


@pytest.mark.slow
def test_a_stub_run_past_its_create_bucket_writes_retry_after_to_ops_and_the_fit_reads_it(tmp_path: Path) -> None:
    """A burst of 15 against a stub vendor whose bucket holds 5 (refilled at 2/s): the 10 or so creates past it get
    the simulated vendor's 429, whose Retry-After header counts whole seconds, at least one (the wait until its next
    token is under 0.5 s): 1.0 on each refused create's op row, null on every other."""
    done = stampede(
        "run", "--provider", "stub", "--profile", "e2b-like", "--out", str(tmp_path), "--run-id", "ra",
        "--progress-interval", "0", "--commands", "true", "--scenario", "burst", "--users", "15",
        "--profile-set", "create_rate.burst=5", "--profile-set", "create_rate.per_s=2",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = tmp_path / "ra"
    ops = pq.read_table(run / "ops").to_pandas()
    limited = ops[(ops["op"] == "create") & (ops["failure_kind"] == "rate_limited")]
    assert len(limited) >= 5, ops[["op", "ok", "failure_kind"]]
    assert (limited["retry_after_s"] == 1.0).all()
    assert ops.drop(limited.index)["retry_after_s"].isna().all()
    fit = fit_limits(observations_from_run(run))
    assert fit.retry_after == RetryAfterFit(limited=len(limited), carried_s=(1.0,) * len(limited))
    out = tmp_path / "ra.toml"
    done = stampede("calibrate", "--fit", str(run), "--name", "ra", "--prior", "e2b-like", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    n = len(limited)
    assert f"- {RETRY_AFTER_KEY}: carried by {n} of {n} creates refused for the rate limit: median 1 vendor s" in (
        done.stdout
    )
