"""`stampede profiles`: the simulated vendor profiles a run can name with `--profile`."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options: the list is short enough to read whole."""


def run(args: argparse.Namespace) -> int:
    from providers.sim.core.profile import load_profile, profile_names

    for name in profile_names():
        profile = load_profile(name)
        print(f"{name:<12} time scale {profile.default_time_scale:<5g} {profile.description}")
    return 0
