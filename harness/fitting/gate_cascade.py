"""How many creates one opening of the harness's own throttle gate lets out, read from the trial's refusals (issue #31).

After a 429 the stub client holds every create (`providers/throttle_gate.ThrottleGate`); when a probe is answered
with anything but a 429 the gate opens, and its waiters go out one lock hand-over apart until the engine reads the
first 429 of theirs and closes it again. How many go out per opening is the harness's, not the vendor's: it is set
by how soon the engine's loop reads that 429, and it decides how many refusals a ramp past a rate limit makes, so how
many rollouts fail and how long the others waited. The simulator's gate (`providers/sim/core/timed_ramp.py`) draws
each opening's length from a gamma; its default was measured once, on the engine of its day (113 creates an
opening), and the engine changed since: on 05aa933, ramps to 3,840 against e2b-like and daytona-like let out ~22 and
~49 a opening, and a prediction at 113 made twice the refusals the runs made (2,069 rows against 1,044 in
e2b-like's stage of 960).

So the prediction reads the cascade from the trial that fitted the profile, on the machine and engine the measured run
will use: a trial's ramp against a rate-limited vendor opens its gate dozens of times (e2b-like's ramp to 100: 29
openings, 34.7 refusals each; daytona-like's to 400: 50 openings, 50.7). Each opening shows as a clump of 429
answers, a whole Retry-After (at least one wall second) apart from the next clump, milliseconds apart within it.
The count is of refusals, the creates an opening let in before its first refusal not among them: what the bucket
refilled over the gate's hold (5 to 10 for e2b-like's 5/s, but 90 for agent-sandbox-like's 90/s over a one-second
hold). The prediction adds them back from the fitted bucket (`LiveRun.timing`): the simulated gate's opening counts
every create it lets out.

Only stages where at least half the creates were refused for the rate are read: in a stage where most got in, few
waited at the gate, so they, not the engine, bounded its openings (agent-sandbox-like's trial ramp: 1-6 refusals an
opening at 25-100 users, 96 at 200, 185 at 400; its measured ramp to 3,840: 117-183 at 480-3,840).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from harness.fitting.limits import RATE_LIMITED, create_refusals
from harness.fitting.observations import ProtocolObservation

SPLIT_SHARE = 0.25  # clumps are split at a silence of this share of the shortest Retry-After
WAITERS_SHARE = 0.5  # a stage with fewer of its creates refused for the rate held too few waiters to read
MIN_OPENINGS = 10  # fewer openings give no mean worth carrying
MAX_UNANSWERED_SHARE = 0.10  # refusals without a Retry-After: the gate giving up unsent, or a 429 without the header


@dataclass(frozen=True, slots=True)
class GateCascade:
    """Creates let out per gate opening: the mean, the gamma shape of its spread (mean^2 / variance), and from how
    many openings of which runs."""

    mean: float
    shape: float
    openings: int
    sources: tuple[str, ...]

    def describe(self) -> str:
        return (
            f"the client's throttle gate lets out {self.mean:.1f} creates an opening (gamma shape {self.shape:.2f}), "
            f"read from {self.openings} openings of the trial's own 429s"
        )


def opening_sizes(observation: ProtocolObservation) -> list[int]:
    """The 429 answers of each gate opening in one stage (empty when the stage tells nothing: no 429 with a
    Retry-After, or too many refusals without one to tell the gate's own give-ups apart)."""
    timeline = observation.creates
    if timeline is None or timeline.retry_after_s is None:
        return []
    refused = timeline.refused_s.get(RATE_LIMITED, ())
    hints = [h for h in timeline.retry_after_s if h is not None and h > 0]
    if not refused or not hints:
        return []
    if len(timeline.retry_after_s) - len(hints) > MAX_UNANSWERED_SHARE * len(timeline.retry_after_s):
        return []
    split = SPLIT_SHARE * min(hints)
    answered = sorted(back for _, back in refused)
    sizes, size = [], 1
    for before, after in itertools.pairwise(answered):
        if after - before > split:
            sizes.append(size)
            size = 1
        else:
            size += 1
    sizes.append(size)
    return sizes


def fit_gate_cascade(observations: Sequence[ProtocolObservation]) -> GateCascade | None:
    """The cascade of the observations' ramps (where the trial's creates met a rate limit); None with fewer than
    MIN_OPENINGS openings, or none of them spread (then the simulator's default stays)."""
    sizes: list[int] = []
    sources: list[str] = []
    for observation in observations:
        if observation.protocol not in ("ramp", "steady"):
            continue  # a burst's 429s come back as one clump whatever the gate does
        if create_refusals(observation, RATE_LIMITED) < WAITERS_SHARE * observation.attempts:
            continue  # most creates got in: few waited at the gate, so they, not the engine, bounded its openings
        found = opening_sizes(observation)
        if found:
            sizes += found
            sources.append(observation.source)
    if len(sizes) < MIN_OPENINGS:
        return None
    mean = statistics.fmean(sizes)
    variance = statistics.pvariance(sizes)
    if variance <= 0:
        return None
    return GateCascade(mean, mean * mean / variance, len(sizes), tuple(dict.fromkeys(sources)))
