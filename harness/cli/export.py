"""`stampede export RUN_DIR... -o latency_model.json`: wiring only (heavy imports happen in run())."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from harness.errors import UsageError, one_line_errors


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="results/<run_id> folders (pooled per provider/profile)"
    )
    parser.add_argument(
        "-o", "--out", default="latency_model.json", help="where to write (default: latency_model.json)"
    )
    parser.add_argument("--no-fits", action="store_true", help="quantile grids only, no parametric fits (faster)")
    parser.add_argument("--max-fit-samples", type=int, default=20_000, metavar="N",
                        help="values per fit (a seeded random subset; quantiles always use every row)")  # fmt: skip


@one_line_errors
def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from harness.results.latency_export import build_latency_model, write_latency_model

    if args.max_fit_samples < 100:
        raise UsageError("--max-fit-samples must be at least 100")
    document = build_latency_model(args.run_dirs, fit=not args.no_fits, max_fit_samples=args.max_fit_samples)
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
    print(f"latency model (schema v1, validated): {args.out}")
    return 0


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"stampede: error: {message} (see {self.prog} --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _OneLineParser(prog="stampede export", description="Export the latency model of one or more runs.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
