"""The options every command that reads results takes, declared once.

`--threshold` and `--seconds` mean the same in `stampede run`, `summary`, `report` and `compare` (and `locust -f`);
only what they apply to differs, so each command names that and nothing else.
"""

from __future__ import annotations

from typing import Any

SECONDS_CHOICES = ("vendor", "wall")
THRESHOLD_EXAMPLES = "'tti.p99<30', 'init_failure_rate<2%%', 'failures.rate_limited<5', 'stage[*].tti.p99<30'"


def threshold_option(applies_to: str, default_note: str = "") -> dict[str, Any]:
    """`--threshold EXPR` (repeatable): keyword arguments for add_argument; `applies_to` says whose figures."""
    note = f"; {default_note}" if default_note else ""
    return {
        "action": "append",
        "default": None,
        "metavar": "EXPR",
        "help": f"pass/fail on {applies_to}, vendor seconds, e.g. {THRESHOLD_EXAMPLES} (repeatable; exit 99 when "
        f"one is crossed; grammar: harness/results/figures/thresholds.py){note}",
    }


def seconds_option(applies_to: str) -> dict[str, Any]:
    """`--seconds vendor|wall`: keyword arguments for add_argument; `applies_to` says what it changes."""
    return {
        "choices": SECONDS_CHOICES,
        "default": "vendor",
        "help": f"{applies_to} in vendor seconds (default: a simulated vendor's own seconds, wall / time scale; a "
        "real vendor's are wall seconds) or wall seconds",
    }
