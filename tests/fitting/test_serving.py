"""The serving queue fitted from what each create found queued ahead of it (harness/fitting/serving.py).

Fit recovery on the VirtualClock: a ramp is simulated through a serving queue of known costs, each request it served
written down as the harness's ops and the vendor's truth would record it (when sent, when served), read back by
`queue_samples` as a real run's are, and fitted: the costs come back within 2% (0.3994, 0.2005 and 0.3001 ms for
0.4, 0.2 and 0.3). Then what the fit must not claim: no overlap of creates with live sandboxes' requests leaves the
queue at its prior and says why, and a profile fitted with it says it is fitted, from which creates, and that it is
the trial machine's serving loop.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable, Iterator

import pandas as pd
import pytest

from foundation.quantiles import nearest_rank
from harness.fitting.fit import fit_profile, profile_toml
from harness.fitting.observations import QUANTILES, ProtocolObservation
from harness.fitting.predict import intake_caveat, predict_shapes, shapes_for
from harness.fitting.queue_rows import QueueSample, queue_samples
from harness.fitting.serving import KEYS, MACHINE, fit_serving
from providers.sim.core import serving_queue
from providers.sim.core.profile import Profile, load_profile, parse_profile
from providers.sim.core.timed_ramp import RampTiming, simulate_timed_ramp

TRUE = {"create": 0.0004, "exec": 0.0002, "terminate": 0.0003}  # vendor seconds a request


@pytest.fixture
def served_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, float, float]]]:
    """Every request the serving queue serves: (kind, when it was made, when it was served)."""
    log: list[tuple[str, float, float]] = []
    original = serving_queue.ServingQueue.submit

    def submit(self: serving_queue.ServingQueue, kind: str, then: Callable[[], None]) -> None:
        made = self.clock.now()

        def served() -> None:
            log.append((kind, made, self.clock.now()))
            then()

        original(self, kind, served)

    monkeypatch.setattr(serving_queue.ServingQueue, "submit", submit)
    yield log


def _run_records(log: list[tuple[str, float, float]], stage: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The log as a run records it: one op per request (its send, answered when served) and the vendor's truth of
    when it served it (a create accepted, a command started, a sandbox ended), each request its own rollout."""
    ops, truth, frame = [], [], []
    column = {"create": "created_wall", "exec": "first_exec_start_wall", "terminate": "ended_wall"}
    for i, (kind, made, served) in enumerate(log):
        if kind not in column:
            continue
        rid, sid = f"r{i}", f"sb{i}"
        frame.append({"rollout_id": rid, "sandbox_id": sid, "stage": stage})
        ops.append({"rollout_id": rid, "op": kind, "t_start": made, "dur_s": served - made + 0.0001, "ok": True})
        row = {
            "id": sid,
            "created_wall": float("nan"),
            "ended_wall": float("nan"),
            "first_exec_start_wall": float("nan"),
        }
        row[column[kind]] = served
        truth.append(row | {"ready_wall": float("nan")})
    return pd.DataFrame(frame), pd.DataFrame(ops), pd.DataFrame(truth)


def _observation(rows: tuple[QueueSample, ...], protocol: str = "ramp", **failures: int) -> ProtocolObservation:
    samples = (0.01, 0.02, 0.03)
    return ProtocolObservation(
        protocol=protocol,
        concurrency=200,
        attempts=len(samples),
        tti_s=samples,
        quantiles={k: nearest_rank(samples, q) for k, q in QUANTILES.items()},
        trimmed=0.0,
        success_rate=1.0,
        failures=failures,
        source=f"test {protocol}",
        queue=rows,
    )


def _ramp_rows(profile: Profile, log: list[tuple[str, float, float]], users: list[int]) -> tuple[QueueSample, ...]:
    timing = RampTiming(tuple(1.0 for _ in users), 0.001, 0.0, 0.0005, None)
    simulate_timed_ramp(profile, users, timing, seed=0)
    frame, ops, truth = _run_records(log, "ramp")
    return queue_samples(frame, ops, truth, 1.0)["ramp"]


def test_the_fit_recovers_known_per_kind_costs_within_two_percent(served_log: list[tuple[str, float, float]]) -> None:
    costs = {f"serving.{kind}_s": value for kind, value in TRUE.items()}
    rows = _ramp_rows(load_profile("ideal").with_overrides(costs), served_log, [50, 150, 300])
    assert len(rows) > 1000
    fit = fit_serving([_observation(rows)])
    assert fit.serving is not None
    for kind, value in TRUE.items():
        assert fit.serving.cost(kind) == pytest.approx(value, rel=0.02), kind
    # the readiness requests are never dated by the vendor's records: left at the prior, and said why
    assert fit.serving.ready_s == 0.0 and "look" in fit.unidentified["serving.ready_s"]
    assert MACHINE in fit.note and "creates of ramp@200" in fit.note


def test_no_overlap_with_live_sandboxes_leaves_the_queue_at_its_prior_and_says_why(
    served_log: list[tuple[str, float, float]],
) -> None:
    """Sandboxes that boot for seconds: in a ramp of a few seconds no command or terminate is ever queued ahead of
    a create, so only the creates' own time shows, which the create intake already carries (admission.py)."""
    slow = load_profile("ideal").with_overrides(
        {"boot.median_s": 5.0, **{f"serving.{k}_s": v for k, v in TRUE.items()}}
    )
    rows = _ramp_rows(slow, served_log, [50, 100])
    fit = fit_serving([_observation(rows)])
    assert fit.serving is None and fit.fitted == {}
    assert set(fit.unidentified) == set(KEYS)
    assert "never busy" in fit.unidentified["serving.exec_s"]


def test_bursts_refused_stages_and_a_real_vendor_give_no_rows_to_fit() -> None:
    rows = tuple(QueueSample(0.001 * (i % 7), (i % 7, 0, i % 3, i % 2)) for i in range(500))
    for observations in ([_observation(rows, "burst")], [_observation(rows, rate_limited=3)], [_observation(())]):
        fit = fit_serving(observations)
        assert fit.serving is None and "no staggered or ramp stage" in fit.unidentified["serving.create_s"]
    assert queue_samples(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), 1.0) == {}


def test_a_fitted_profile_says_the_queue_is_fitted_and_whose_it_is(served_log: list[tuple[str, float, float]]) -> None:
    """The profile a trial writes: [serving] fitted, naming the creates it came from and that it is the trial
    machine's serving loop; the create intake folded into it (none apart, or each create would wait twice); without
    the overlap, no [serving] section and a comment saying why."""
    costs = {f"serving.{kind}_s": value for kind, value in TRUE.items()}
    rows = _ramp_rows(load_profile("ideal").with_overrides(costs), served_log, [50, 150, 300])
    narrow = dataclasses.replace(_observation(()), protocol="sequential", concurrency=1)
    result = fit_profile([narrow, _observation(rows)], load_profile("ideal"), "served")
    assert result.profile.serving is not None
    assert result.profile.serving.cost("exec") == pytest.approx(TRUE["exec"], rel=0.10)
    text = profile_toml(result)
    parsed = parse_profile(tomllib.loads(text))
    assert parsed.serving == result.profile.serving
    assert "fitted" in parsed.sources["serving.exec_s"] and MACHINE in parsed.labels["serving.exec_s"]
    assert parsed.account is not None and parsed.account.admit_per_s == float("inf")
    assert "serving queue takes the creates" in parsed.sources["account.admit_per_s"]
    plain = fit_profile([narrow], load_profile("ideal"), "plain")
    text = profile_toml(plain)
    assert "\n[serving]\n" not in text and "# serving.exec_s: not identifiable from these runs" in text


def test_the_prediction_carries_the_queue_and_says_whose_it_is(served_log: list[tuple[str, float, float]]) -> None:
    """A burst of 960 predicted from a fit that found the queue: its first sandboxes' requests slow the creates
    behind them, so the predicted TTI is many times the same fit's without the queue; each refit carries its own
    costs (its rows drawn again), and the prediction names the queue as the trial machine's serving loop."""
    costs = {f"serving.{kind}_s": value for kind, value in TRUE.items()}
    rows = _ramp_rows(load_profile("ideal").with_overrides(costs), served_log, [50, 150, 300])
    narrow = dataclasses.replace(_observation(()), protocol="sequential", concurrency=1)
    observations = [narrow, _observation(rows)]
    fitted = fit_profile(observations, load_profile("ideal"), "served").profile
    without = dataclasses.replace(fitted, serving=None)
    shapes = shapes_for("burst", 960)
    served = predict_shapes(fitted, shapes, observations=observations, prior=load_profile("ideal"), bootstrap=3)
    plain = predict_shapes(without, shapes, seeds=3, bootstrap=0)
    assert served.stages[0].stats["p50"].value > 5 * plain.stages[0].stats["p50"].value
    low, high = served.stages[0].stats["p50"].low, served.stages[0].stats["p50"].high
    assert low < high
    assert "carries a serving queue" in served.interval_from and "serving loop, not the vendor" in served.interval_from
    assert "serving queue" not in intake_caveat(without, shapes, None)
