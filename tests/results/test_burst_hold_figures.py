"""The burst-hold protocol's figures on hand-built rows: the four states, the create-failure split, time to N held,
the peak held and TTI by submission quartile (harness.results.figures.burst_hold)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from harness.results.figures.burst_hold import (
    FAILED,
    PARTIAL,
    READINESS_FAILED,
    SUCCESS,
    burst_hold_figures,
    classify,
    create_failure_kind,
    format_burst_hold,
    hold_of,
    time_to_n,
    tti_by_quartile,
)


def row(**values: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "t_submit": 1000.0,
        "create_s": 0.5,
        "ready_s": 1.0,
        "tti_s": 1.6,
        "terminate_s": 0.2,
        "total_s": 10.2,
        "outcome": "ok",
        "failure_kind": None,
        "failure_phase": None,
        "error": None,
        "worker": "w1",
    }
    return base | values


def test_each_state_by_its_rule() -> None:
    frame = pd.DataFrame(
        [
            row(),  # held to the end
            row(outcome="failed", failure_kind="transport", failure_phase="terminate", error="x"),  # after the hold
            row(outcome="failed", failure_kind="died_during_exec", failure_phase="exec", tti_s=None),  # died held
            row(outcome="failed", failure_kind="exec_error", failure_phase="exec"),  # its hold's check refused
            row(outcome="cancelled", failure_phase="exec"),  # the run stopped during the hold
            row(outcome="failed", failure_kind="ready_timeout", failure_phase="ready", ready_s=None, tti_s=None),
            row(outcome="failed", failure_kind="capacity", failure_phase="create", create_s=None, ready_s=None),
            row(outcome="cancelled", failure_phase="create", create_s=None, ready_s=None, tti_s=None),
        ]
    )
    assert classify(frame).tolist() == [
        SUCCESS,
        SUCCESS,
        PARTIAL,
        PARTIAL,
        PARTIAL,
        READINESS_FAILED,
        FAILED,
        FAILED,
    ]


def test_ready_after_the_hold_is_readiness_failed_only_when_the_hold_is_known() -> None:
    frame = pd.DataFrame([row(create_s=2.0, ready_s=4.0), row()])
    assert classify(frame, hold_s=5.0).tolist() == [READINESS_FAILED, SUCCESS]
    assert classify(frame).tolist() == [SUCCESS, SUCCESS]
    figures = burst_hold_figures(frame, hold_s=5.0)
    assert figures.ready_late == 1
    assert "1 ready only after the hold's end" in format_burst_hold(figures)


def test_create_failures_split_timeout_http_network_other() -> None:
    assert create_failure_kind("transport", "TimeoutError") == "timeout"
    assert create_failure_kind("transport", "ReadTimeout: timed out") == "timeout"
    assert create_failure_kind("client_startup_deadline", "Runtime did not start") == "timeout"
    assert create_failure_kind("transport", "ConnectionRefusedError: [Errno 111]") == "network"
    for kind in ("rate_limited", "quota_exhausted", "capacity", "create_error", "auth", "invalid_request", "image"):
        assert create_failure_kind(kind, "ProviderError: 429") == "http"
    assert create_failure_kind("harness", "bug") == "other"
    assert create_failure_kind(None, None) == "other"


def test_four_states_sum_to_n_and_split_counts() -> None:
    frame = pd.DataFrame(
        [
            row(),
            row(
                outcome="failed", failure_kind="transport", failure_phase="create", create_s=None, error="TimeoutError"
            ),
            row(outcome="failed", failure_kind="transport", failure_phase="create", create_s=None, error="Reset"),
            row(outcome="failed", failure_kind="rate_limited", failure_phase="create", create_s=None, error="429"),
        ]
    )
    figures = burst_hold_figures(frame)
    assert sum(figures.states.values()) == 4
    assert figures.states[FAILED] == 3
    assert figures.create_failures == {"timeout": 1, "http": 1, "network": 1, "other": 0}


def test_time_to_n_is_the_nth_ready_while_all_are_still_held() -> None:
    # ready at submit + create + ready: 1001.5, 1003.0 and 1006.0; held until total - terminate
    frame = pd.DataFrame(
        [
            row(),
            row(create_s=1.0, ready_s=2.0, total_s=20.0),
            row(create_s=2.0, ready_s=4.0, total_s=20.0),
        ]
    )
    reached, peak = time_to_n(frame, 3)
    assert reached == 6.0 and peak == 3
    early_end = frame.assign(total_s=[5.2, 20.0, 20.0])  # the first one gone (terminating at 1005) before the third
    reached, peak = time_to_n(early_end, 3)
    assert reached is None and peak == 2
    figures = burst_hold_figures(early_end)
    assert figures.time_to_n_s is None and figures.peak_held == 2
    assert "never reached; peak held 2" in format_burst_hold(figures)


def test_time_to_n_counts_from_the_first_submit() -> None:
    frame = pd.DataFrame([row(t_submit=1000.0), row(t_submit=1002.0, create_s=0.5, ready_s=1.0)])
    reached, _ = time_to_n(frame, 2)
    assert reached == 3.5  # the second ready at 1003.5


def test_quartiles_in_submission_order() -> None:
    # 8 rows submitted in reverse order of the frame: the last submitted are slowest
    rows = [row(t_submit=1000.0 + i, tti_s=float(i + 1)) for i in range(8)]
    frame = pd.DataFrame(rows[::-1])
    parts = tti_by_quartile(frame)
    assert [part.rollouts for part in parts] == [2, 2, 2, 2]
    assert [part.tti_p50_s for part in parts] == [1.0, 3.0, 5.0, 7.0]
    assert [part.tti_p99_s for part in parts] == [2.0, 4.0, 6.0, 8.0]
    assert parts[3].submit_from_s == 6.0 and parts[3].submit_to_s == 7.0
    text = format_burst_hold(burst_hold_figures(frame))
    for number in (1, 2, 3, 4):
        assert f"TTI quartile {number}" in text


def test_quartile_without_answers_is_nan_and_json_null() -> None:
    rows = [row(t_submit=1000.0 + i) for i in range(4)] + [
        row(t_submit=1010.0 + i, tti_s=None, outcome="failed", failure_phase="exec") for i in range(4)
    ]
    figures = burst_hold_figures(pd.DataFrame(rows))
    last = figures.quartiles[-1]
    assert last.answered == 0 and math.isnan(last.tti_p50_s)
    assert figures.to_dict()["quartiles"][-1]["tti_p50_s"] is None


def test_hold_of_reads_the_shape() -> None:
    assert hold_of({"shape": {"shape": "burst-hold", "hold_s": 3.0}}) == 3.0
    assert hold_of({"shape": None}) is None
    assert hold_of({}) is None


def test_n_is_the_burst_size_when_a_retried_create_adds_rows() -> None:
    failed_attempt = row(
        outcome="failed", failure_kind="capacity", failure_phase="create", create_s=None, ready_s=None, tti_s=None
    )
    frame = pd.DataFrame([row(), row(), failed_attempt]).assign(target_users=2)
    figures = burst_hold_figures(frame)
    assert figures.n == 2 and figures.rollouts == 3
    assert figures.time_to_n_s is not None and figures.peak_held == 2  # the two held are all of N
    assert "2 sandboxes fired at t=0 in 3 attempts" in format_burst_hold(figures)
