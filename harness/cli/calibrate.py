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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profiles", nargs="*", metavar="PROFILE", help="profile names or .toml paths (default: all)")
    parser.add_argument("--seeds", type=int, default=None, help="seeded runs per protocol (default: 10)")
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
        default=0,
        metavar="N",
        help="--fit: refit on N bootstrap resamples of the runs and give each fitted value its 90%% interval",
    )


def _key_value(text: str, flag: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key.strip() or not value.strip():
        raise UsageError(f"{flag} takes KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def run(args: argparse.Namespace) -> int:
    from providers.sim.core.calibration import DEFAULT_SEEDS, calibrate, render
    from providers.sim.core.profile import ProfileError, load_profile, profile_names

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
    if args.bootstrap < 0:
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
