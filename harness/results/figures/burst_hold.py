"""The burst-hold protocol's figures (issue #32, the public "Scale Invitational" protocol), from the rollouts rows.

N sandboxes are fired at t=0 and each is held until the hold ends (S seconds after its own submit; the burst
submits them all at once), then terminated. The protocol reports four result states, not stampede's outcomes,
so each row is classified here, from the columns every run already writes (docs/results-schema.md):

- **success**: created (`create_s`), ready (`ready_s`) before the hold's end, its command answered (`tti_s`) and
  held to the end: `outcome` ok, or a failure only in `terminate` (after the hold: it was held).
- **partial**: created and ready within the hold, but failed or cut short before the hold's end (a command
  refused, the sandbox died while held, the run stopped).
- **readiness failed**: created, never ready, or ready only after the hold's end (it was never held during it).
- **failed**: the create failed (or never returned), split as the protocol does, by `failure_kind` and `error`:
  `timeout` (a create past its deadline: a `TimeoutError`, which `providers.base.classify_common` records as
  `transport`, or the RL client's `client_startup_deadline`), `network` (`transport` otherwise: refused, reset,
  DNS, TLS), `http` (the vendor answered with a refusal: `rate_limited`, `quota_exhausted`, `capacity`, `image`,
  `create_error`, `auth`, `invalid_request`), and `other` (`harness`, `unknown`, a cancelled or unfinished create:
  none of the three, kept apart rather than hidden in one of them).

Figures, all on the engines' wall clock (the protocol runs at time scale 1, where vendor and wall seconds agree):
allocate (`create_s`) and readiness (`ready_s`) quantiles, the time to reach N held (first submit to the instant
the held count first reached N), the peak held (sandboxes ready and not yet being terminated, at once) and TTI
by submission quartile (rows ordered by `t_submit`, split in four: fairness, whether the last submitted waited
longer). Computed here, printed by `format_burst_hold` and written to summary.json's `burst_hold`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.results.figures.quantiles import SMALL_SAMPLE_MARK, quantiles, supported
from harness.results.read.concurrency import concurrency_at
from harness.results.read.dataset import load_rollout_frame

SCENARIO = "burst-hold"
SUCCESS, PARTIAL, READINESS_FAILED, FAILED = "success", "partial", "readiness_failed", "failed"
STATES: tuple[str, ...] = (SUCCESS, PARTIAL, READINESS_FAILED, FAILED)
CREATE_FAILURES: tuple[str, ...] = ("timeout", "http", "network", "other")
HTTP_KINDS = frozenset(
    {"rate_limited", "quota_exhausted", "capacity", "image", "create_error", "auth", "invalid_request"}
)
TIMEOUT_KINDS = frozenset({"client_startup_deadline"})
COLUMNS: tuple[str, ...] = (
    "t_submit",
    "create_s",
    "ready_s",
    "tti_s",
    "terminate_s",
    "total_s",
    "outcome",
    "failure_kind",
    "failure_phase",
    "error",
    "worker",
    "target_users",
)


@dataclass(frozen=True, slots=True)
class QuartileTTI:
    """One quarter of the rollouts in submission order: how many, when they were submitted, their TTI."""

    quartile: int  # 1..4
    rollouts: int
    answered: int  # with a TTI (its command answered)
    submit_from_s: float  # first and last submit, seconds after the run's first submit
    submit_to_s: float
    tti_p50_s: float  # NaN: none answered
    tti_p99_s: float


@dataclass(frozen=True, slots=True)
class BurstHoldFigures:
    """The protocol's figures for one run."""

    n: int  # the burst's size (`burst_size`): what "N held" counts to
    rollouts: int  # rows: one per attempt (a retried create adds one); the states sum to this
    hold_s: float | None  # None: not recorded (late readiness then cannot be told)
    states: dict[str, int]
    create_failures: dict[str, int]
    ready_late: int  # ready only after the hold's end (counted in readiness failed)
    allocate: dict[str, float]  # create_s quantiles (p50, p95, p99, max)
    readiness: dict[str, float]  # ready_s quantiles
    time_to_n_s: float | None  # first submit to N held at once; None: never reached
    peak_held: int
    quartiles: tuple[QuartileTTI, ...]

    def to_dict(self) -> dict[str, Any]:
        """summary.json's `burst_hold` (JSON: NaN as null)."""
        data = asdict(self)
        return _nulls(data)


def _nulls(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _nulls(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_nulls(item) for item in value]
    return value


def create_failure_kind(kind: Any, error: Any) -> str:
    """Which of the protocol's create failures a failed create is: timeout, http, network or other."""
    kind = str(kind) if isinstance(kind, str) else ""
    text = str(error).lower() if isinstance(error, str) else ""
    if kind in TIMEOUT_KINDS or (kind == "transport" and ("timeout" in text or "timed out" in text)):
        return "timeout"
    if kind == "transport":
        return "network"
    if kind in HTTP_KINDS:
        return "http"
    return "other"


def classify(frame: pd.DataFrame, hold_s: float | None = None) -> pd.Series:
    """Each row's state (success, partial, readiness_failed, failed), by the rules in this module's docstring."""
    created = frame["create_s"].notna()
    ready = created & frame["ready_s"].notna()
    if hold_s is not None:
        late = ready & ((frame["create_s"] + frame["ready_s"]) > hold_s)
    else:
        late = pd.Series(False, index=frame.index)
    outcome = frame["outcome"].astype(str)
    held = frame["tti_s"].notna() & (
        (outcome == "ok") | ((outcome == "failed") & (frame["failure_phase"].astype(str) == "terminate"))
    )
    states = np.select(
        [~created, ~ready | late, held],
        [FAILED, READINESS_FAILED, SUCCESS],
        default=PARTIAL,
    )
    return pd.Series(states, index=frame.index, dtype=object)


def held_intervals(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each ready sandbox's held span in epoch seconds: from ready to the start of its terminate (its row's end
    less the terminate; a row with no end, unfinished, is held to the end of the data)."""
    ready = frame["create_s"].notna() & frame["ready_s"].notna()
    rows = frame[ready]
    t_submit = rows["t_submit"].to_numpy(dtype=float)
    start = t_submit + rows["create_s"].to_numpy(dtype=float) + rows["ready_s"].to_numpy(dtype=float)
    total = rows["total_s"].to_numpy(dtype=float)
    terminate = np.nan_to_num(rows["terminate_s"].to_numpy(dtype=float), nan=0.0)
    end = np.where(np.isnan(total), np.inf, t_submit + total - terminate)
    return start, np.maximum(end, start)


def time_to_n(frame: pd.DataFrame, n: int) -> tuple[float | None, int]:
    """(seconds from the first submit until N sandboxes were held at once, None if never; the peak held). The held
    count only rises at a start, so it is read at each start (`concurrency_at`: half-open spans, one ending at an
    instant no longer held there)."""
    start, end = held_intervals(frame)
    if start.size == 0:
        return None, 0
    instants = np.sort(start)
    counts = concurrency_at(instants, start, end)
    peak = int(counts.max())
    reached = np.flatnonzero(counts >= n) if n > 0 else np.array([], dtype=np.int64)
    if reached.size == 0:
        return None, peak
    return float(instants[reached[0]] - frame["t_submit"].min()), peak


def tti_by_quartile(frame: pd.DataFrame) -> tuple[QuartileTTI, ...]:
    """Rows in submission order (ties by their order in the frame), split in four as evenly as can be."""
    if frame.empty:
        return ()
    ordered = frame.sort_values("t_submit", kind="stable")
    first = float(ordered["t_submit"].iloc[0])
    parts = np.array_split(np.arange(len(ordered)), 4)
    result = []
    for number, positions in enumerate(parts, start=1):
        if positions.size == 0:
            continue
        part = ordered.iloc[positions]
        tti = quantiles(part["tti_s"])
        submits = part["t_submit"].to_numpy(dtype=float)
        result.append(
            QuartileTTI(
                quartile=number,
                rollouts=len(part),
                answered=int(part["tti_s"].notna().sum()),
                submit_from_s=float(submits.min() - first),
                submit_to_s=float(submits.max() - first),
                tti_p50_s=tti["p50"],
                tti_p99_s=tti["p99"],
            )
        )
    return tuple(result)


def _summary(values: pd.Series) -> dict[str, float]:
    found = quantiles(values)
    return {"n": float(values.notna().sum()), **{key: found[key] for key in ("p50", "p95", "p99", "max")}}


def burst_size(frame: pd.DataFrame) -> int:
    """N: the burst's size as its rows record it (`target_users`), else the rows (a retried create adds rows)."""
    if "target_users" in frame and frame["target_users"].notna().any():
        return int(frame["target_users"].max())
    return len(frame)


def burst_hold_figures(frame: pd.DataFrame, hold_s: float | None = None) -> BurstHoldFigures:
    """The protocol's figures from a run's rollouts rows (`COLUMNS`); N is `burst_size`."""
    states = classify(frame, hold_s) if not frame.empty else pd.Series([], dtype=object)
    counts = {state: int((states == state).sum()) for state in STATES}
    failed = frame[states == FAILED] if not frame.empty else frame
    kinds = [
        create_failure_kind(kind, error) for kind, error in zip(failed["failure_kind"], failed["error"], strict=True)
    ]
    created = frame[frame["create_s"].notna()] if not frame.empty else frame
    late = 0
    if hold_s is not None and not frame.empty:
        late = int((frame["ready_s"].notna() & ((frame["create_s"] + frame["ready_s"]) > hold_s)).sum())
    reached, peak = time_to_n(frame, burst_size(frame) if not frame.empty else 0)
    return BurstHoldFigures(
        n=burst_size(frame),
        rollouts=len(frame),
        hold_s=hold_s,
        states=counts,
        create_failures={name: kinds.count(name) for name in CREATE_FAILURES},
        ready_late=late,
        allocate=_summary(frame["create_s"]) if not frame.empty else _summary(pd.Series([], dtype=float)),
        readiness=_summary(created["ready_s"]) if not frame.empty else _summary(pd.Series([], dtype=float)),
        time_to_n_s=reached,
        peak_held=peak,
        quartiles=tti_by_quartile(frame),
    )


def hold_of(manifest: Any) -> float | None:
    """The hold a burst-hold run recorded (run.json `shape.hold_s`), None when absent."""
    shape = manifest.get("shape") if isinstance(manifest, dict) else None
    value = shape.get("hold_s") if isinstance(shape, dict) else None
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _s(value: float | None, level: float | None = None, n: int = 0) -> str:
    """Seconds as printed; a quantile at `level` of `n` samples marked by the one small-sample rule."""
    if value is None or value != value:
        return "-"
    text = f"{value:.3f}" if value < 10 else f"{value:.1f}"
    return text + (SMALL_SAMPLE_MARK if level is not None and not supported(level, n) else "")


def _levels(summary: Mapping[str, float]) -> str:
    n = int(summary.get("n", 0))
    return ", ".join(
        f"{key} {_s(summary[key], level, n)}" for key, level in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
    )


def format_burst_hold(figures: BurstHoldFigures) -> str:
    """The summary's lines for a burst-hold run (wall seconds)."""
    n = figures.n
    attempts = f" in {figures.rollouts} attempts" if figures.rollouts != n else ""
    states = figures.states
    failures = figures.create_failures
    split = ", ".join(f"{name} {failures[name]}" for name in CREATE_FAILURES if failures[name] or name != "other")
    late = f" ({figures.ready_late} ready only after the hold's end)" if figures.ready_late else ""
    hold = f", hold {figures.hold_s:g} s" if figures.hold_s is not None else ""
    lines = [
        f"burst-hold: {n} sandboxes fired at t=0{hold}{attempts}: success {states[SUCCESS]}, partial {states[PARTIAL]}, "
        f"readiness failed {states[READINESS_FAILED]}{late}, failed {states[FAILED]} (create: {split})",
        f"  allocate (create, wall s) {_levels(figures.allocate)}; readiness {_levels(figures.readiness)}",
        (
            f"  {n} held at once after {_s(figures.time_to_n_s)} s (first submit to the {n}th ready); peak held "
            f"{figures.peak_held}"
            if figures.time_to_n_s is not None
            else f"  {n} held at once: never reached; peak held {figures.peak_held}"
        ),
    ]
    for part in figures.quartiles:
        lines.append(
            f"  TTI quartile {part.quartile} (submitted {_s(part.submit_from_s)}..{_s(part.submit_to_s)} s, "
            f"{part.answered}/{part.rollouts} answered): p50 {_s(part.tti_p50_s, 0.5, part.answered)} s, "
            f"p99 {_s(part.tti_p99_s, 0.99, part.answered)} s"
        )
    return "\n".join(lines)


def load_burst_hold(run_dir: Path, manifest: Mapping[str, Any]) -> BurstHoldFigures | None:
    """A burst-hold run's figures from its folder; None for any other scenario."""
    if manifest.get("scenario") != SCENARIO:
        return None
    frame = load_rollout_frame(Path(run_dir), COLUMNS)
    return burst_hold_figures(frame, hold_of(dict(manifest)))
