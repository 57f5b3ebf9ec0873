"""The vendor's create-rate bucket and concurrency cap, fitted from when creates were let in and turned away.

Why times and not counts: over a stage held in time, the creates a token bucket lets in are what was left in it
plus its refill over the stage, and the sandboxes alive under a cap end and are replaced while it holds; counting a
stage's accepted creates as "the depth" or "the cap" gave a bucket of 200 refilled at 5/s a depth of 517. Our runs
carry each stage's create times (`CreateTimeline`); the fit reads them per run, because a run's stages share one
vendor bucket, which is full at the run's first create.

- `create_rate.per_s`: at every 429 the bucket held less than one token, so while 429s keep coming the creates
  it lets in are its refill. The rate is how fast they grow against vendor time (a least-squares slope per stretch
  of 429s, weighted by its length), a stretch split where two 429s were far enough apart for the bucket to have
  filled meanwhile (its refill lost to the depth). A slope rather than a count over the stretch: the creates in
  flight when the first 429 came, decided before it and answered after, move the count but not its growth (on a
  run refused 9,000 times in 20 s the count read 5.34/s, the slope 5.01/s, against 5). A 429's decision is known
  only within its sending and its answer, so a stretch's slope is read only where the bucket was surely empty at
  both ends: from the stretch's earliest answer to its latest sending, and only the creates let in there. A burst's
  429s are all sent before any is answered (agent-sandbox-like's 100: sent at 25 ms, answered at 50 ms, after all
  92 creates let in): no such window, so no rate is claimed (placed halfway, its 8 refusals read 8,055/s over 0.6
  ms, and a held ramp's bursts of creates let out by its client read 967/s against 90).
  Where a client held its creates after each 429 and let them out in clumps (the stub and Prime adapters' throttle
  gate), a clump's 429s come back after the next clump is sent, and such windows shrink to slivers
  (agent-sandbox-like's trial ramp: 2.6 of 55 s, reading 58.5/s against 90). So the slope is checked by replaying
  the bucket over every create and 429 of the runs: the rate whose bucket disagrees least with what the vendor let in
  and turned away (a 429 placed at its answer) stands where it beats the slope's by more than 2% of the events.
- `create_rate.burst`: the smallest depth with which a bucket full at the run's first create, refilled at that
  rate, had a token for every create it let in before the first 429: the most creates let in over any span
  starting at or after the first create and ending before the first 429's answer (the bucket was dry somewhere
  before it), less that span's refill. Without a rate (a burst), the creates let in before that answer: a burst's
  accepted count.
- A create turned away for quota, capacity or an error had passed the rate check (a vendor checks the rate first,
  as the simulator does), so it spent a token; a transport error may never have reached the vendor, and does not.
- `quota.max_active`: the most sandboxes alive at once (let in, not yet ended) while a quota refusal was in
  flight (between its sending and its answer: the vendor refused it in there), whatever was created and ended
  around them; never the creates a held stage let in.
- A refusal's time is unknown within its sending and its answer; where a stretch of 429s must be split in time,
  halfway.
- Retry-After (`RETRY_AFTER_KEY`): read off the ops of the creates refused for the rate limit (each failed call's
  `retry_after_s`, what the adapter read of the 429): whether they carried one and its median and p90 in vendor
  seconds. No profile setting holds it (the simulator's `[create_rate]` 429 always carries the wait until its next
  token; `[faults] retry_after_s` is its injected 429s', not the rate limit's), so the fit names it beside the
  profile (`LimitsFit.observed`, comments in the TOML), never as a value. Some of those ops may be the client's own
  backoff giving up unsent (the stub and Prime adapters' throttle gate), which carries none: hence "k of n".

Observations without times (published results) keep the count: creates accepted before the first refusal, right
for the bursts such files hold; they say nothing of Retry-After, nor do runs whose ops predate the column.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from foundation.quantiles import nearest_rank
from harness.fitting.observations import CreateTimeline, ProtocolObservation
from harness.results.read.concurrency import concurrency_at

RATE_LIMITED = "rate_limited"
QUOTA = "quota_exhausted"
REFUSALS = (RATE_LIMITED, QUOTA, "capacity")  # turned away by a limit, not an error
NOT_SEEN = ("transport",)  # a create that failed this way may never have reached the vendor: no token spent
MIN_REFILLED = 5  # creates let in between 429s before a refill rate is claimed (fewer: a burst's, one instant)
FULL_SPAN = 0.5  # a span between 429s whose refill reaches this share of the depth may have filled the bucket
BURST_NOTE = "a burst shows the bucket's depth, not its refill rate"
RETRY_AFTER_KEY = "Retry-After on create_rate 429s"
NO_SETTING = (
    "no profile setting holds it: the simulator's [create_rate] 429 always carries the wait until its next token "
    "([faults] retry_after_s is its injected 429s', not the rate limit's)"
)


@dataclass(frozen=True)
class RetryAfterFit:
    """The creates refused for the rate limit whose ops were read, and the Retry-After each carried (vendor s)."""

    limited: int  # create calls failed `rate_limited`, with an op record of what they carried
    carried_s: tuple[float, ...]  # sorted: the Retry-After of those that carried one

    @property
    def median_s(self) -> float | None:
        return nearest_rank(self.carried_s, 0.5) if self.carried_s else None

    @property
    def p90_s(self) -> float | None:
        return nearest_rank(self.carried_s, 0.9) if self.carried_s else None


@dataclass(frozen=True)
class LimitsFit:
    """What the runs showed of the vendor's limits: dotted key -> value, -> how, and what they could not show."""

    fitted: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    unidentified: dict[str, str] = field(default_factory=dict)
    observed: dict[str, str] = field(default_factory=dict)  # seen, with no profile setting to carry it: key -> what
    retry_after: RetryAfterFit | None = None  # None: no 429's Retry-After was read (none seen, or not recorded)


@dataclass(frozen=True)
class _Run:
    """One run's creates, its stages joined on its clock."""

    source: str
    accepted: np.ndarray  # sorted vendor seconds
    ended: np.ndarray  # same order as `accepted`
    spent: np.ndarray  # sorted: every create that spent a token (let in, or turned away past the rate check)
    limited: np.ndarray  # (n, 2): the 429s of the rate limit, sent and answered, in order of their halfway times
    quota: np.ndarray  # (n, 2): each quota refusal's sent and answered


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
            pairs = [pair for p in parts for k in kinds for pair in p.refused_s.get(k, ())]
            return np.array(pairs, dtype=float).reshape(-1, 2)

        def halfway(pairs: np.ndarray) -> np.ndarray:  # where a point time is needed: sent and answered alike likely
            return np.sort(pairs.mean(axis=1))

        others = dict.fromkeys(k for p in parts for k in p.refused_s if k != RATE_LIMITED and k not in NOT_SEEN)
        spent = np.sort(np.concatenate([accepted, halfway(refused(*others))]))
        rate = refused(RATE_LIMITED)
        limited = rate[np.argsort(rate.mean(axis=1), kind="stable")]
        runs.append(_Run(source, accepted[order], ended[order], spent, limited, refused(QUOTA)))
    return runs


@dataclass(frozen=True)
class _Refill:
    """Creates that spent a token while 429s kept coming, their vendor seconds, and the rate they show."""

    creates: int
    seconds: float
    per_s: float


def _dry(run: _Run) -> float:
    """By when the bucket had surely run dry: the first 429's answer (it was decided somewhere before)."""
    return float(run.limited[:, 1].min())


def _refill(run: _Run, depth: float | None, per_s: float | None) -> _Refill:
    """The bucket's refill while it stayed empty: per stretch of 429s (split where the time between two, halfway
    between sent and answered, was long enough for the bucket to have filled, given a first estimate's `depth` and
    `per_s`; None: never split), the slope of the creates let in against their vendor times, weighted by the
    stretch's length. Only where the bucket was surely empty at both ends: from the stretch's earliest answer to its
    latest sending (a burst's 429s, all sent before any answer, show none). A slope, not a count over the span:
    creates already in flight when the first 429 came (decided before it, answered after) shift the count, not its
    growth."""
    gaps = np.diff(run.limited.mean(axis=1))
    long = gaps * per_s >= FULL_SPAN * depth if depth is not None and per_s is not None else np.zeros(len(gaps), bool)
    bounds = np.split(run.limited, np.flatnonzero(long) + 1)
    creates, seconds, weighted = 0, 0.0, 0.0
    for stretch in bounds:
        start, end = float(stretch[:, 1].min()), float(stretch[:, 0].max())
        if len(stretch) < 2 or end <= start:
            continue
        inside = run.spent[(run.spent > start) & (run.spent < end)]
        if len(inside) < 2 or inside[-1] <= inside[0]:
            continue
        slope = float(np.polyfit(inside, np.arange(len(inside), dtype=float), 1)[0])
        span = end - start
        creates, seconds, weighted = creates + len(inside), seconds + span, weighted + slope * span
    return _Refill(creates, seconds, weighted / seconds if seconds > 0 else 0.0)


def _depth(spent: np.ndarray, per_s: float) -> float:
    """The smallest depth of a bucket full at t=0 (the run's first create), refilled at `per_s`, that had a token
    for each of `spent`: max over spans [t_j, t_k] of (creates in it - refill over it)."""
    if len(spent) == 0:
        return 0.0
    k = np.arange(len(spent), dtype=float)
    best_start = np.maximum.accumulate(per_s * spent - k)  # max over j <= k of (per_s t_j - j)
    return float(np.max(k + 1 - per_s * spent + best_start))


def create_refusals(obs: ProtocolObservation, *kinds: str) -> int:
    """Creates of `obs` turned away with one of `kinds` (its failures keyed kind@phase, phase `create`)."""
    return sum(n for key, n in obs.failures.items() if key in {f"{kind}@create" for kind in kinds})


def _pooled(refills: list[_Refill]) -> _Refill | None:
    """The runs' refills as one rate (weighted by their seconds); None when they show too few creates for one."""
    creates, seconds = sum(r.creates for r in refills), sum(r.seconds for r in refills)
    if creates < MIN_REFILLED or seconds <= 0:
        return None
    return _Refill(creates, seconds, sum(r.per_s * r.seconds for r in refills) / seconds)


@dataclass(frozen=True)
class _Replayed:
    """A refill rate's bucket replayed over the runs: how often it disagreed with what the vendor did."""

    per_s: float
    misses: int  # creates let in without a token, and 429s answered while it held one
    events: int  # creates that spent a token, and 429s


REPLAY_TIE = 0.02  # a slope reading this close (share of the events) to the replay's best is kept: finer-grained


def _misses(run: _Run, rates: np.ndarray) -> np.ndarray:
    """For each rate (its depth the least that let in the run's creates before its first 429, as `_depth` reads
    it), how often a bucket full at the run's first create disagrees with the vendor: a create let in (or past the
    rate check) while it held under one token, or a 429 answered while it held one. A 429 is placed at its answer:
    a client's hold after an earlier 429 (the stub and Prime adapters' throttle gate) may have sent it long after
    its submit, so only the answer bounds the decision."""
    depths = np.array([max(1.0, _depth(run.spent[run.spent < _dry(run)], x)) for x in rates])
    times = np.concatenate([run.spent, run.limited[:, 1]])
    spends = np.concatenate([np.ones(len(run.spent), bool), np.zeros(len(run.limited), bool)])
    order = np.argsort(times, kind="stable")
    tokens, last = depths.copy(), 0.0
    misses = np.zeros(len(rates), dtype=int)
    for t, spend in zip(times[order].tolist(), spends[order].tolist(), strict=True):
        np.minimum(depths, tokens + rates * (t - last), out=tokens)
        last = t
        if spend:
            misses += tokens < 1 - 1e-9
            np.maximum(tokens - 1, 0.0, out=tokens)
        else:
            misses += tokens >= 1
    return misses


def _replayed(runs: list[_Run], rates: np.ndarray) -> list[_Replayed]:
    events = sum(len(r.spent) + len(r.limited) for r in runs)
    total = sum((_misses(r, rates) for r in runs), np.zeros(len(rates), dtype=int))
    return [_Replayed(float(x), int(m), events) for x, m in zip(rates, total, strict=True)]


def _replayed_rate(runs: list[_Run], reading: float, rough: float) -> tuple[_Replayed, _Replayed] | None:
    """The refill rate whose bucket, replayed over every create and 429, disagrees least with the vendor: searched
    from an eighth of the slower to eight times the faster of the slope readings, then finer around the best; the
    slowest of equals (no rate faster than the runs show), and the slope `reading` replayed. None: the reading does
    as well (within `REPLAY_TIE` of the events), so it stands. Why a replay: a client that holds its creates after
    a 429 lets them out in clumps with the bucket part-refilled between, each stretch's 429s answered after the next
    clump is sent, so no stretch shows a clean slope (agent-sandbox-like's trial ramp read 1,333/s one day and
    58.5/s the next against 90; replayed: 89.7)."""
    low, high = min(reading, rough) / 8, max(reading, rough) * 8
    if not (math.isfinite(high) and 0 < low):
        return None
    grid = np.geomspace(low, high, 97)
    for _ in range(2):
        tried = _replayed(runs, grid)
        best = min(tried, key=lambda r: (r.misses, r.per_s))
        i = int(np.searchsorted(grid, best.per_s))
        grid = np.geomspace(grid[max(0, i - 1)], grid[min(len(grid) - 1, i + 1)], 41)
    (seed,) = _replayed(runs, np.array([reading]))
    return None if seed.misses - best.misses <= REPLAY_TIE * best.events else (best, seed)


def _bucket(observations: Sequence[ProtocolObservation], runs: list[_Run], out: LimitsFit) -> None:
    limited = [r for r in runs if len(r.limited)]
    counted = [o for o in observations if o.creates is None and create_refusals(o, RATE_LIMITED)]
    if not limited and not counted:
        out.unidentified["create_rate.per_s"] = out.unidentified["create_rate.burst"] = "no run reached a rate limit"
        return
    per_s: float | None = None
    rough = _pooled([_refill(r, None, None) for r in limited])
    if rough is not None:
        depths = {r.source: max(1.0, _depth(r.spent[r.spent < _dry(r)], rough.per_s)) for r in limited}
        refills = [_refill(r, depths[r.source], rough.per_s) for r in limited]
        again = _pooled(refills)
        if again is not None:
            per_s = again.per_s
            out.fitted["create_rate.per_s"] = round(per_s, 3)
            out.notes["create_rate.per_s"] = (
                f"the growth of {again.creates} creates let in over {again.seconds:.1f} vendor s while 429s kept "
                f"coming (the bucket empty), {sum(1 for r in refills if r.creates)} run(s)"
            )
            replayed = _replayed_rate(limited, again.per_s, rough.per_s)
            if replayed is not None:
                best, reading = replayed
                per_s = best.per_s
                out.fitted["create_rate.per_s"] = round(per_s, 3)
                out.notes["create_rate.per_s"] = (
                    f"the rate whose bucket, replayed over {best.events} creates and 429s of {len(limited)} run(s), "
                    f"disagreed least with the vendor ({best.misses} times; the growth while 429s kept coming read "
                    f"{reading.per_s:.3g}/s, which disagreed {reading.misses} times)"
                )
    rate = per_s or 0.0
    candidates = [(max(1.0, _depth(r.spent[r.spent < _dry(r)], rate)), r) for r in limited]
    depth, how = 0.0, ""
    if candidates:
        depth, run = max(candidates, key=lambda c: c[0])
        before = int(np.sum(run.spent < _dry(run)))
        how = (
            f"the least depth of a bucket full at the run's first create, refilled at {rate:.3g}/s, that let in "
            f"its {before} creates before the first 429's answer (at {_dry(run):.1f} vendor s); {run.source}"
            if per_s
            else f"the {before} creates let in from the run's first create to its first 429's answer; {run.source}"
        )
    for obs in counted:  # published counts: a burst's creates accepted at once before the first 429
        n = float(max(1, obs.attempts - create_refusals(obs, *REFUSALS)))
        if n > depth:
            depth, how = n, "creates accepted at once before the first 429"
    out.fitted["create_rate.burst"] = float(max(1, round(depth)))  # whole creates; the fraction is the rate's noise
    out.notes["create_rate.burst"] = how
    if per_s is None:
        out.unidentified["create_rate.per_s"] = BURST_NOTE


def _alive_at_refusals(run: _Run) -> float:
    """The most sandboxes alive at once while a quota refusal was in flight (between its sending and its answer:
    the vendor refused it somewhere in there, when as many as the cap were alive)."""
    at_accept = concurrency_at(run.accepted, run.accepted, run.ended)  # run.accepted is sorted
    sent, answered = run.quota[:, 0], run.quota[:, 1]
    most = concurrency_at(sent, run.accepted, run.ended)
    lo = np.searchsorted(run.accepted, sent, side="right")
    hi = np.searchsorted(run.accepted, answered, side="right")
    for i in np.flatnonzero(hi > lo):  # sandboxes let in while it was in flight
        most[i] = max(most[i], at_accept[lo[i] : hi[i]].max())
    return float(most.max())


def _cap(observations: Sequence[ProtocolObservation], runs: list[_Run], out: LimitsFit) -> None:
    best, how = 0.0, ""
    for run in runs:
        if len(run.quota):
            alive = _alive_at_refusals(run)
            if alive > best:
                best = alive
                how = f"the most sandboxes alive at once when one of {len(run.quota)} quota refusals came; {run.source}"
    for obs in observations:
        if obs.creates is None and create_refusals(obs, QUOTA):
            n = float(max(1, obs.attempts - create_refusals(obs, *REFUSALS)))
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


def _retry_after(observations: Sequence[ProtocolObservation], out: LimitsFit) -> RetryAfterFit | None:
    """Whether the creates refused for the rate limit carried Retry-After, and how long (`RETRY_AFTER_KEY` in
    `observed`); unidentified when no 429 was seen or its ops did not record it."""
    known = [o.creates.retry_after_s for o in observations if o.creates and o.creates.retry_after_s is not None]
    waits = [wait for stage in known for wait in stage]
    if not waits:
        seen = any(create_refusals(o, RATE_LIMITED) for o in observations)
        why = (
            "no create was refused for the rate limit (no 429 seen)"
            if not seen
            else "the runs' 429s did not record it (ops from before `retry_after_s`, or published counts)"
        )
        out.unidentified[RETRY_AFTER_KEY] = f"{why}; {NO_SETTING}"
        return None
    fit = RetryAfterFit(len(waits), tuple(sorted(w for w in waits if w is not None)))
    if fit.carried_s:
        rest = len(waits) - len(fit.carried_s)
        low, high = fit.carried_s[0], fit.carried_s[-1]
        text = (
            f"carried by {len(fit.carried_s)} of {len(waits)} creates refused for the rate limit: median "
            f"{fit.median_s:.3g} vendor s, p90 {fit.p90_s:.3g} s"
            + (f" ({low:.3g} to {high:.3g} s)" if high > low else "")
            + (f"; {rest} without (a 429 without one, or the client's backoff giving up unsent)" if rest else "")
        )
    else:
        text = f"absent: none of {len(waits)} creates refused for the rate limit carried one"
    out.observed[RETRY_AFTER_KEY] = f"{text}; {NO_SETTING}"
    return fit


def fit_limits(observations: Sequence[ProtocolObservation]) -> LimitsFit:
    """The create bucket (`create_rate.burst`, `create_rate.per_s`) and the concurrency cap (`quota.max_active`)
    these observations show, how each was read, and why the others stay at the prior; and whether the rate limit's
    429s carried Retry-After (`observed`: no profile setting holds it)."""
    out = LimitsFit()
    runs = _runs(observations)
    _bucket(observations, runs, out)
    _cap(observations, runs, out)
    return dataclasses.replace(out, retry_after=_retry_after(observations, out))
