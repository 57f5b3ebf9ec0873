"""`stampede profiles`: the simulated vendor profiles a run can name with `--profile`.

`--provenance [PROFILE]` prints what each number of a profile is: calibrated (the checks that hold it), documented,
assumed (why) or circular, with its source, so a reader can tell a reproduction from a built-in assumption.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from typing import TYPE_CHECKING

from harness.errors import UsageError

if TYPE_CHECKING:
    from providers.sim.core.profile import Profile


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--provenance",
        nargs="?",
        const="",
        default=None,
        metavar="PROFILE",
        help="every number of PROFILE (default: all profiles) with its label and source",
    )


def run(args: argparse.Namespace) -> int:
    from providers.sim.core.profile import ProfileError, load_profile, profile_names

    if args.provenance is None:
        for name in profile_names():
            profile = load_profile(name)
            print(f"{name:<12} time scale {profile.default_time_scale:<5g} {profile.description}")
        return 0
    names = [args.provenance] if args.provenance else profile_names()
    for i, name in enumerate(names):
        try:
            profile = load_profile(name)
        except ProfileError as exc:
            raise UsageError(str(exc)) from None
        print(("\n" if i else "") + provenance_table(profile))
    return 0


def provenance_table(profile: Profile) -> str:
    """Markdown: field, value, label, source; then the count of each kind of label."""
    from providers.sim.core.profile import label_kind

    fields = profile.numeric_fields()
    kinds = Counter(label_kind(profile.labels.get(key, "")) or "unlabelled" for key in fields)
    lines = [
        f"`{profile.name}`: {len(fields)} values, "
        + ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items(), key=lambda kv: -kv[1])),
        "",
        "| field | value | label | source |",
        "|---|---|---|---|",
    ]
    for key, value in fields.items():
        shown = "inf" if isinstance(value, float) and math.isinf(value) else f"{value:g}"
        label = profile.labels.get(key, "unlabelled").replace("|", "/")
        source = profile.sources.get(key, "-").replace("|", "/")
        lines.append(f"| {key} | {shown} | {label} | {source} |")
    return "\n".join(lines)
