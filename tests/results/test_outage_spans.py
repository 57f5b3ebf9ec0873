"""The summaries' "vendor unreachable" line: when a run's vendor could not be reached, in whichever phase it showed.

What a user relies on: a vendor that went away is named with its span and the phases its calls failed in (a vendor
lost while every sandbox boots fails readiness looks, not creates), and scattered resets are not called an outage.
"""

from __future__ import annotations

import pandas as pd

from harness.results.figures.outages import OUTAGE_GAP_S, outage_lines, outage_spans

T0 = 1_796_000_000.0


def _rows(*failures: tuple[float, str | None, str | None]) -> pd.DataFrame:
    """(seconds after T0 the call failed, kind, phase) per rollout; each rollout ran 0.5 s."""
    return pd.DataFrame(
        {
            "t_submit": [T0 + at - 0.5 for at, _, _ in failures],
            "total_s": [0.5] * len(failures),
            "failure_kind": pd.array([kind for _, kind, _ in failures], dtype="string"),
            "failure_phase": pd.array([phase for _, _, phase in failures], dtype="string"),
        }
    )


def test_an_outage_met_only_by_readiness_looks_is_named_with_its_phases() -> None:
    rows = _rows(*[(10.0 + i * 0.1, "transport", "ready") for i in range(12)], (10.5, None, None))
    (span,) = outage_spans(rows)
    assert (span.failures, span.by_phase) == (12, (("ready", 12),))
    assert abs(span.start - (T0 + 10.0)) < 1e-6 and abs(span.duration_s - 1.1) < 1e-6
    (line,) = outage_lines(rows)
    assert "calls failed (transport)" in line and "12 failed: 12 ready" in line
    assert "held creates" not in line  # no create met it: the engine's create gate never closed


def test_creates_and_looks_in_one_outage_are_one_span_counted_by_phase() -> None:
    rows = _rows(
        *[(5.0 + i, "transport", "create") for i in range(3)],
        *[(5.5 + i, "transport", "ready") for i in range(5)],
        (6.0, "rate_limited", "create"),  # not the connection's: not counted
    )
    (span,) = outage_spans(rows)
    assert span.failures == 8 and span.by_phase == (("ready", 5), ("create", 3))
    assert outage_lines(rows)[0].endswith("; the engine held creates meanwhile")


def test_failures_further_apart_than_the_gap_split_and_lone_resets_are_no_outage() -> None:
    gap = OUTAGE_GAP_S + 1.0
    rows = _rows(
        *[(1.0 + i * 0.2, "transport", "exec") for i in range(3)],
        *[(1.4 + gap + i * 0.2, "transport", "create") for i in range(4)],
        (100.0, "transport", "exec"),
        (101.0, "transport", "exec"),  # two resets: under OUTAGE_MIN_FAILURES
    )
    assert [(s.failures, s.by_phase) for s in outage_spans(rows)] == [(3, (("exec", 3),)), (4, (("create", 4),))]
    assert outage_spans(_rows()) == [] and outage_spans(_rows((1.0, "capacity", "create"))) == []
