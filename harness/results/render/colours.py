"""One colour per failure kind (and per outcome line) in every figure, so a kind reads the same in every panel.

Keyed by the contract's `FailureKind` values as strings (results does not import providers.base; a test checks
every kind has a colour). Matplotlib's cycle gave a kind whatever colour came next in each panel, so
`rate_limited` was orange in one and blue in the next. The "compare" figures use this mapping too.
"""

from __future__ import annotations

FAILURE_KIND_COLOURS: dict[str, str] = {
    # init failures: strong colours
    "rate_limited": "#ff7f0e",  # orange
    "quota_exhausted": "#d62728",  # red
    "capacity": "#8c564b",  # brown
    "ready_timeout": "#9467bd",  # purple
    "died_before_ready": "#e377c2",  # pink
    "image": "#bcbd22",  # olive
    "create_error": "#17becf",  # cyan
    "client_startup_deadline": "#637939",  # dark olive: the RL client's deadline, not the vendor's
    "transfer_error": "#843c39",  # dark red: an upload or download refused or broken (contract 9)
    "snapshot_error": "#7b4173",  # plum: a snapshot or fork refused or failed (contract 9)
    # after the sandbox was usable: blues and light tones
    "exec_error": "#1f77b4",  # blue
    "exec_timeout": "#6baed6",  # light blue
    "died_during_exec": "#c5b0d5",  # lilac
    "oom": "#ff9896",  # salmon
    "auth": "#c49c94",  # tan
    "invalid_request": "#dbdb8d",  # khaki
    "transport": "#9edae5",  # pale cyan
    "harness": "#393b79",  # indigo: our own bug, should stay 0
    "unknown": "#7f7f7f",  # grey: a classification to add
}
OTHER_KIND_COLOUR = "#c7c7c7"
"""A kind this table does not know (a newer contract's, or a damaged row): light grey, never a cycled colour."""

ALL_FAILURES_COLOUR = "#000000"  # the total over kinds
IN_FLIGHT_COLOUR = "#333333"
READY_COLOUR = "#2ca02c"  # green: no failure kind uses it
PHASE_COLOURS: dict[str, str] = {
    "create": "#4c72b0",  # steel blue
    "ready": "#dd8452",  # sand orange
    "first_command": "#55a868",  # sage green
    "later_commands": "#8172b3",
    "teardown": "#937860",
}
"""One colour per phase (harness.results.figures.stage_aggregate.PHASES names) wherever phases are drawn."""


def failure_colour(kind: str) -> str:
    """The one colour of a failure kind in every figure."""
    return FAILURE_KIND_COLOURS.get(str(kind), OTHER_KIND_COLOUR)


def kind_order(kinds: set[str] | list[str]) -> list[str]:
    """Kinds in the table's order (init failures first), unknown strings last: legends list them the same way."""
    known = list(FAILURE_KIND_COLOURS)
    return sorted(kinds, key=lambda k: (known.index(k) if k in known else len(known), k))
