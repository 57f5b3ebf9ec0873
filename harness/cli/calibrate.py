"""`stampede calibrate PROFILE`: the public benchmarks' protocols against a simulated vendor, side by side.

The comparison itself lives with the simulator (providers.sim.core.calibration); this module parses, prints and
sets the exit code (1 when a figure is out of tolerance, so CI can hold a profile to the public record).
"""

from __future__ import annotations

import argparse

from harness.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profiles", nargs="*", metavar="PROFILE", help="profile names or .toml paths (default: all)")
    parser.add_argument("--seeds", type=int, default=None, help="seeded runs per protocol (default: 10)")


def run(args: argparse.Namespace) -> int:
    from providers.sim.core.calibration import DEFAULT_SEEDS, calibrate, render
    from providers.sim.core.profile import ProfileError, load_profile, profile_names

    seeds = DEFAULT_SEEDS if args.seeds is None else args.seeds
    if seeds < 1:
        raise UsageError("--seeds must be at least 1")
    names = args.profiles or profile_names()
    failed = 0
    for i, name in enumerate(names):
        try:
            profile = load_profile(name)
        except ProfileError as exc:
            raise UsageError(str(exc)) from None
        rows = calibrate(profile, seeds=seeds)
        failed += sum(1 for row in rows if not row.ok)
        print(("\n" if i else "") + render(profile.name, rows, seeds))
    return 1 if failed else 0
