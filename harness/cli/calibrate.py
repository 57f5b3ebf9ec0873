"""`stampede calibrate PROFILE`: the public benchmarks' protocols against a simulated vendor, side by side.

The comparison itself lives with the simulator (providers.sim.core.calibration); this module parses, prints and
sets the exit code (1 when a figure is out of its window, so CI can hold a profile to the public record; the last
line names the failing checks). `--profile-set KEY=VALUE` moves one profile value first (what would the public record
say of it?); `--sweep KEY=V1,V2,...` tabulates the 960 outcome and every check's verdict across values and
`--figure PATH` draws it. `--fit RUN [RUN...] --name NAME` goes the other way (issue #31): a profile fitted to the
user's own runs or a published results file (harness.fitting), written as labelled TOML, with the fit printed.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.fitting.fit import FitResult
    from providers.sim.core.calibration import SweepPoint
    from providers.sim.core.profile import Profile

PREDICT_SCENARIOS = ("burst", "ramp", "steady", "sequential", "staggered")  # harness.fitting.predict.SCENARIOS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profiles", nargs="*", metavar="PROFILE", help="profile names or .toml paths (default: all)")
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="seeded runs per protocol (default: 10; --predict: per refit, default 3)",
    )
    parser.add_argument(
        "--profile-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="move one profile value before calibrating (dotted field name, e.g. boot.congestion_knee=64); repeatable",
    )
    parser.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="tabulate the 960 outcome and every public check over these values of one profile field "
        "(e.g. boot.congestion_exponent=2,3,4,6,12) or of the 960 protocols' RL client (client.startup_deadline_s, "
        "client.leak_prob, ...); repeatable; one PROFILE",
    )
    parser.add_argument("--figure", type=Path, default=None, metavar="PATH", help="with --sweep: write the PNG here")
    parser.add_argument(
        "--fit",
        nargs="+",
        default=None,
        metavar="RUN",
        help="fit a profile to these results folders (any provider), or to computesdk results .json files, and write "
        "it as TOML; needs --name",
    )
    parser.add_argument(
        "--vendor", default=None, help="--fit FILE.json: the vendor of a published results file that measures several"
    )
    parser.add_argument("--name", default=None, help="--fit: the fitted profile's name")
    parser.add_argument(
        "--prior",
        default="ideal",
        metavar="PROFILE",
        help="--fit: the profile whose values stand for what the runs cannot identify (default: ideal)",
    )
    parser.add_argument("--out", type=Path, default=None, metavar="PATH", help="--fit: where to write (./NAME.toml)")
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=None,
        metavar="N",
        help="--fit: refit on N bootstrap resamples of the runs and give each fitted value its 90%% interval; "
        "--predict: refits behind the prediction's interval (default 20)",
    )
    _add_predict_arguments(parser)


def _add_predict_arguments(parser: argparse.ArgumentParser) -> None:
    """`--predict PROFILE` and what goes with it (issue #31: a wider run predicted, with its interval)."""
    parser.add_argument(
        "--predict",
        default=None,
        metavar="PROFILE",
        help="predict a scenario on this profile (a name or a TOML written by --fit): TTI p50/p95/p99 and failure "
        "rate with 90%% intervals from bootstrap refits to the runs the profile was fitted from",
    )
    parser.add_argument(
        "--scenario", default=None, choices=PREDICT_SCENARIOS, help="--predict: the shape to predict (burst, ramp, ...)"
    )
    parser.add_argument("--users", type=int, default=None, help="--predict: a burst's width (a ramp's last stage)")
    parser.add_argument(
        "--stages", default=None, metavar="N,N,...", help="--predict --scenario ramp: stages (60,120 or 60..3840)"
    )
    parser.add_argument(
        "--hold",
        type=float,
        default=None,
        metavar="SECONDS",
        help="--predict --scenario ramp or steady: each stage's hold in wall seconds, as `stampede run --hold` "
        "(default: the scenario's, 15 s a ramp stage, 60 s a steady run; --against RUN: the run's own)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="--predict: wall seconds per vendor second of the run predicted, as `stampede run --time-scale` "
        "(default: the profile's; --against RUN: the run's own)",
    )
    parser.add_argument(
        "--inputs",
        nargs="+",
        default=None,
        metavar="RUN",
        help="--predict: the runs (or results .json) the profile was fitted from, when it does not name them",
    )
    parser.add_argument(
        "--against", type=Path, default=None, metavar="RUN", help="--predict: score the prediction against this run"
    )


def _key_value(text: str, flag: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key.strip() or not value.strip():
        raise UsageError(f"{flag} takes KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def run(args: argparse.Namespace) -> int:
    from providers.sim.core.calibration import DEFAULT_SEEDS, calibrate, render
    from providers.sim.core.profile import ProfileError, load_profile, profile_names

    predict_only = (args.scenario, args.users, args.stages, args.inputs, args.against, args.hold, args.time_scale)
    if args.predict is not None:
        return _predict(args)
    if any(v is not None for v in predict_only):
        raise UsageError(
            "--scenario, --users, --stages, --hold, --time-scale, --inputs and --against go with --predict PROFILE"
        )
    if args.fit is not None:
        return _fit(args)
    fit_only = (args.name, args.out, args.vendor)
    if any(v is not None for v in fit_only) or args.prior != "ideal" or args.bootstrap:
        raise UsageError("--name, --prior, --out, --vendor and --bootstrap go with --fit RUN [RUN...]")
    seeds = DEFAULT_SEEDS if args.seeds is None else args.seeds
    if seeds < 1:
        raise UsageError("--seeds must be at least 1")
    overrides = dict(_key_value(text, "--profile-set") for text in args.profile_set)
    sweeps = [_key_value(text, "--sweep") for text in args.sweep]
    if args.figure is not None and not sweeps:
        raise UsageError("--figure draws a sweep: give --sweep KEY=V1,V2,...")
    if sweeps and len(args.profiles) != 1:
        raise UsageError("--sweep takes exactly one PROFILE")
    names = args.profiles or profile_names()
    profiles = []
    for name in names:
        try:
            profiles.append(load_profile(name).with_overrides(overrides))
        except ProfileError as exc:
            raise UsageError(str(exc)) from None
    if sweeps:
        return _sweep(profiles[0], sweeps, seeds, args.figure)
    failing: list[str] = []
    for i, profile in enumerate(profiles):
        rows = calibrate(profile, seeds=seeds)
        failing += [f"{profile.name}: {row.figure.name}" for row in rows if not row.ok]
        print(("\n" if i else "") + render(profile.name, rows, seeds))
    if failing:
        print(f"\ncalibration FAILED ({len(failing)} outside their window): {'; '.join(failing)}")
    return 1 if failing else 0


FIT_WITHIN = 0.10  # a simulated statistic within 10% of the measured one is marked "yes"


def _fit(args: argparse.Namespace) -> int:
    """`--fit RUN [RUN...] --name NAME`: fit, write the TOML, print the fit per protocol and what stayed the prior's."""
    from harness.fitting.fit import fit_profile, with_intervals, write_profile_toml
    from harness.fitting.observations import observations_from_run
    from harness.fitting.public_results import is_public_results_file, read_public_results
    from providers.sim.core.profile import ProfileError, load_profile

    if args.profiles or args.sweep or args.profile_set or args.figure is not None or args.seeds is not None:
        raise UsageError("--fit takes runs, --name, --prior and --out only (no PROFILE, --sweep, --profile-set)")
    if args.bootstrap is not None and args.bootstrap < 0:
        raise UsageError("--bootstrap takes a number of resamples, 0 or more")
    if not args.name or not args.name.strip() or "/" in args.name:
        raise UsageError("--fit needs --name NAME (the fitted profile's name, no '/')")
    try:
        prior = load_profile(args.prior)
    except ProfileError as exc:
        raise UsageError(f"--prior: {exc}") from None
    observations = []
    published = [p for p in args.fit if is_public_results_file(p)]
    if args.vendor is not None and not published:
        raise UsageError("--vendor picks a vendor of a published results file (--fit FILE.json)")
    for source in args.fit:
        if source in published:
            found = read_public_results(Path(source), args.vendor)
        else:
            found = observations_from_run(Path(source))
        if not any(obs.quantiles.get("p50") for obs in found):
            raise UsageError(f"{source}: no successful rollout to fit (every attempt failed, or none ran)")
        observations += found
    out = args.out if args.out is not None else Path(f"{args.name}.toml")
    if out.parent and not out.parent.is_dir():
        raise UsageError(f"--out {out}: the folder {out.parent} does not exist")
    result = fit_profile(observations, prior, args.name)
    if args.bootstrap:
        result = with_intervals(result, observations, prior, args.bootstrap)
    try:
        write_profile_toml(result, out)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(render_fit(result))
    print(f"\nprofile: {out} (use: stampede run --profile {out}; stampede profiles --provenance {out})")
    return 0


def render_fit(result: FitResult) -> str:
    """The fit per protocol (measured vs simulated) and the values the runs could not identify (Markdown)."""
    lines = [
        f"`{result.profile.name}` fitted from {len(result.sources)} input(s) (run stages or published modes), prior `{result.prior}`"
        " (vendor seconds; SDK-side poll windows and loop stalls taken out of the measured TTI)",
        "",
        "| protocol | stat | measured | simulated | error | within 10% (success: 3 pt) |",
        "|---|---|---|---|---|---|",
    ]
    for row in result.rows:
        fmt = (lambda v: f"{100 * v:.1f}%") if row.stat == "success" else (lambda v: f"{v:.3g} s")
        if row.stat == "success":
            err, ok = row.simulated - row.measured, abs(row.simulated - row.measured) <= 0.03
            error = f"{100 * err:+.1f} pt"
        else:
            err, ok = row.error, abs(row.error) <= FIT_WITHIN if not math.isnan(row.error) else False
            error = f"{100 * err:+.1f}%" if not math.isnan(err) else "-"
        lines.append(
            f"| {row.protocol} | {row.stat} | {fmt(row.measured)} | {fmt(row.simulated)} | {error} | "
            f"{'yes' if ok else 'NO'} |"
        )
    rounds = (
        f", [90% interval over {result.interval_rounds} bootstrap resamples of the runs]" if result.intervals else ""
    )
    lines += ["", f"Fitted{rounds}:"]
    lines += [
        f"- {key} = {value:.4g}"
        + (f" [{result.intervals[key][0]:.4g}, {result.intervals[key][1]:.4g}]" if key in result.intervals else "")
        + (f" ({result.notes[key]})" if key in result.notes else "")
        for key, value in result.fitted.items()
    ]
    if result.observed:
        lines += ["", "Seen in the runs, with no profile setting to hold it (the profile's comments say so):"]
        lines += [f"- {key}: {what}" for key, what in result.observed.items()]
    lines += ["", "Not identifiable from these runs (kept at the prior's value, and the profile says so):"]
    lines += [f"- {key}: {why}" for key, why in result.unidentified.items()]
    return "\n".join(lines)


def _sweep(profile: Profile, sweeps: list[tuple[str, str]], seeds: int, figure: Path | None) -> int:
    from providers.sim.core.calibration import CLIENT_PREFIX, client_with, render_sweep, sweep
    from providers.sim.core.profile import ProfileError

    parsed: list[tuple[str, list[str]]] = []
    for key, raw in sweeps:  # every value checked before the first simulation runs
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if not values:
            raise UsageError(f"--sweep {key}= needs at least one value")
        try:
            for value in values:
                if key.startswith(CLIENT_PREFIX):
                    client_with(key[len(CLIENT_PREFIX) :], value)
                else:
                    profile.with_overrides({key: value})
        except ProfileError as exc:
            raise UsageError(str(exc)) from None
        parsed.append((key, values))
    results: list[tuple[str, list[SweepPoint]]] = []
    for i, (key, values) in enumerate(parsed):
        points = sweep(profile, key, values, seeds=seeds)
        results.append((key, points))
        print(("\n" if i else "") + render_sweep(profile.name, key, points, seeds))
    if figure is not None:
        try:
            figure.write_bytes(sweep_png(profile.name, results))
        except OSError as exc:
            raise UsageError(f"cannot write {figure}: {exc.strerror or exc}") from None
        print(f"\nfigure: {figure}", file=sys.stderr)
    return 0


def sweep_png(profile_name: str, results: list[tuple[str, list[SweepPoint]]]) -> bytes:
    """One panel per swept field: the 960 first-attempt failure rate (bars), the rollouts still failed after the
    client's retries (dashed) and the longest startup (black, right axis), each value marked by whether every public
    check passes (blue) or some fail (red, hatched, "fails" under the axis)."""
    from harness.results.render.figure_canvas import panels, png_bytes

    fig, axes = panels(len(results), width=6.0, height=3.8)
    for ax, (key, points) in zip(axes, results, strict=True):
        xs = list(range(len(points)))
        failure = [100 * p.failure_960 for p in points]
        ok = [not p.failing for p in points]
        bars = ax.bar(xs, failure, color=["tab:blue" if good else "tab:red" for good in ok], alpha=0.75)
        for bar, good in zip(bars, ok, strict=True):
            if not good:
                bar.set_hatch("//")
        after = [100 * p.failed_960 for p in points]
        ax.plot(xs, after, color="tab:orange", marker="x", linestyle="--", label="failed after retries (%)")
        ax.legend(loc="upper left", fontsize=8)
        ax.set_ylim(0, 100)
        ax.set_ylabel("960 first attempts failed (bars, %)")
        ax.set_xticks(xs, [p.value + ("" if good else "\nfails") for p, good in zip(points, ok, strict=True)])
        ax.set_xlabel(key)
        twin = ax.twinx()
        minutes = [p.startup_max / 60 if not math.isnan(p.startup_max) else math.nan for p in points]
        twin.plot(xs, minutes, color="black", marker="o", label="longest startup")
        twin.set_ylabel("960 longest startup (min)")
        twin.set_ylim(bottom=0)
        twin.grid(False)
        ax.set_title(f"{profile_name}: {key} (red: a public check fails)")
    return png_bytes(fig)


def _stages(text: str) -> list[int]:
    """`60,120,240` or `60..3840` (doubling, as `stampede run --stages` reads it)."""
    try:
        if ".." in text:
            first, _, last = text.partition("..")
            low, high = int(first), int(last)
            if low < 1 or high < low:
                raise ValueError
            levels = []
            while low < high:
                levels.append(low)
                low *= 2
            return [*levels, high]
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--stages takes N,N,... or LOW..HIGH (whole numbers, LOW <= HIGH), got {text!r}") from None


def _predict_inputs(args: argparse.Namespace, profile_path: Path | None) -> tuple[list[str], str]:
    """The inputs the bootstrap refits: --inputs, else those the fitted profile's TOML names (relative ones from
    here, else from the TOML's folder); a named input that is not here is one line saying how to give it."""
    from harness.fitting.predict import profile_inputs

    if args.inputs is not None:
        return list(args.inputs), "--inputs"
    if profile_path is None:
        return [], ""
    found = []
    for source in profile_inputs(profile_path):
        candidates = [Path(source), profile_path.parent / source]
        here = next((c for c in candidates if c.exists()), None)
        if here is None:
            raise UsageError(
                f"{profile_path} was fitted from {source}, which is not here: give its inputs with --inputs RUN..., "
                "or --bootstrap 0 for an interval from the simulation seeds alone"
            )
        found.append(str(here))
    return found, str(profile_path)


def _predict(args: argparse.Namespace) -> int:
    """`--predict PROFILE --scenario S --users N [--against RUN]`: the prediction with its interval, and the
    measured run beside it (exit 1 when a measured value falls outside its interval)."""
    from harness.fitting.live_run import LiveRun, live_run_of
    from harness.fitting.observations import observations_from_run
    from harness.fitting.predict import (
        predict_shapes,
        render,
        score,
        shapes_for,
        shapes_from_observations,
    )
    from harness.fitting.public_results import is_public_results_file, read_public_results
    from providers.sim.core.profile import ProfileError, load_profile

    fit_only = (args.fit, args.name, args.out, args.figure)
    if any(v is not None for v in fit_only) or args.profiles or args.sweep or args.profile_set or args.prior != "ideal":
        raise UsageError("--predict takes one PROFILE (no --fit, --name, --prior, --out, --sweep or --profile-set)")
    bootstrap = 20 if args.bootstrap is None else args.bootstrap
    seeds = 3 if args.seeds is None else args.seeds
    if bootstrap < 0 or seeds < 1:
        raise UsageError("--bootstrap takes 0 or more refits and --seeds at least 1")
    try:
        profile = load_profile(args.predict)
    except ProfileError as exc:
        raise UsageError(f"--predict: {exc}") from None
    path = Path(args.predict) if args.predict.endswith(".toml") else None
    measured = observations_from_run(args.against) if args.against is not None else None
    if measured is not None and not measured:
        raise UsageError(f"--against {args.against}: the run has no rollouts")
    if args.time_scale is not None and not (0 < args.time_scale < math.inf):
        raise UsageError(f"--time-scale must be a positive number, got {args.time_scale:g}")
    live, hold = LiveRun(time_scale=args.time_scale or profile.default_time_scale), args.hold
    if args.against is not None:  # the run's own hold, time scale, spawn rate and plan
        if args.hold is not None or args.time_scale is not None:
            raise UsageError(
                "--against RUN predicts the run as it ran: its own hold and time scale, not --hold/--time-scale"
            )
        live, hold = live_run_of(args.against)
        if args.scenario not in (None, "ramp", "steady"):
            hold = None  # a burst (or the like) predicted beside the run: no hold to take from it
    try:
        if args.scenario is None and args.users is None and args.stages is None and measured:
            shapes = shapes_from_observations(measured, hold)
        else:
            stages = _stages(args.stages) if args.stages is not None else None
            shapes = shapes_for(args.scenario or "burst", args.users, stages, hold)
    except ValueError as exc:
        raise UsageError(f"--predict: {exc}") from None
    if measured is not None:
        had = {(o.protocol, o.concurrency) for o in measured}
        if not any((s.protocol, s.users) in had for s in shapes):
            runs = ", ".join(sorted({f"{p}@{c}" for p, c in had}))
            raise UsageError(f"--against {args.against}: no stage like {shapes[0].label} (the run had {runs})")
    observations = []
    inputs, named_by = _predict_inputs(args, path) if bootstrap else ([], "")
    if args.vendor is not None and not any(is_public_results_file(s) for s in inputs):
        raise UsageError("--vendor picks a vendor of a published results file (--inputs FILE.json)")
    for source in inputs:
        if is_public_results_file(source):
            observations += read_public_results(Path(source), args.vendor)
        else:
            observations += observations_from_run(Path(source))
    if bootstrap and observations:
        print(f"refitting {bootstrap} bootstrap resamples of {len(inputs)} input(s) from {named_by}", file=sys.stderr)
    prediction = predict_shapes(profile, shapes, observations=observations, bootstrap=bootstrap, seeds=seeds, live=live)
    scores = score(prediction, measured) if measured is not None else None
    print(render(prediction, scores))
    if scores is None:
        return 0
    outside = [f"{s.stage} {s.stat}" for s in scores if not s.inside]
    print(f"\n{len(scores) - len(outside)} of {len(scores)} measured values inside their interval", end="")
    print(f"; outside: {', '.join(outside)}" if outside else "")
    return 1 if outside else 0
