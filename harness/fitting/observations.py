"""What one protocol of one run showed, in the one shape every fit reads.

Our own runs give raw TTI samples; published benchmark files often give only trimmed quantiles. Both become a
`ProtocolObservation`, so the fit does not care where the evidence came from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from foundation.quantiles import nearest_rank
from harness.fitting.queue_rows import QueueSample, queue_samples
from harness.results.read.dataset import RunInfo, load_rollouts, load_truth, read_run_info, read_table
from harness.results.read.layout import OPS_TABLE, files_of
from harness.results.read.steps import has_steps, load_steps
from harness.results.read.vendor_time import to_vendor_seconds, usable_truth

QUANTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}
RETRY_AFTER = "retry_after_s"  # the ops column: a failed call's Retry-After (harness.wire.records.OpRecord)


@dataclass(frozen=True, slots=True)
class CreateTimeline:
    """One stage's creates on its run's vendor clock: when each was let in or turned away, and how long the
    sandboxes it made lived. The vendor's limits are fitted from these times (harness.fitting.limits), because counts
    alone mislead over a stage held in time: its accepted creates are the bucket's depth plus its refill, and its
    sandboxes end and are replaced while the cap holds. Seconds count from the run's first create, so the stages of
    one run share one clock, as they share the vendor's create bucket."""

    run: str  # the run folder: its stages share this clock and the vendor's bucket
    accepted_s: tuple[float, ...]  # each create the vendor let in (a sandbox was made), sorted
    ended_s: tuple[float, ...]  # when each of those sandboxes ended, same order (inf: not seen to end)
    # kind of a create turned away -> (sent, answered) of each, sorted: the vendor refused it somewhere between
    refused_s: Mapping[str, tuple[tuple[float, float], ...]]
    # when each create (let in or turned away) was sent, sorted, on the same clock (the first may fall just before 0:
    # the clock starts at the vendor's first decision): the harness's own pace, which a predicted burst sends at
    sent_s: tuple[float, ...] = ()
    # the Retry-After of each create call failed `rate_limited` (its op's `retry_after_s`, in vendor seconds; None: it
    # carried none), unordered; None: not known (the run's ops predate the column). A 429's own, or the client's
    # backoff giving up without sending (the stub and Prime adapters' throttle gate), which carries none either
    retry_after_s: tuple[float | None, ...] | None = None


def join_timelines(timelines: Sequence[CreateTimeline | None]) -> CreateTimeline | None:
    """The stages of one run as one timeline (a protocol's observation merged from its stages); None when none of
    them has times. Stages of different runs do not share a clock: a ValueError."""
    known = [t for t in timelines if t is not None]
    if not known:
        return None
    runs = {t.run for t in known}
    if len(runs) > 1:
        raise ValueError(f"create times of {len(runs)} runs cannot be joined: each run has its own clock")
    pairs = sorted((a, e) for t in known for a, e in zip(t.accepted_s, t.ended_s, strict=True))
    kinds = dict.fromkeys(k for t in known for k in t.refused_s)
    return CreateTimeline(
        run=known[0].run,
        accepted_s=tuple(a for a, _ in pairs),
        ended_s=tuple(e for _, e in pairs),
        refused_s={k: tuple(sorted(v for t in known for v in t.refused_s.get(k, ()))) for k in kinds},
        sent_s=tuple(sorted(s for t in known for s in t.sent_s)),
        retry_after_s=None
        if all(t.retry_after_s is None for t in known)
        else tuple(v for t in known for v in t.retry_after_s or ()),
    )


@dataclass(frozen=True, slots=True)
class ProtocolObservation:
    protocol: str  # "sequential" | "staggered" | "burst" | "ramp" | "steady" (what the run's shape was)
    concurrency: int  # sandboxes asked for at once (burst width; 1 for sequential; peak for a ramp)
    attempts: int  # creates asked for
    tti_s: tuple[float, ...]  # raw TTI samples of the successes, vendor seconds (empty when only quantiles are known)
    quantiles: Mapping[str, float]  # e.g. {"p50": 1.7, "p95": 2.3, "p99": 2.5}; from tti_s when raw, else published
    trimmed: float  # fraction trimmed each side before the quantiles (computesdk: 0.05), 0 for our runs
    success_rate: float
    failures: Mapping[str, int]  # "kind@phase" -> count
    source: str  # run dir, or "computesdk results/burst_tti/2026-05-05.json, Modal"
    exec_overhead_s: tuple[float, ...] = ()  # per command call: its time beyond the command's own (a plan run's steps)
    creates: CreateTimeline | None = None  # our runs' create times; None where only counts are known (published)
    # each accepted create's wait at the vendor and the requests queued ahead of it (a simulated vendor's runs: its
    # truth says when it served them; harness.fitting.serving fits the serving queue from these)
    queue: tuple[QueueSample, ...] = ()


SEQUENTIAL_MAX_USERS = 1  # a steady run of one user is the public protocols' "sequential": one sandbox at a time
# cancelled by the harness (a stop) or never finished (a crash): neither a success nor a failure of the vendor
UNCOUNTED = ("cancelled", "unfinished")
_SHAPES = {"burst": "burst", "staggered": "staggered", "ramp": "ramp", "knee": "ramp", "steady": "steady"}


def _protocol(scenario: str, concurrency: int) -> str:
    shape = _SHAPES.get(scenario, scenario)
    if shape in ("steady", "ramp") and concurrency <= SEQUENTIAL_MAX_USERS:
        return "sequential"
    return shape


def observations_from_run(run_dir: Path | str) -> list[ProtocolObservation]:
    """One observation per stage of a stampede run: its shape, width, attempts, failures by kind@phase, and the
    vendor's own TTI of each success.

    The vendor's own TTI is `tti_vendor_s` less what the SDK side added: half the readiness poll window (the poll
    saw RUNNING somewhere inside it; the simulator notices it at once) and the engine's own loop stall, both in
    vendor seconds. So a slow poll loop is not fitted into the vendor's boot time. A folder that is not a run is
    one UsageError line (read_run_info)."""
    info = read_run_info(run_dir)
    frame = load_rollouts(info.run_dir)
    if frame.empty:
        return []
    seconds = to_vendor_seconds(info, frame)
    tti = seconds.durations["tti_s"]
    poll = np.nan_to_num(frame["ready_poll_s"].to_numpy(dtype=float)) * seconds.harness_factor
    lag = np.nan_to_num(frame["loop_lag_s"].to_numpy(dtype=float)) * seconds.harness_factor
    vendor_tti = np.maximum(tti - 0.5 * poll - lag, 0.0)
    ok = (frame["outcome"].astype(str) == "ok").to_numpy() & ~np.isnan(tti)
    stages = frame["stage"].astype(str).to_numpy()
    widths = frame["target_users"].to_numpy(dtype=float)
    kinds = frame["failure_kind"].astype(object).to_numpy()
    phases = frame["failure_phase"].astype(object).to_numpy()
    outcomes = frame["outcome"].astype(str).to_numpy()
    steps = load_steps(info) if has_steps(info.run_dir) else None
    timelines = _create_timelines(info, frame)
    queues = _queue_samples(info, frame)
    out: list[ProtocolObservation] = []
    # in the order the stages began (their first submit), not the rows': a stage whose rollouts all end with the
    # run (cancelled in flight) has its rows last, and a ramp replayed in row order plays its stages out of turn
    # (modal-like's ramp: 480, 1,920, 3,840, then 960)
    first = pd.to_datetime(frame["t_submit"], utc=True).groupby(stages).min()  # NaT skipped
    never = pd.Timestamp.max.tz_localize("UTC")  # a stage without a submit time keeps its place, after the others
    begun = first.reindex(list(dict.fromkeys(stages))).fillna(never)  # a stage's NaT or missing: never
    for stage in begun.sort_values(kind="stable").index:
        rows = stages == stage
        width = int(np.nanmax(widths[rows])) if np.isfinite(widths[rows]).any() else 1
        samples = tuple(sorted(float(v) for v in vendor_tti[rows & ok]))
        failures: dict[str, int] = {}
        for kind, phase, outcome in zip(kinds[rows], phases[rows], outcomes[rows], strict=True):
            if outcome in UNCOUNTED or outcome == "ok":
                continue
            key = f"{_text(kind)}@{_text(phase)}"
            failures[key] = failures.get(key, 0) + 1
        attempts = int(rows.sum() - np.isin(outcomes[rows], UNCOUNTED).sum())
        quantiles = {name: nearest_rank(samples, q) for name, q in QUANTILES.items()} if samples else {}
        out.append(
            ProtocolObservation(
                protocol=_protocol(info.scenario, width),
                concurrency=width,
                attempts=attempts,
                tti_s=samples,
                quantiles=quantiles,
                trimmed=0.0,
                success_rate=len(samples) / attempts if attempts else 0.0,
                failures=failures,
                source=f"{info.run_dir} ({stage})",
                exec_overhead_s=_exec_overheads(steps, stage),
                creates=timelines.get(str(stage)),
                queue=queues.get(str(stage), ()),
            )
        )
    return out


def _vendor_clock(info: RunInfo, truth: pd.DataFrame) -> Callable[[np.ndarray], np.ndarray]:
    """Wall epoch seconds -> vendor seconds. A simulated vendor's truth pairs its own clock with the wall at every
    acceptance, RUNNING and end, and the mapping between them is not one scale (a live simulator plays a wave of
    creates 1:1, harness.results.read.vendor_time), so it is read off those pairs; beyond them, and without truth
    (a real vendor), vendor seconds are wall seconds / time scale."""
    factor = info.to_vendor_seconds()
    walls = np.empty(0)
    vendors = np.empty(0)
    if usable_truth(truth) and {"created_s", "ready_s", "ended_s"} <= set(truth.columns):
        pairs = [(truth[f"{at}_wall"], truth[f"{at}_s"]) for at in ("created", "ready", "ended")]
        walls = np.concatenate([w.to_numpy(dtype=float) for w, _ in pairs])
        vendors = np.concatenate([v.to_numpy(dtype=float) for _, v in pairs])
        keep = np.isfinite(walls) & np.isfinite(vendors)
        order = np.argsort(walls[keep], kind="stable")
        walls, vendors = walls[keep][order], np.maximum.accumulate(vendors[keep][order])

    def clock(wall: np.ndarray) -> np.ndarray:
        if len(walls) < 2:
            return wall * factor
        inside = np.interp(wall, walls, vendors)
        before = vendors[0] + (wall - walls[0]) * factor
        after = vendors[-1] + (wall - walls[-1]) * factor
        return np.where(wall < walls[0], before, np.where(wall > walls[-1], after, inside))

    return clock


def _create_timelines(info: RunInfo, frame: pd.DataFrame) -> dict[str, CreateTimeline]:
    """Per stage, its creates on the run's vendor clock (`CreateTimeline`).

    A create let in is a row with a sandbox id (its rollout may have failed or been cancelled later: the vendor
    still spent a token and held the sandbox); it is placed when the vendor accepted it (the truth's `created_s`),
    else at its submit, and it lived until the vendor ended it (truth `ended_s`), else until its terminate call was
    sent. A create turned away is a row failed at `create` without an id, kept as its submit and its answer (submit +
    total_s): the vendor refused it somewhere between, and where matters (a refusal loop keeps many in flight around
    the first 429; a burst's last creates wait in the vendor's queue; a client that holds creates after a 429, as
    the stub and Prime adapters do, sends them later than their submit). Every create let in or turned away is also
    kept as its submit (`sent_s`): how fast the harness sent a burst. A cancelled or unfinished row without an
    id is left out: whether the vendor saw it is unknown."""
    truth = load_truth(info.run_dir)
    clock = _vendor_clock(info, truth)
    submit = frame["t_submit"].to_numpy(dtype=float)
    total = frame["total_s"].to_numpy(dtype=float)
    at = clock(submit)
    submitted = at.copy()  # `at` becomes the vendor's decision where known
    terminate = np.nan_to_num(frame["terminate_s"].to_numpy(dtype=float))
    ended = clock(submit + total - terminate)
    ids = frame["sandbox_id"].astype(object).to_numpy()
    accepted = np.array([isinstance(v, str) and v != "" for v in ids], dtype=bool)
    if accepted.any() and {"id", "created_s", "ended_s"} <= set(truth.columns):
        own = truth.drop_duplicates("id").set_index("id")
        joined = own.reindex(pd.Index(np.where(accepted, ids, None)))
        created_s = joined["created_s"].to_numpy(dtype=float)
        at = np.where(accepted & np.isfinite(created_s), created_s, at)
        ended_s = joined["ended_s"].to_numpy(dtype=float)
        known = np.isfinite(created_s)  # a sandbox of the vendor's record: NaN ended_s means it never ended
        ended = np.where(accepted & known, np.where(np.isfinite(ended_s), ended_s, np.inf), ended)
    ended = np.where(np.isnan(ended), np.inf, ended)
    refused = ~accepted & (frame["failure_phase"].astype(object).to_numpy() == "create")
    refused &= ~np.isin(frame["outcome"].astype(str).to_numpy(), UNCOUNTED)
    answered = np.where(np.isfinite(total), clock(submit + np.nan_to_num(total)), at)
    if not (accepted | refused).any():
        return {}
    origin = float(np.min(at[accepted | refused]))
    stages = frame["stage"].astype(str).to_numpy()
    waits = _retry_afters(info, frame)
    kinds = frame["failure_kind"].astype(object).to_numpy()
    out: dict[str, CreateTimeline] = {}
    for stage in dict.fromkeys(stages):
        rows = stages == stage
        by_kind: dict[str, list[tuple[float, float]]] = {}
        mine = rows & refused
        for kind, sent, back in zip(kinds[mine], at[mine], answered[mine], strict=True):
            by_kind.setdefault(_text(kind), []).append((float(sent) - origin, float(back) - origin))
        mine = rows & accepted
        order = np.argsort(at[mine], kind="stable")
        out[stage] = CreateTimeline(
            run=str(info.run_dir),
            accepted_s=tuple(float(t) - origin for t in at[mine][order]),
            ended_s=tuple(float(t) - origin for t in ended[mine][order]),
            refused_s={kind: tuple(sorted(times)) for kind, times in by_kind.items()},
            sent_s=tuple(sorted(float(t) - origin for t in submitted[rows & (accepted | refused)])),
            retry_after_s=None if waits is None else waits.get(str(stage), ()),
        )
    return out


def _queue_samples(info: RunInfo, frame: pd.DataFrame) -> dict[str, tuple[QueueSample, ...]]:
    """Per stage, what each accepted create found queued ahead of it at the vendor (harness.fitting.serving); empty
    without the vendor's truth or the ops (a real vendor, a run cut short)."""
    truth = load_truth(info.run_dir)
    if truth.empty or not files_of(info.run_dir, OPS_TABLE).all:
        return {}
    try:
        ops = read_table(info.run_dir, OPS_TABLE, ["rollout_id", "op", "t_start", "dur_s", "ok"]).to_pandas()
    except (OSError, pa.ArrowException):  # a shard cut short by a crash: the fit goes on without it
        return {}
    return queue_samples(frame, ops, truth, info.to_vendor_seconds())


def _retry_afters(info: RunInfo, frame: pd.DataFrame) -> dict[str, tuple[float | None, ...]] | None:
    """Per stage, the Retry-After of each create call the rate limit turned away, in vendor seconds (None: it
    carried none): the ops' `retry_after_s` (the seconds the client read, wall seconds at the run's time scale),
    joined to the stage by rollout id. None when any ops file lacks the column (a run from before it was
    recorded: its 429s' Retry-After is unknown, not absent)."""
    files = files_of(info.run_dir, OPS_TABLE).all
    try:
        if not files or any(RETRY_AFTER not in pq.read_schema(path).names for path in files):
            return None
    except (OSError, pa.ArrowException):  # a shard cut short by a crash: the fit goes on without it
        return None
    ops = read_table(info.run_dir, OPS_TABLE, ["rollout_id", "op", "failure_kind", RETRY_AFTER]).to_pandas()
    ops = ops[(ops["op"] == "create") & (ops["failure_kind"] == "rate_limited")]
    stage_of = pd.Series(frame["stage"].astype(str).to_numpy(), index=frame["rollout_id"].astype(str).to_numpy())
    stage_of = stage_of[~stage_of.index.duplicated()]
    stages = ops["rollout_id"].astype(str).map(stage_of)
    seconds = ops[RETRY_AFTER].to_numpy(dtype=float) * info.to_vendor_seconds()
    out: dict[str, list[float | None]] = {}
    for stage, wait in zip(stages, seconds, strict=True):
        if isinstance(stage, str):
            out.setdefault(stage, []).append(float(wait) if np.isfinite(wait) else None)
    return {stage: tuple(waits) for stage, waits in out.items()}


def _exec_overheads(steps: pd.DataFrame | None, stage: str) -> tuple[float, ...]:
    """A plan run's exec calls in one stage: each call's vendor seconds beyond its command's own (`overhead`)."""
    if steps is None or steps.empty:
        return ()
    calls = steps[(steps["stage"] == stage) & (steps["kind"] == "exec") & steps["ok"]]["overhead"].dropna()
    return tuple(sorted(float(v) for v in calls))


def _text(value: object) -> str:
    return "unknown" if value is None or (isinstance(value, float) and np.isnan(value)) or value == "" else str(value)
