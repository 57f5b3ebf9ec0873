"""One option's value, parsed and bounded: the ceilings, the typed converters and the small grammars
(`--stages 60..3840`, `--turns 2..8`, `KEY=VALUE`) that `stampede run`, `locust -f` and the web form share.

Ceilings no machine reaches: a typo fails at parse time instead of exhausting memory, files or time.
harness.locust.run_limits holds a run's peak in flight against this machine's own (lower) budgets later, and
MAX_IN_FLIGHT is the one ceiling --allow-oversubscribe does not lift.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from typing import Any

from foundation.converters import bounded_float, bounded_int
from harness.errors import UsageError

MAX_IN_FLIGHT = 1_000_000  # users, stage levels, --max-inflight, --batch x --group
MAX_SECONDS = 30 * 24 * 3600.0  # any duration: holds, timeouts, backoff, lifetime
MAX_RATE = 100_000.0  # starts per second (-r, --rates)
MAX_TURNS = 100_000
MAX_RETRIES = 1000
MAX_CPU = 1024.0
MAX_MEMORY_MB = 1 << 24  # 16 TiB
in_flight = bounded_int(1, MAX_IN_FLIGHT)

# Which vendor, and which simulated behaviour, a run gets unless told: here, not in harness.locust.settings, so that
# `stampede run`'s head start (harness.cli.head_start) reads them before anything heavy is imported.
DEFAULT_PROVIDER = "stub"
DEFAULT_PROFILE = "prime-like"
DEFAULT_PROFILES = {
    "modal": "modal-like",
    "e2b": "e2b-like",
    "daytona": "daytona-like",
    "agent-sandbox": "agent-sandbox-like",
    "vercel": "vercel-like",
    "coreweave": "coreweave-like",
    "runloop": "runloop-like",
}


def default_profile(provider: str) -> str:
    """The simulated vendor a provider's --local run gets unless --profile says otherwise."""
    return DEFAULT_PROFILES.get(provider, DEFAULT_PROFILE)


seconds = bounded_float(0.0, MAX_SECONDS, low_open=True)
seconds_or_zero = bounded_float(0.0, MAX_SECONDS)
rate = bounded_float(0.0, MAX_RATE, low_open=True)


DEFAULT_SCENARIO = "ramp"  # `stampede run` without --scenario
PACED_BY_THE_USER = frozenset({"ramp", "steady", "soak", "knee", "staggered", "arrival"})
"""Scenarios whose users start at a pace the user chose (a spawn rate, a stagger, an arrival rate): their embedded
vendor plays no burst 1:1 (`providers.sim.core.clock.LoopClock`), which exists for a burst's sending, as fast as the
harness can. Played 1:1, the opening 3 wall s of modal-like's ramp at time scale 0.1 reached the vendor ten times as
dense as its spawn rate asked (480 creates in 5.9 vendor s, not 48), and the start pipeline collapsed (TTI p50 64 vendor
s) where the ramp at its spawn rate predicts 4.3 s. A locustfile of the user's own keeps the pacing."""


def scenario_stem(scenario: Any) -> str:
    """A scenario's name as `stampede run --scenario` gives it, or as its locustfile's path does (`locust -f`)."""
    first = str(scenario or "").split(",")[0].strip()
    return os.path.splitext(os.path.basename(first))[0]


def paces_bursts(scenario: Any) -> bool:
    """Whether the scenario's embedded vendor plays a burst's sending 1:1 (not when `PACED_BY_THE_USER`)."""
    return scenario_stem(scenario) not in PACED_BY_THE_USER


def check_positive(name: str, value: float | None) -> None:
    if value is None or not math.isfinite(value) or value <= 0:
        raise UsageError(f"--{name} must be a positive number (got {value!r})")


def check_users_and_rate(users: Any, spawn_rate: Any) -> None:
    """-u and -r as Locust parsed them under `locust -f` (a plain int and float: `-r nan` gets through)."""
    if users is not None and not (isinstance(users, int) and 0 <= users <= MAX_IN_FLIGHT):
        raise UsageError(f"--users must be a whole number from 1 to {MAX_IN_FLIGHT} (got {users!r})")
    if spawn_rate is not None:
        value = float(spawn_rate)
        if not (math.isfinite(value) and 0 <= value <= MAX_RATE):
            raise UsageError(f"--spawn-rate must be a positive number, at most {MAX_RATE:g} (got {spawn_rate!r})")


MAX_STAGES = 64  # LOW..HIGH doubles at most this often
MAX_LISTED_STAGES = 1000  # a longer list is a typo, and each stage holds for --hold seconds


def parse_stages(text: str) -> tuple[int, ...]:
    """`60,120,240` as given, or `60..3840`: doubling from the first to the last (the last always included)."""
    text = str(text).replace(" ", "")
    try:
        if ".." in text:
            low, high = (int(part) for part in text.split("..", 1))
            if low <= 0 or high < low:
                raise ValueError
            if high > MAX_IN_FLIGHT:
                raise UsageError(f"--stages levels must be at most {MAX_IN_FLIGHT} (got {text!r})")
            stages: list[int] = []
            level = low
            while level < high and len(stages) < MAX_STAGES:
                stages.append(level)
                level *= 2
            return (*stages, high)
        parsed = tuple(int(part) for part in text.split(",") if part)
    except ValueError:
        raise UsageError(f"--stages must be whole numbers, A,B,C or LOW..HIGH (got {text!r})") from None
    if not parsed or any(stage <= 0 for stage in parsed):
        raise UsageError(f"--stages must list positive concurrency levels (got {text!r})")
    if max(parsed) > MAX_IN_FLIGHT:
        raise UsageError(f"--stages levels must be at most {MAX_IN_FLIGHT} (got {text!r})")
    if len(parsed) > MAX_LISTED_STAGES:
        raise UsageError(f"--stages lists {len(parsed)} stages, more than {MAX_LISTED_STAGES} (LOW..HIGH doubles)")
    return parsed


def parse_rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(part) for part in str(text).replace(" ", "").split(",") if part)
    except ValueError:
        raise UsageError(f"--rates must be comma-separated numbers (got {text!r})") from None
    if not rates or any(not (math.isfinite(rate) and 0 < rate <= MAX_RATE) for rate in rates):
        raise UsageError(f"--rates must be positive starts per second, at most {MAX_RATE:g} (got {text!r})")
    return rates


def parse_turns(text: str) -> tuple[int, int | None]:
    text = str(text).replace(" ", "")
    try:
        if ".." in text:
            low, high = (int(part) for part in text.split("..", 1))
        else:
            low, high = int(text), None
    except ValueError:
        raise UsageError(f"--turns takes N or MIN..MAX (got {text!r})") from None
    if low < 0 or (high is not None and high < low):
        raise UsageError(f"--turns takes N >= 0 or MIN..MAX with MIN <= MAX (got {text!r})")
    if max(low, high or 0) > MAX_TURNS:
        raise UsageError(f"--turns must be at most {MAX_TURNS} (got {text!r})")
    return low, high


def parse_trainer(text: Any) -> dict[str, Any] | None:
    if not text:
        return None
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        raise UsageError("--trainer takes a JSON object") from None
    if not isinstance(value, dict):
        raise UsageError("--trainer takes a JSON object")
    return value


def parse_argv(text: str | None, flag: str) -> tuple[str, ...] | None:
    if not text:
        return None
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise UsageError(f"--{flag}: {exc}") from None
    return words or None


def parse_key_values(items: list[str] | None, flag: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in items or []:
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--{flag} takes KEY=VALUE (got {item!r})")
        result[key.strip()] = value.strip()
    return result


def as_list(value: Any) -> list[str]:
    """An appended option (a list), or one string from an environment variable."""
    if not value:
        return []
    return [str(item) for item in value] if isinstance(value, (list, tuple)) else [str(value)]
