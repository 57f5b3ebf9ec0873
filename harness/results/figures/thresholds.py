"""Pass/fail thresholds on a run's figures (`--threshold`): one grammar, parsed and evaluated here for `run`,
`report`, `summary` and `compare`.

    EXPR   := [SCOPE "."] METRIC OP NUMBER [UNIT]
    SCOPE  := "stage[" NAME "]"     one stage, by its name as the tables print it (02-ramp40)
            | "stage[*]"            every stage, each on its own
                                    (no scope: the whole run, every rollout pooled)
    METRIC := PHASE "." STAT        PHASE: tti or a phase of harness.results.figures.stage_aggregate (create, exec, ...);
                                    STAT: p50 p90 p95 p99 p99.9 max mean; in VENDOR seconds (UNIT s or ms)
            | failure_rate          failed / (ok + failed)                       a fraction (UNIT % allowed)
            | init_failure_rate     failed in create or ready / (ok + failed)    a fraction
            | success_rate          ok / (ok + failed)                           a fraction
            | start_rate            rollouts submitted / submit span, per vendor second
            | failures              failed rollouts (rows), a count
            | failures.KIND         failed rollouts of one kind (rate_limited, capacity, ...), a count
            | "step:" STEP ("." | " ") SSTAT
                                    one step of a run with a plan (its steps/ table): STEP is a kind (create, pull,
                                    ready, fork, upload, exec, background, download, snapshot, terminate: every step
                                    of the kind pooled), KIND[NAME] (one named step) or exec.overhead (an exec
                                    step's time beyond its command's own); SSTAT: a STAT (vendor seconds), failures
                                    (a count) or failure_rate (failed / its steps). `step:upload p99 < 5s`,
                                    `step:exec.overhead.p50<10ms`. A step the run never ran is an error naming the
                                    run's steps (`check_steps`).
    OP     := < | <= | > | >=

The expression says what must hold (as k6's): `tti.p99<30` passes while TTI p99 is under 30 vendor seconds and
is crossed once it is not. A threshold that cannot be checked (no such stage in the run, or no samples of that
phase) is `no_data` and counts as crossed: a misspelt stage must not pass a CI gate.

Upper bounds on counts (`failures<N`, `failures.KIND<=N`) can never un-cross while a run goes (counts only
grow): they are the ones `--abort-on-threshold` acts on live (`harness.locust.live.threshold_watch`).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from harness.errors import UsageError
from harness.results.figures.quantiles import QUANTILE_NAMES

RUN_SCOPE = "run"
EVERY_STAGE = "*"
STATS: tuple[str, ...] = (*QUANTILE_NAMES, "mean")
RATE_METRICS: tuple[str, ...] = ("failure_rate", "init_failure_rate", "success_rate")
COUNT_METRIC = "failures"
START_RATE = "start_rate"

Comparison = Literal["<", "<=", ">", ">="]
_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_EXPRESSION = re.compile(
    r"^\s*(?:stage\[(?P<stage>[^\]]*)\]\s*\.)?\s*(?P<metric>[A-Za-z_][A-Za-z0-9_.]*?)\s*"
    r"(?P<op><=|>=|==|!=|=|<|>)\s*(?P<number>[^\s%a-zA-Z]*)\s*(?P<unit>[a-zA-Z%]*)\s*$"
)
_STEP_EXPRESSION = re.compile(
    r"^\s*(?:stage\[(?P<stage>[^\]]*)\]\s*\.)?\s*step:(?P<key>[A-Za-z0-9_\-]*(?:\[[^\]]*\])?(?:\.overhead)?)"
    r"(?:\s*\.\s*|\s+)(?P<stat>[A-Za-z0-9_.]+?)\s*"
    r"(?P<op><=|>=|==|!=|=|<|>)\s*(?P<number>[^\s%a-zA-Z]*)\s*(?P<unit>[a-zA-Z%]*)\s*$"
)
STEP_PREFIX = "step:"
STEP_STATS: tuple[str, ...] = (*STATS, COUNT_METRIC, "failure_rate")
Outcome = Literal["ok", "crossed", "no_data"]


@dataclass(frozen=True, slots=True)
class Threshold:
    """One parsed `--threshold`: `stage` is None for the whole run, "*" for every stage."""

    text: str
    metric: str
    op: Comparison
    bound: float  # vendor seconds, a fraction, a count or starts per vendor second
    stage: str | None = None

    def holds(self, observed: float) -> bool:
        return _OPERATORS[self.op](observed, self.bound)

    @property
    def monotone(self) -> bool:
        """Once crossed during a run, crossed for good: an upper bound on a count (counts only grow)."""
        return self.op in ("<", "<=") and (self.metric == COUNT_METRIC or self.metric.startswith(COUNT_METRIC + "."))


@dataclass(frozen=True, slots=True)
class Verdict:
    """A threshold checked against one scope's figures (`scope`: "run" or a stage name)."""

    threshold: Threshold
    scope: str
    observed: float | None  # None: no data
    verdict: Outcome

    @property
    def crossed(self) -> bool:
        return self.verdict != "ok"

    def to_dict(self) -> dict[str, object]:
        return {
            "expression": self.threshold.text,
            "scope": self.scope,
            "metric": self.threshold.metric,
            "op": self.threshold.op,
            "bound": self.threshold.bound,
            "observed": self.observed,
            "verdict": self.verdict,
        }

    def observed_text(self) -> str:
        """The observed value in the threshold's own unit (seconds, a rate with its percentage, a count)."""
        return "no data" if self.observed is None else _number(self.threshold.metric, self.observed)

    def describe(self) -> str:
        observed = self.observed_text()
        where = f" [{self.scope}]" if self.threshold.stage == EVERY_STAGE else ""
        mark = {"ok": "ok", "crossed": "CROSSED", "no_data": "CROSSED (no data)"}[self.verdict]
        return f"{self.threshold.text}{where}: {observed} -> {mark}"


Figures = Mapping[str, float]
"""One scope's figures by metric name (`tti.p99`, `failure_rate`, `failures.capacity`, ...)."""


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What thresholds are checked against: the whole run's figures and each stage's, in vendor seconds."""

    run: Figures
    stages: dict[str, Figures] = field(default_factory=dict)  # in the order the stages ran
    steps: tuple[str, ...] = ()  # the steps the run recorded (`upload`, `exec.overhead`, ...): none without a plan


def phase_names() -> tuple[str, ...]:
    """The phases a figure exists for, read from the aggregation (not a list of our own)."""
    from harness.results.figures.stage_aggregate import PHASES, STARTUP

    return (*(name for name, _ in PHASES), STARTUP)


def failure_kinds() -> tuple[str, ...]:
    """The failure taxonomy, as the shipped latency-model schema lists it (the results room's copy)."""
    from harness.results.export.latency_schema import latency_model_schema

    return tuple(latency_model_schema()["$defs"]["failure_kind"]["enum"])


def parse(text: str) -> Threshold:
    """One expression; a bad one is a one-line UsageError naming the bad part."""
    raw = str(text).strip()
    if STEP_PREFIX in raw:
        return _parse_step(raw)
    match = _EXPRESSION.match(raw)
    if not raw or match is None:
        raise UsageError(
            f"--threshold {raw!r}: not METRIC OP NUMBER (e.g. 'tti.p99<30', 'stage[02-ramp40].failure_rate<0.02')"
        )
    stage = match["stage"]
    if stage is not None and not stage.strip():
        raise UsageError(f"--threshold {raw!r}: empty stage name in stage[] (a name, or * for every stage)")
    op = match["op"]
    if op not in _OPERATORS:
        raise UsageError(f"--threshold {raw!r}: operator {op!r} is not one of <, <=, >, >=")
    metric = match["metric"]
    kind = _metric_kind(raw, metric)
    number, unit = match["number"], match["unit"]
    try:
        bound = float(number)
    except ValueError:
        raise UsageError(f"--threshold {raw!r}: {(number + unit) or '(nothing)'!r} is not a number") from None
    if not math.isfinite(bound):
        raise UsageError(f"--threshold {raw!r}: {number!r} is not a finite number")
    bound = _apply_unit(raw, kind, bound, unit)
    return Threshold(text=raw, metric=metric, op=op, bound=bound, stage=stage.strip() if stage else None)  # type: ignore[arg-type]


def _parse_step(raw: str) -> Threshold:
    """`[stage[S].]step:STEP(.| )STAT OP NUMBER [UNIT]`, its metric normalised to `step:STEP.STAT`."""
    match = _STEP_EXPRESSION.match(raw)
    if match is None or not match["key"] or match["key"].startswith("["):
        raise UsageError(
            f"--threshold {raw!r}: not step:STEP.STAT OP NUMBER (e.g. 'step:upload.p99<5s', "
            "'step:exec.overhead p50 < 10ms', 'step:exec[pytest].failures<1')"
        )
    stage = match["stage"]
    if stage is not None and not stage.strip():
        raise UsageError(f"--threshold {raw!r}: empty stage name in stage[] (a name, or * for every stage)")
    key, stat, op = match["key"], match["stat"], match["op"]
    if stat not in STEP_STATS:
        raise UsageError(f"--threshold {raw!r}: a step has no statistic {stat!r} (one of {', '.join(STEP_STATS)})")
    if op not in _OPERATORS:
        raise UsageError(f"--threshold {raw!r}: operator {op!r} is not one of <, <=, >, >=")
    kind = "count" if stat == COUNT_METRIC else "rate" if stat == "failure_rate" else "duration"
    number, unit = match["number"], match["unit"]
    try:
        bound = float(number)
    except ValueError:
        raise UsageError(f"--threshold {raw!r}: {(number + unit) or '(nothing)'!r} is not a number") from None
    if not math.isfinite(bound):
        raise UsageError(f"--threshold {raw!r}: {number!r} is not a finite number")
    bound = _apply_unit(raw, kind, bound, unit)
    metric = f"{STEP_PREFIX}{key}.{stat}"
    return Threshold(text=raw, metric=metric, op=op, bound=bound, stage=stage.strip() if stage else None)  # type: ignore[arg-type]


def step_of(metric: str) -> str | None:
    """The step a `step:STEP.STAT` metric names (None for any other metric)."""
    if not metric.startswith(STEP_PREFIX):
        return None
    body = metric.removeprefix(STEP_PREFIX)
    for stat in sorted(STEP_STATS, key=len, reverse=True):
        if body.endswith("." + stat):
            return body[: -len(stat) - 1]
    return body


def check_steps(thresholds: Sequence[Threshold], figures: RunFigures, where: str = "the run") -> None:
    """A `step:` threshold naming a step the run never ran is bad input (one line naming the run's steps), not a
    silent `no_data`: the reading commands (`summary`, `report`, `compare`) call this before evaluating."""
    for threshold in thresholds:
        step = step_of(threshold.metric)
        if step is None or step in figures.steps:
            continue
        if not figures.steps:
            raise UsageError(
                f"--threshold {threshold.text!r}: {where} has no steps (a steps/ table is written by runs with --plan)"
            )
        raise UsageError(
            f"--threshold {threshold.text!r}: {where} has no step {step!r} (its steps: {', '.join(figures.steps)})"
        )


def parse_all(texts: Iterable[str] | None) -> tuple[Threshold, ...]:
    """Every `--threshold` given; one value may also hold several separated by `;` (an environment variable)."""
    parsed: list[Threshold] = []
    for text in texts or ():
        for part in str(text).split(";"):
            if part.strip():
                parsed.append(parse(part))
    return tuple(parsed)


def _metric_kind(raw: str, metric: str) -> str:
    """`duration`, `rate`, `count` or `start_rate`; an unknown metric names the choices."""
    if metric in RATE_METRICS:
        return "rate"
    if metric == START_RATE:
        return START_RATE
    if metric == COUNT_METRIC:
        return "count"
    head, _, rest = metric.partition(".")
    if head == COUNT_METRIC:
        kinds = failure_kinds()
        if rest not in kinds:
            raise UsageError(f"--threshold {raw!r}: unknown failure kind {rest!r} (one of {', '.join(kinds)})")
        return "count"
    phases = phase_names()
    if head in phases:
        if rest not in STATS:
            raise UsageError(
                f"--threshold {raw!r}: {head} has no statistic {rest or '(none)'!r} (one of {', '.join(STATS)})"
            )
        return "duration"
    others = (*RATE_METRICS, START_RATE, COUNT_METRIC, f"{COUNT_METRIC}.KIND")
    raise UsageError(
        f"--threshold {raw!r}: unknown metric {metric!r} (phases: {', '.join(phases)}, as PHASE.p99; "
        f"or {', '.join(others)})"
    )


def _apply_unit(raw: str, kind: str, bound: float, unit: str) -> float:
    allowed = {
        "duration": {"": 1.0, "s": 1.0, "ms": 0.001},
        "rate": {"": 1.0, "%": 0.01},
        "count": {"": 1.0},
        START_RATE: {"": 1.0},
    }[kind]
    if unit not in allowed:
        units = ", ".join(u for u in allowed if u) or "none"
        raise UsageError(f"--threshold {raw!r}: unit {unit!r} does not fit a {kind.replace('_', ' ')} (units: {units})")
    bound *= allowed[unit]
    if kind == "rate" and not 0 <= bound <= 1:
        raise UsageError(f"--threshold {raw!r}: a rate is between 0 and 1 (or 0% and 100%)")
    return bound


def evaluate(thresholds: Sequence[Threshold], figures: RunFigures) -> list[Verdict]:
    """Each threshold against its scope: one verdict per threshold, one per stage for `stage[*]`."""
    verdicts: list[Verdict] = []
    for threshold in thresholds:
        if threshold.stage is None:
            scopes: list[tuple[str, Figures | None]] = [(RUN_SCOPE, figures.run)]
        elif threshold.stage == EVERY_STAGE:
            scopes = list(figures.stages.items()) or [(EVERY_STAGE, None)]
        else:
            scopes = [(threshold.stage, figures.stages.get(threshold.stage))]
        for scope, values in scopes:
            observed = lookup(values, threshold.metric) if values is not None else None
            if observed is None:
                verdicts.append(Verdict(threshold, scope, None, "no_data"))
            else:
                verdicts.append(Verdict(threshold, scope, observed, "ok" if threshold.holds(observed) else "crossed"))
    return verdicts


def lookup(values: Figures, metric: str) -> float | None:
    """A metric's value in one scope; None when it was not observed (a kind never seen counts 0)."""
    value = values.get(metric)
    if value is None and metric.startswith(COUNT_METRIC + ".") and COUNT_METRIC in values:
        return 0.0
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def any_crossed(verdicts: Iterable[Verdict]) -> bool:
    return any(verdict.crossed for verdict in verdicts)


def format_verdicts(verdicts: Sequence[Verdict]) -> str:
    """The lines the summaries print: each threshold, its observed value (vendor seconds) and its verdict."""
    if not verdicts:
        return ""
    crossed = sum(verdict.crossed for verdict in verdicts)
    head = (
        f"thresholds (vendor seconds): {crossed} of {len(verdicts)} crossed"
        if crossed
        else (f"thresholds (vendor seconds): all {len(verdicts)} hold")
    )
    return "\n".join([head, *(f"  {verdict.describe()}" for verdict in verdicts)])


def _number(metric: str, value: float) -> str:
    if metric.startswith(STEP_PREFIX):  # its statistic says the unit: a count, a rate or seconds
        metric = {"failures": COUNT_METRIC, "failure_rate": "failure_rate"}.get(metric.rsplit(".", 1)[-1], "")
    if metric in RATE_METRICS:
        return f"{value:.4g} ({100 * value:.2f}%)"
    if metric == COUNT_METRIC or metric.startswith(COUNT_METRIC + "."):
        return f"{value:.0f}"
    if metric == START_RATE:
        return f"{value:.4g}/s"
    return f"{value:.4g} s"
