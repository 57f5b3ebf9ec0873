"""`stampede compare BASELINE CANDIDATE [CANDIDATE ...]`: wiring only (heavy imports happen in run()).

Exit status: 2 for bad input; else 99 (EXIT_THRESHOLDS_CROSSED) when a `--threshold` is crossed by a candidate
(an absolute bar, as `stampede run` and `report` check it; before a relative verdict), else 98 (EXIT_REGRESSION) when
a gated figure of a candidate is worse than the baseline beyond the noise, else 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from foundation.converters import bounded_int, non_negative_float
from harness.errors import UsageError, one_line_errors
from harness.results.render.cli_options import seconds_option, threshold_option


def _fraction(text: str) -> float:
    """0.05 or 5 (= 5%)."""
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value >= 1 or text.endswith("%"):
        value /= 100.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction between 0 and 1 (or a percentage)")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", metavar="BASELINE", help="the run folder to compare against (results/<run_id>)")
    parser.add_argument("candidates", nargs="+", metavar="CANDIDATE", help="one or more run folders to compare with it")
    parser.add_argument(
        "-o",
        "--out",
        default=None,
        help="output folder for compare.html, compare.json and the PNGs (default: ./stampede-compare)",
    )
    parser.add_argument("--seconds", **seconds_option("durations"))
    parser.add_argument(
        "--gate",
        default=None,
        metavar="FIGURES",
        help="figures whose being worse exits 98, comma-separated: <phase>.<quantile> (tti.p99, "
        "ready.p50 ...), failure_rate, init_failure_rate, failures.<kind>, step:<step>.<quantile> (step:upload.p99, "
        "step:exec.overhead.p50: runs with --plan, vendor seconds); or none "
        "(default: tti.p50,tti.p99,failure_rate)",
    )
    parser.add_argument(
        "--min-effect",
        type=_fraction,
        default=0.05,
        metavar="FRACTION",
        help="smallest change, relative to the baseline, that can be worse/better (0.05 or 5 = 5%%; default 5%%)",
    )
    parser.add_argument(
        "--min-seconds",
        type=non_negative_float,
        default=0.01,
        metavar="SECONDS",
        help="smallest duration change that can be worse/better (default 0.01)",
    )
    parser.add_argument(
        "--min-rate",
        type=_fraction,
        default=0.005,
        metavar="FRACTION",
        help="smallest failure-rate change that can be worse/better (0.005 = half a percentage point; default)",
    )
    parser.add_argument(
        "--confidence",
        type=_fraction,
        default=0.95,
        metavar="LEVEL",
        help="confidence level of the intervals (default 0.95)",
    )
    parser.add_argument(
        "--resamples",
        type=bounded_int(100, 1_000_000),
        default=2000,
        metavar="N",
        help="bootstrap resamples (default 2000)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="bootstrap seed: the same seed, the same intervals (default 0)"
    )
    parser.add_argument(
        "--tolerance",
        type=_fraction,
        default=None,
        metavar="FRACTION",
        help="stages match when their measured concurrency is within this of the baseline's (default 0.15)",
    )
    parser.add_argument("--no-figures", action="store_true", help="no PNG (compare.html holds the tables only)")
    parser.add_argument("--threshold", **threshold_option("each candidate's own figures"))


@one_line_errors
def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from harness.results.comparison.compare import DEFAULT_GATE, Settings, parse_gate
    from harness.results.comparison.compare_report import build_compare
    from harness.results.figures.thresholds import parse_all
    from harness.results.read.concurrency import LEVEL_TOLERANCE

    pass_fail = parse_all(args.threshold)  # a bad expression ends here, before any reading

    if not 0 < args.confidence < 1:
        raise UsageError(f"--confidence {args.confidence:g}: give a level between 0 and 1, e.g. 0.95")
    settings = Settings(
        confidence=args.confidence,
        resamples=args.resamples,
        seed=args.seed,
        min_relative=args.min_effect,
        min_seconds=args.min_seconds,
        min_rate=args.min_rate,
        tolerance=LEVEL_TOLERANCE if args.tolerance is None else args.tolerance,
        gate=DEFAULT_GATE if args.gate is None else parse_gate(args.gate),
    )
    result = build_compare(
        [args.baseline, *args.candidates],
        Path(args.out) if args.out else None,
        basis=args.seconds,
        settings=settings,
        figures=not args.no_figures,
        thresholds=pass_fail,
    )
    print(result.text)
    return result.exit_code


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"stampede: error: {message} (see {self.prog} --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m harness.cli.compare ...`: the same command outside `stampede`."""
    parser = _OneLineParser(prog="stampede compare", description="A candidate run against a baseline, with a verdict.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
