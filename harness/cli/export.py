"""`stampede export RUN_DIR... -o latency_model.json`: wiring only (heavy imports happen in run())."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from harness.errors import UsageError, one_line_errors


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="results/<run_id> folders (pooled per provider/profile)"
    )
    parser.add_argument(
        "-o", "--out", default="latency_model.json", help="where to write (default: latency_model.json)"
    )
    parser.add_argument("--no-fits", action="store_true", help="quantile grids only, no parametric fits (faster)")
    parser.add_argument(
        "--max-fit-samples",
        type=int,
        default=20_000,
        metavar="N",
        help="values per fit (a seeded random subset; quantiles always use every row)",
    )


@one_line_errors
def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from harness.results.export.latency_export import build_latency_model, write_latency_model
    from harness.results.export.step_export import describe_bucket, describe_image_pull

    if args.max_fit_samples < 100:
        raise UsageError("--max-fit-samples must be at least 100")
    document = build_latency_model(
        args.run_dirs, fit=not args.no_fits, max_fit_samples=args.max_fit_samples, profile_limits=profile_limits
    )
    write_latency_model(document, Path(args.out))
    for model in document["models"]:
        print(f"{model['provider']}/{model['profile']}: runs {', '.join(model['run_ids'])}")
        for bucket in model["buckets"]:
            metrics = bucket["metrics"]
            tti = metrics.get("tti")
            fit = tti["selected_fit"] if tti else None
            levels = document["quantile_levels"]
            p50 = tti["quantiles"][levels.index(0.5)] if tti else float("nan")
            p99 = tti["quantiles"][levels.index(0.99)] if tti else float("nan")
            print(
                f"  {bucket['concurrency']:>6} in flight: {bucket['samples']['rollouts']} rollouts,"
                f" init failure {100 * bucket['failure_probability']['init']:.1f}%,"
                f" TTI p50 {p50:.3g} s p99 {p99:.3g} s (vendor), best fit {fit or '-'}"
            )
            for line in describe_bucket(bucket, levels):
                print(line)
        pull_line = describe_image_pull(model)
        if pull_line:
            print(pull_line)
        limits = model.get("limits")
        if limits:
            cap, rate = limits["concurrency_cap"], limits["create_rate_per_s"]
            print(
                f"  concurrency cap {cap['value'] if cap['value'] is not None else '-'} ({cap['source']}),"
                f" create rate {rate['value'] if rate['value'] is not None else '-'}/s ({rate['source']})"
            )
    print(f"latency model (schema v{document['version']}, validated): {args.out}")
    return 0


def profile_limits(name: str, overrides: Mapping[str, Any]) -> Any:
    """A simulated vendor's limits after the run's overrides, each with the profile's source (None: unknown profile)."""
    from harness.results.figures.vendor_limits import ProfileLimits
    from providers.sim.core.profile import OVERRIDE_SOURCE, ProfileError, load_profile

    try:
        profile = load_profile(name).with_overrides(dict(overrides))
    except ProfileError:
        return None  # a profile file that moved or a renamed profile: the export says the limits are unknown
    sources = profile.sources

    def source(key: str) -> str:
        text = sources.get(key, "no source recorded")
        return text if text != OVERRIDE_SOURCE else f"{OVERRIDE_SOURCE} (--profile-set {key}={overrides.get(key)})"

    return ProfileLimits(
        profile=profile.name,
        concurrency_cap=float(profile.quota.max_active),
        concurrency_cap_source=source("quota.max_active"),
        create_rate_per_s=float(profile.create_rate.per_s),
        create_rate_source=source("create_rate.per_s"),
        create_burst=float(profile.create_rate.burst),
        create_burst_source=source("create_rate.burst"),
    )


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"stampede: error: {message} (see {self.prog} --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _OneLineParser(prog="stampede export", description="Export the latency model of one or more runs.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
