"""The vendor's serving queue, fitted from what each create found queued ahead of it (issue #31).

The mechanism (providers/sim/core/serving_queue.py): one server takes every request in turn, each kind holding it
its own time. What identifies the times is a run where creates overlap live sandboxes' requests: the trial's
staggered and ramp phases. There, a create's wait at the vendor (the vendor's own record of when it accepted it,
less when the harness sent it) is what the server had to serve first: the creates, readiness requests, commands and
terminates sent before it and not yet served. Under one first-come-first-served server that wait is linear in those
counts, each kind's coefficient its time, so the times are the least-squares fit of the waits to the counts
ahead, non-negative, with a constant for the round trip and the client's own part (`fit_rows`).

The counts come from the harness's ops (when each call was sent, and answered) and the vendor's truth (when it
accepted a create, started a command, ended a sandbox, turned it RUNNING), both on the machine's wall clock: so
only a simulated (`--local`) vendor's runs give them, and what they measure is the trial machine's serving loop,
not the vendor's (`MACHINE`, said in the fit, the profile and the prediction). On `ideal`'s trial (2026-12-06,
2 cores): 0.47 ms a create, 0.23 an exec and 0.31 a terminate ahead, the readiness requests ~0, over the 55,167
creates of its ramp (25 to 400 wide); its ramp's rollouts level off at ~1,000 a second, about 1 / their sum.

Left out, each for a reason: a burst's creates (the harness sends them faster than the vendor reads them, so their
wait is the send's, not the queue's: the serial intake, admission.py, reads them), a stage where a create was
refused (its creates were held by the client's gate after a 429, not by the server), and any command after a
rollout's first (the truth records the first command's start only). A kind the creates never found queued ahead,
on average, at least `MIN_MEAN_AHEAD` times is not identified: the server was never busy with it, its time stays
at the prior (none) and the fit says so. The whole section is set only when a kind other than the create is
identified: without that overlap the queue is the create intake, which admission.py already carries.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.optimize import nnls

from harness.fitting.queue_rows import QueueSample
from providers.sim.core.serving_queue import KINDS, Serving

if TYPE_CHECKING:
    from harness.fitting.observations import ProtocolObservation

KEYS = tuple(f"serving.{kind}_s" for kind in KINDS)
READ = ("create", "exec", "terminate")  # the kinds whose service the truth dates (the readiness requests it does not)
NOT_DATED = (
    "the vendor's records do not date a status look or an auth (only when the sandbox turned RUNNING), and counting "
    "sandboxes RUNNING and not yet seen counts the client's look timers as well as requests at the server"
)
MIN_MEAN_AHEAD = 1.0  # on average at least one request of the kind ahead of a create: the server was busy with it
MIN_ROWS = 50  # creates to fit from
REFUSED = ("rate_limited", "quota_exhausted", "capacity")  # a stage with one of these: its creates were held
MACHINE = (
    "against a --local vendor this is this machine's serving loop (the simulated vendor's one process), not the "
    "vendor: the figures describe the machine the trial ran on"
)


@dataclass(frozen=True, slots=True)
class ServingFit:
    """The fitted serving costs, or None and why; `fitted` holds every identified key, `unidentified` each key
    left at its prior with the reason, `note` how they were read."""

    serving: Serving | None
    fitted: dict[str, float]
    unidentified: dict[str, str]
    note: str
    rows: int = 0


def _eligible(obs: ProtocolObservation) -> bool:
    refused = any(key.partition("@")[0] in REFUSED for key in obs.failures)
    return obs.protocol != "burst" and not refused and bool(obs.queue)


_COLUMNS = tuple(KINDS.index(kind) for kind in READ)


def fit_rows(rows: Sequence[QueueSample]) -> tuple[float, dict[str, float]]:
    """The least-squares fit, non-negative, of the waits to a constant plus the count ahead of each kind in `READ`:
    (the constant, kind -> seconds a request)."""
    a = np.array([(1.0, *(r.ahead[i] for i in _COLUMNS)) for r in rows], dtype=float)
    y = np.array([r.wait_s for r in rows], dtype=float)
    coef, _ = nnls(a, y)
    return float(coef[0]), {kind: float(c) for kind, c in zip(READ, coef[1:], strict=True)}


def _mean_ahead(rows: Sequence[QueueSample]) -> dict[str, float]:
    mean = np.mean(np.array([r.ahead for r in rows], dtype=float), axis=0)
    return {kind: float(m) for kind, m in zip(KINDS, mean, strict=True)}


def fit_serving(observations: Sequence[ProtocolObservation]) -> ServingFit:
    """The serving queue's costs from the staggered, ramp and steady stages with no refused create (see the module
    docstring for what is left out and why); `serving` None when no kind beside the create is identified."""
    used = [o for o in observations if _eligible(o)]
    rows = [r for o in used for r in o.queue]
    unidentified: dict[str, str] = {}
    if len(rows) < MIN_ROWS:
        why = (
            f"no staggered or ramp stage without refused creates has the vendor's records of {MIN_ROWS}+ creates "
            "(a real vendor keeps none): nothing shows what the server had queued ahead of a create"
        )
        return ServingFit(None, {}, dict.fromkeys(KEYS, why), "")
    mean = _mean_ahead(rows)
    constant, costs = fit_rows(rows)
    fitted: dict[str, float] = {}
    unidentified["serving.ready_s"] = NOT_DATED
    for kind in READ:
        if mean[kind] >= MIN_MEAN_AHEAD:
            fitted[f"serving.{kind}_s"] = costs[kind]
        else:
            unidentified[f"serving.{kind}_s"] = (
                f"its requests were queued ahead of a create {mean[kind]:.2f} times on average (under "
                f"{MIN_MEAN_AHEAD:g}): the server was never busy with them, so their time does not show"
            )
    stages = ", ".join(sorted({f"{o.protocol}@{o.concurrency}" for o in used}))
    ahead_text = ", ".join(f"{kind} {mean[kind]:.1f}" for kind in READ)
    note = (
        f"fitted: each accepted create's wait at the vendor against the requests queued ahead of it, {len(rows)} "
        f"creates of {stages} (mean ahead: {ahead_text}; constant {1000 * constant:.2f} ms); {MACHINE}"
    )
    if "serving.create_s" not in fitted or not any(fitted.get(f"serving.{k}_s", 0) > 0 for k in READ[1:]):
        why = "no command or terminate was queued ahead of the creates at a cost: no overlap with live sandboxes"
        return ServingFit(None, {}, {key: unidentified.get(key, why) for key in KEYS}, note, len(rows))
    serving = Serving(**{key.partition(".")[2]: value for key, value in fitted.items()})
    return ServingFit(serving, fitted, unidentified, note, len(rows))


def resampled(serving: Serving, observations: Sequence[ProtocolObservation], rng: random.Random) -> Serving:
    """`serving`'s identified costs fitted again to the rows drawn again with replacement (a prediction's refit:
    the rows are not part of `fit.resample`, so without this every refit would carry the one point estimate)."""
    rows = [r for o in observations if _eligible(o) for r in o.queue]
    if len(rows) < MIN_ROWS:
        return serving
    _, costs = fit_rows(rng.choices(rows, k=len(rows)))
    mean = _mean_ahead(rows)
    values = {f"{kind}_s": costs[kind] for kind in READ if mean[kind] >= MIN_MEAN_AHEAD}
    return Serving(**{**{f"{k}_s": serving.cost(k) for k in KINDS}, **values})


def describe(serving: Serving) -> str:
    """One clause: the costs, in ms a request."""
    return ", ".join(f"{kind} {1000 * serving.cost(kind):.3f}" for kind in KINDS) + " ms a request"
