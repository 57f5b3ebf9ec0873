"""`stampede summary RUN_DIR [--seconds wall] [--threshold EXPR ...]`: how a run ended, its per-stage table and
its thresholds' verdicts; (re)writes RUN_DIR/summary.json. Exit 99 when a threshold given here is crossed.

Without `--threshold`, the thresholds the run itself was given (run.json `parameters.thresholds`) are checked
and printed again; they do not change the exit status (the run's own exit status already said so).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.results.render.cli_options import seconds_option, threshold_option
from harness.wire.run_endings import ENDINGS, EXIT_COMPLETED, EXIT_THRESHOLDS_CROSSED

EXITED = frozenset(ending.name for ending in ENDINGS if ending.exit_code is not None)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a results/<run_id> folder (results/latest: the newest)")
    parser.add_argument("--seconds", **seconds_option("the table (summary.json and thresholds: always vendor)"))
    parser.add_argument(
        "--threshold", **threshold_option("the run's figures", "default: the run's own, not changing the exit")
    )


def _recorded(manifest: dict[str, Any]) -> list[str]:
    parameters = manifest.get("parameters") if isinstance(manifest.get("parameters"), dict) else {}
    recorded = parameters.get("thresholds") if parameters else None
    return [str(item["text"]) for item in recorded or [] if isinstance(item, dict) and item.get("text")]


def run(args: argparse.Namespace, run_dir: Path | None = None) -> int:
    from harness.results.export.summary_json import FILENAME, build_summary, write_summary
    from harness.results.figures.burst_hold import format_burst_hold, load_burst_hold
    from harness.results.figures.harness_bound import harness_bound_lines
    from harness.results.figures.outages import outage_lines
    from harness.results.figures.run_figures import aggregate_run, run_figures
    from harness.results.figures.step_figures import load_step_view
    from harness.results.figures.thresholds import any_crossed, check_steps, evaluate, format_verdicts, parse_all
    from harness.results.read.dataset import is_run_folder, load_rollout_frame, read_run_info
    from harness.results.read.run_ending import run_ending
    from harness.results.read.run_pointer import resolve_run_dir
    from harness.results.render.step_tables import format_step_table
    from harness.results.render.summary import format_stage_table
    from harness.wire.run_endings import exit_code_for

    given = parse_all(args.threshold)  # bad expressions end here, before any reading
    run_dir = resolve_run_dir(args.run_dir) if run_dir is None else run_dir  # results/latest: the run it names
    if not run_dir.is_dir() or not is_run_folder(run_dir):
        raise UsageError(f"{run_dir} is not a stampede run folder (no run.json and no rollouts or ops parquet files)")
    info = read_run_info(run_dir)
    frame = load_rollout_frame(info.run_dir)
    vendor = aggregate_run(info, frame, "vendor")
    thresholds = given or parse_all(_recorded(info.manifest))
    steps = load_step_view(info)
    figures = run_figures(vendor, steps)
    check_steps(given, figures)  # a step the run never ran: one line naming its steps
    verdicts = evaluate(thresholds, figures)
    ending = run_ending(info.manifest, frame["outcome"] if len(frame) else None)
    print(ending.banner())
    shown = vendor if args.seconds == "vendor" else aggregate_run(info, frame, "wall")
    if shown.stats.stages:
        print(format_stage_table(shown.stats.stages, shown.stats.engine_load, shown.basis))
    else:
        print("(no rollouts recorded)")
    if steps is not None:
        print(format_step_table(steps))
    burst_hold = load_burst_hold(info.run_dir, info.manifest)
    if burst_hold is not None:
        print(format_burst_hold(burst_hold))
    for line in outage_lines(frame):
        print(line)
    for line in harness_bound_lines(info.run_dir):
        print(line)
    if verdicts:
        print(format_verdicts(verdicts))
    crossed = any_crossed(verdicts)
    exit_code = info.manifest.get("exit_code")
    if ending.ending not in EXITED:  # crashed, still running, unknown: no exit status of ours
        exit_code = None
    elif given or not isinstance(exit_code, int):
        exit_code = exit_code_for(ending.ending, crossed)
    document = build_summary(vendor, info.manifest, verdicts, ending.ending, exit_code, steps)
    try:
        write_summary(info.run_dir, document)
    except OSError as exc:
        print(f"stampede: could not write {info.run_dir / FILENAME}: {exc}", file=sys.stderr)
    return EXIT_THRESHOLDS_CROSSED if given and crossed else EXIT_COMPLETED
