"""The vendor's create-rate bucket and concurrency cap, fitted from when creates were let in and turned away.

Why times and not counts: over a stage held in time, the creates a token bucket lets in are what was left in it
plus its refill over the stage, and the sandboxes alive under a cap end and are replaced while it holds; counting a
stage's accepted creates as "the depth" or "the cap" gave a bucket of 200 refilled at 5/s a depth of 517. Our runs
carry each stage's create times (`CreateTimeline`); the fit reads them per run, because a run's stages share one
vendor bucket, which is full at the run's first create.

- `create_rate.per_s`: at every 429 the bucket held less than one token, so the creates let in between two 429s
  are its refill over the time between them. The rate is those creates over those vendor seconds, summed over the
  spans between consecutive 429s, leaving out a span long enough for the bucket to have filled meanwhile (its
  refill would have been lost to the depth). A burst's 429s come in one instant and show no refill.
- `create_rate.burst`: the smallest depth with which a bucket full at the run's first create, refilled at that
  rate, had a token for every create it let in before the first 429: the most creates let in over any span
  starting at or after the first create and ending before the first 429, less that span's refill. Without a rate
  (a burst), the creates let in before the first 429.
- A create turned away for quota, capacity or an error had passed the rate check (a vendor checks the rate first,
  as the simulator does), so it spent a token; a transport error may never have reached the vendor, and does not.
- `quota.max_active`: the most sandboxes alive at once (let in, not yet ended) at the instants a quota refusal
  came, whatever was created and ended around them.

Observations without times (published results) keep the count: creates accepted before the first refusal, right
for the bursts such files hold. Whether a 429 carried Retry-After is not in the rollout rows, so it is not fitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.fitting.observations import CreateTimeline, ProtocolObservation
from harness.results.read.concurrency import concurrency_at

RATE_LIMITED = "rate_limited"
QUOTA = "quota_exhausted"
REFUSALS = (RATE_LIMITED, QUOTA, "capacity")  # turned away by a limit, not an error
NOT_SEEN = ("transport",)  # a create that failed this way may never have reached the vendor: no token spent
MIN_REFILLED = 5  # creates let in between 429s before a refill rate is claimed (fewer: a burst's, one instant)
FULL_SPAN = 0.5  # a span between 429s whose refill reaches this share of the depth may have filled the bucket
BURST_NOTE = "a burst shows the bucket's depth, not its refill rate"


@dataclass(frozen=True)
class LimitsFit:
    """What the runs showed of the vendor's limits: dotted key -> value, -> how, and what they could not show."""

    fitted: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    unidentified: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Run:
    """One run's creates, its stages joined on its clock."""

    source: str
    accepted: np.ndarray  # sorted vendor seconds
    ended: np.ndarray  # same order as `accepted`
    spent: np.ndarray  # sorted: every create that spent a token (let in, or turned away past the rate check)
    limited: np.ndarray  # sorted: the 429s of the rate limit
    quota: np.ndarray  # sorted: the quota refusals


def _runs(observations: Sequence[ProtocolObservation]) -> list[_Run]:
    by_run: dict[str, list[CreateTimeline]] = {}
    for obs in observations:
        if obs.creates is not None:
            by_run.setdefault(obs.creates.run, []).append(obs.creates)
    runs = []
    for source, parts in by_run.items():
        accepted = np.array([t for p in parts for t in p.accepted_s], dtype=float)
        ended = np.array([t for p in parts for t in p.ended_s], dtype=float)
        order = np.argsort(accepted, kind="stable")

        def refused(*kinds: str, parts: list[CreateTimeline] = parts) -> np.ndarray:
            return np.sort(np.array([t for p in parts for k in kinds for t in p.refused_s.get(k, ())], dtype=float))

        others = [k for p in parts for k in p.refused_s if k != RATE_LIMITED and k not in NOT_SEEN]
        spent = np.sort(np.concatenate([accepted, refused(*dict.fromkeys(others))]))
        runs.append(_Run(source, accepted[order], ended[order], spent, refused(RATE_LIMITED), refused(QUOTA)))
    return runs


def _refill(run: _Run, depth: float | None, per_s: float | None) -> tuple[int, float]:
    """Creates that spent a token between consecutive 429s, and the vendor seconds of those spans, leaving out a
    span in which the bucket could have filled (`depth` and `per_s` of a first estimate; None: keep every span)."""
    starts, ends = run.limited[:-1], run.limited[1:]
    spans = ends - starts
    if depth is not None and per_s is not None:
        keep = spans * per_s < FULL_SPAN * depth
        starts, ends, spans = starts[keep], ends[keep], spans[keep]
    # a create is between two 429s when it came after the first and before the second (ties: the 429 came first)
    within = np.searchsorted(run.spent, ends, side="left") - np.searchsorted(run.spent, starts, side="right")
    return int(within.sum()), float(spans.sum())


def _depth(spent: np.ndarray, per_s: float) -> float:
    """The smallest depth of a bucket full at t=0 (the run's first create), refilled at `per_s`, that had a token
    for each of `spent`: max over spans [t_j, t_k] of (creates in it - refill over it)."""
    if len(spent) == 0:
        return 0.0
    k = np.arange(len(spent), dtype=float)
    best_start = np.maximum.accumulate(per_s * spent - k)  # max over j <= k of (per_s t_j - j)
    return float(np.max(k + 1 - per_s * spent + best_start))


def _count(obs: ProtocolObservation, *kinds: str) -> int:
    """Creates of `obs` turned away with one of `kinds` (its failures keyed kind@phase, phase `create`)."""
    return sum(n for key, n in obs.failures.items() if key in {f"{kind}@create" for kind in kinds})


def _bucket(observations: Sequence[ProtocolObservation], runs: list[_Run], out: LimitsFit) -> None:
    limited = [r for r in runs if len(r.limited)]
    counted = [o for o in observations if o.creates is None and _count(o, RATE_LIMITED)]
    if not limited and not counted:
        out.unidentified["create_rate.per_s"] = out.unidentified["create_rate.burst"] = "no run reached a rate limit"
        return
    per_s: float | None = None
    first = [_refill(r, None, None) for r in limited]
    if sum(n for n, _ in first) >= MIN_REFILLED and sum(t for _, t in first) > 0:
        rough = sum(n for n, _ in first) / sum(t for _, t in first)
        depths = {r.source: max(1.0, _depth(r.spent[r.spent < r.limited[0]], rough)) for r in limited}
        again = [_refill(r, depths[r.source], rough) for r in limited]
        refilled, seconds = sum(n for n, _ in again), sum(t for _, t in again)
        if refilled >= MIN_REFILLED and seconds > 0:
            per_s = refilled / seconds
            out.fitted["create_rate.per_s"] = round(per_s, 3)
            out.notes["create_rate.per_s"] = (
                f"{refilled} creates let in over {seconds:.1f} vendor s between 429s (the bucket empty at each), "
                f"{len(limited)} run(s)"
            )
    rate = per_s or 0.0
    candidates = [(max(1.0, _depth(r.spent[r.spent < r.limited[0]], rate)), r) for r in limited]
    depth, how = 0.0, ""
    if candidates:
        depth, run = max(candidates, key=lambda c: c[0])
        before = int(np.sum(run.spent < run.limited[0]))
        how = (
            f"the least depth of a bucket full at the run's first create, refilled at {rate:.3g}/s, that let in "
            f"its {before} creates before the first 429 (at {run.limited[0]:.1f} vendor s); {run.source}"
            if per_s
            else f"creates let in from the run's first create to its first 429; {run.source}"
        )
    for obs in counted:  # published counts: a burst's creates accepted at once before the first 429
        n = float(max(1, obs.attempts - _count(obs, *REFUSALS)))
        if n > depth:
            depth, how = n, "creates accepted at once before the first 429"
    out.fitted["create_rate.burst"] = float(max(1, round(depth)))  # whole creates; the fraction is the rate's noise
    out.notes["create_rate.burst"] = how
    if per_s is None:
        out.unidentified["create_rate.per_s"] = BURST_NOTE


def _cap(observations: Sequence[ProtocolObservation], runs: list[_Run], out: LimitsFit) -> None:
    best, how = 0.0, ""
    for run in runs:
        if len(run.quota):
            alive = float(concurrency_at(run.quota, run.accepted, run.ended).max())
            if alive > best:
                best = alive
                how = f"the most sandboxes alive at once when one of {len(run.quota)} quota refusals came; {run.source}"
    for obs in observations:
        if obs.creates is None and _count(obs, QUOTA):
            n = float(max(1, obs.attempts - _count(obs, *REFUSALS)))
            if n > best:
                best, how = n, "sandboxes accepted before the first quota refusal"
    if how:
        out.fitted["quota.max_active"] = max(1.0, best)
        out.notes["quota.max_active"] = how
        return
    if any(len(run.quota) for run in runs):  # refused while none of the run's own sandboxes lived: held by others
        out.unidentified["quota.max_active"] = "quota refusals came while none of the run's own sandboxes were alive"
        return
    ramps = [o.concurrency for o in observations if o.protocol == "ramp"]
    reason = f"the ramp's widest stage ({max(ramps)}) saw no quota refusal" if ramps else "no ramp"
    out.unidentified["quota.max_active"] = f"no run reached a concurrency cap: {reason}"


def fit_limits(observations: Sequence[ProtocolObservation]) -> LimitsFit:
    """The create bucket (`create_rate.burst`, `create_rate.per_s`) and the concurrency cap (`quota.max_active`)
    these observations show, how each was read, and why the others stay at the prior."""
    out = LimitsFit()
    runs = _runs(observations)
    _bucket(observations, runs, out)
    _cap(observations, runs, out)
    return out
