"""`stampede report RUN_DIR [RUN_DIR ...] [-o OUT_DIR]`: wiring only (heavy imports happen in run())."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from foundation.converters import positive_finite_float
from harness.errors import UsageError, one_line_errors
from harness.results.figures.knee import DEFAULT_MAX_FAILURE_RATE, DEFAULT_P99_FACTOR
from harness.results.render.cli_options import seconds_option, threshold_option


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value > 1:
        value /= 100.0  # "5" means 5%
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate between 0 and 1 (or a percentage)")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="results/<run_id> folders (several: side by side)"
    )
    parser.add_argument(
        "-o",
        "--out",
        default=None,
        help="output folder (default: RUN_DIR/report, or ./stampede-report for several runs)",
    )
    parser.add_argument("--seconds", **seconds_option("every duration (each table header and figure axis names it)"))
    parser.add_argument(
        "--knee-max-failure",
        type=_fraction,
        default=DEFAULT_MAX_FAILURE_RATE,
        metavar="RATE",
        help="knee: highest failure rate a stage may have (0.05 or 5 = 5%%; "
        f"default {100 * DEFAULT_MAX_FAILURE_RATE:g}%%, as the live knee search)",
    )
    parser.add_argument(
        "--knee-p99-ratio",
        type=positive_finite_float,
        default=DEFAULT_P99_FACTOR,
        metavar="X",
        help="knee: TTI p99 at most X times the lowest stage's "
        f"(default {DEFAULT_P99_FACTOR:g}, as the live knee search)",
    )
    parser.add_argument(
        "--knee-max-p99",
        type=positive_finite_float,
        default=None,
        metavar="SECONDS",
        help="knee: TTI p99 at most this many seconds, instead of the ratio (default: the ratio)",
    )
    parser.add_argument("--no-figures", action="store_true", help="tables only (no PNG; report.html without figures)")
    parser.add_argument("--threshold", **threshold_option("each run's figures"))


@one_line_errors
def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from harness.results.figures.knee import KneeThresholds
    from harness.results.figures.thresholds import parse_all
    from harness.results.render.report import build_report

    pass_fail = parse_all(args.threshold)  # a bad expression ends here, before any reading
    thresholds = KneeThresholds(
        max_failure_rate=args.knee_max_failure, max_p99_ratio=args.knee_p99_ratio, max_p99_s=args.knee_max_p99
    )
    result = build_report(
        args.run_dirs,
        Path(args.out) if args.out else None,
        basis=args.seconds,
        thresholds=thresholds,
        figures=not args.no_figures,
        pass_fail=pass_fail,
    )
    print(result.text)
    from harness.results.figures.thresholds import format_verdicts

    for run_id, verdicts in result.verdicts:  # the same verdicts report.html opens with
        print(f"{run_id}: {format_verdicts(verdicts)}")
    return result.exit_code


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"stampede: error: {message} (see {self.prog} --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m harness.cli.report ...`: the same command before it is wired into `stampede`."""
    parser = _OneLineParser(prog="stampede report", description="Tables, figures and report.html from run folders.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["UsageError", "add_arguments", "main", "run"]
