"""`stampede trial --provider P`: the leaderboard's protocols against one vendor, priced first, then one scorecard.

Each protocol is a real `stampede run` subprocess into one trial folder (its own run id), bounded in time, so a run
that fails or hangs is one protocol's note, never the trial's crash, and each run sweeps its own sandboxes. The
dollar estimate is printed before anything starts; `--budget-usd` refuses a trial estimated above it and stops
between protocols once the running cost passes it. Then the runs are fitted (harness/fitting/fit.py), the profile
written beside them, the fitted profile asked what 960 and `--target N` do, and the scorecard printed and written
(scorecard.json). The protocol list, estimate and scorecard live in harness/fitting/trial.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import UsageError

if TYPE_CHECKING:
    from harness.fitting.fit import FitResult
    from harness.fitting.observations import ProtocolObservation
    from harness.fitting.trial import Prediction, ProtocolOutcome, TrialProtocol
    from providers.sim.core.profile import Profile

PREDICT_WIDTH = 960  # the width the public failure reports were made at
SANDBOX_ALLOWANCE_S = 2.0  # beyond the boot: the command, terminate and round trips, vendor seconds
MAX_SIZE = 10_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--provider", default="stub", help="the vendor to trial (as `stampede run --provider`)")
    parser.add_argument("--local", action="store_true", help="against the vendor's simulated plane on 127.0.0.1")
    parser.add_argument("--profile", default=None, help="the simulated vendor (--local or stub; default: P-like)")
    parser.add_argument("--size", type=int, default=100, help="sandboxes per protocol (the leaderboard's: 100)")
    parser.add_argument("--time-scale", type=float, default=None, help="passed to each run (simulated vendors)")
    parser.add_argument(
        "--cap",
        type=int,
        default=None,
        help="the plan's concurrency cap the ramp climbs to (default: the profile's "
        "quota.max_active, at most 4x --size)",
    )
    parser.add_argument(
        "--ramp-hold", type=float, default=10.0, help="vendor seconds the ramp holds each stage (its users re-creating)"
    )
    parser.add_argument("--budget-usd", type=float, default=None, help="refuse above this estimate; stop past it")
    parser.add_argument("--target", type=int, default=None, help="a second width to predict (besides 960)")
    parser.add_argument("--out", type=Path, default=Path("results"), help="where the trial folder is made")
    parser.add_argument("--trial-id", default=None, help="the trial folder's name (default: trial-P-<UTC time>)")
    parser.add_argument("--commands", default="true", help="what each rollout runs (the leaderboard: one command)")
    parser.add_argument(
        "--protocol-timeout", type=float, default=900.0, help="wall seconds one protocol's run may take"
    )
    parser.add_argument("--bootstrap", type=int, default=0, help="refit on N resamples for intervals (0: none)")
    parser.add_argument(
        "--predict-refits", type=int, default=10, help="bootstrap refits behind each prediction's interval"
    )
    parser.add_argument("--seed", type=int, default=0, help="simulator seed passed to each run")


def _check(args: argparse.Namespace) -> None:
    if not 1 <= args.size <= MAX_SIZE:
        raise UsageError(f"--size must be 1..{MAX_SIZE}, got {args.size}")
    if args.time_scale is not None and not (math.isfinite(args.time_scale) and args.time_scale > 0):
        raise UsageError(f"--time-scale must be a positive number, got {args.time_scale}")
    if args.budget_usd is not None and not (math.isfinite(args.budget_usd) and args.budget_usd >= 0):
        raise UsageError(f"--budget-usd must be a non-negative number, got {args.budget_usd}")
    if args.target is not None and not 1 <= args.target <= 1_000_000:
        raise UsageError(f"--target must be 1..1000000, got {args.target}")
    if args.cap is not None and not 1 <= args.cap <= 1_000_000:
        raise UsageError(f"--cap must be 1..1000000, got {args.cap}")
    if not (math.isfinite(args.ramp_hold) and 0 <= args.ramp_hold <= 3600):
        raise UsageError(f"--ramp-hold must be 0..3600 seconds, got {args.ramp_hold}")
    if not (math.isfinite(args.protocol_timeout) and args.protocol_timeout > 0):
        raise UsageError(f"--protocol-timeout must be positive, got {args.protocol_timeout}")
    if not 0 <= args.predict_refits <= 1000:
        raise UsageError(f"--predict-refits must be 0..1000, got {args.predict_refits}")
    if not 0 <= args.bootstrap <= 1000:
        raise UsageError(f"--bootstrap must be 0..1000, got {args.bootstrap}")
    if args.trial_id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", args.trial_id):
        raise UsageError(f"--trial-id: letters, digits, '.', '_', '-', at most 64, got {args.trial_id!r}")


def _prior(args: argparse.Namespace) -> Profile:
    from providers.sim.core.profile import ProfileError, load_profile

    name = args.profile or ("prime-like" if args.provider == "stub" else f"{args.provider}-like")
    try:
        return load_profile(name)
    except (ProfileError, OSError) as exc:
        if args.profile:
            raise UsageError(f"--profile: {exc}") from None
        return load_profile("ideal")


def _price(args: argparse.Namespace, prior: Profile) -> tuple[float | None, float | None, str]:
    from harness.rlmodel.prices import published_prices, vendor_key

    simulated = args.local or args.provider == "stub"
    key, why = vendor_key(args.provider, prior.name if simulated else args.provider)
    if key is None:
        return None, None, why
    price = published_prices()[key]
    cpu, memory_gib = 1.0, 1.0  # stampede run's default sandbox: --cpu 1 --memory-mb 1024
    per_s = price.per_sandbox_second(cpu, memory_gib)
    basis = f"{why}; {cpu:g} CPU, {memory_gib:g} GiB a sandbox; prices.toml [{key}] seen {price.seen}"
    return per_s, price.per_create, basis


def _run_protocol(
    proto: TrialProtocol, args: argparse.Namespace, trial_dir: Path, per_s: float | None, per_create: float | None
) -> ProtocolOutcome:
    """One protocol as a `stampede run` subprocess; whatever it does, an outcome (never an exception)."""
    from harness.fitting.trial import ProtocolOutcome, cost, sandbox_seconds
    from harness.results.figures.vendor_loop import bound_note

    argv = [sys.executable, "-m", "harness.cli", "run", "--provider", args.provider, *proto.run_args]
    argv += ["--out", str(trial_dir), "--run-id", proto.name, "--commands", args.commands, "--seed", str(args.seed)]
    argv += ["--progress-interval", "0"]
    if args.local:
        argv.append("--local")
    if args.profile:
        argv += ["--profile", args.profile]
    if args.time_scale is not None:
        argv += ["--time-scale", f"{args.time_scale:g}"]
    log = trial_dir / f"{proto.name}.log"
    print(f"[trial] {proto.name}: stampede run {' '.join(argv[4:])}", flush=True)
    try:
        with log.open("w") as out:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=args.protocol_timeout)
        code: int | None = proc.returncode
        note = "" if code in (0, 99) else f"stampede run exited {code} (see {log.name})"
    except subprocess.TimeoutExpired:  # subprocess.run killed it; its sandboxes carry a lifetime and a label
        code, note = None, f"timed out after {args.protocol_timeout:g} s (stampede cleanup --run-id {proto.name})"
    run_dir = trial_dir / proto.name
    outcome = ProtocolOutcome(proto.name, str(run_dir) if (run_dir / "run.json").exists() else None, code, note)
    if outcome.run_dir is None:
        if not note:
            outcome.note = "no run folder was written"
        return outcome
    try:
        held, creates = sandbox_seconds(outcome.run_dir)
    except (UsageError, OSError, ValueError) as exc:
        outcome.note = outcome.note or f"unreadable run: {exc}"
        return outcome
    outcome.sandbox_seconds = held
    outcome.dollars = cost(held, creates, per_s, per_create)
    engine = run_dir / "engine-local.json"
    if engine.exists():
        data = json.loads(engine.read_text())
        outcome.swept = int(data.get("terminated_leftovers") or 0) + int(data.get("reaped_by_label") or 0)
        outcome.sweep_error = data.get("sweep_error")
    bound = bound_note(outcome.run_dir)
    if bound:
        outcome.note = f"{outcome.note or 'ran to its end'}; {bound}"
    return outcome


def _predict(
    result: FitResult,
    widths: list[int],
    observations: list[ProtocolObservation],
    prior: Profile,
    rounds: int,
    provider: str,
) -> tuple[list[Prediction], str]:
    """The fitted profile's burst at each width, with intervals over bootstrap refits to the trial's runs
    (harness/fitting/predict.py), through the provider's create gate where its client has one."""
    from harness.fitting.live_run import GATED_CREATES, LiveRun
    from harness.fitting.predict import predict
    from harness.fitting.trial import Prediction

    out: list[Prediction] = []
    how = ""
    live = LiveRun(time_scale=result.profile.default_time_scale, throttle=provider in GATED_CREATES)
    for width in widths:
        pred = predict(
            result.profile,
            "burst",
            users=width,
            observations=observations,
            prior=prior,
            bootstrap=rounds,
            seeds=3,
            live=live,
        )
        how = pred.interval_from
        for stage in pred.stages:
            values = {k: e.value for k, e in stage.stats.items()}
            intervals = {k: (e.low, e.high) for k, e in stage.stats.items()}
            out.append(Prediction(width, "burst", values, intervals))
    return out, how


def run(args: argparse.Namespace) -> int:
    from harness.fitting.fit import fit_profile, with_intervals, write_profile_toml
    from harness.fitting.observations import observations_from_run
    from harness.fitting.trial import (
        SCORED,
        Scorecard,
        budget_stop,
        composite,
        estimate,
        failures_by_kind,
        fit_inputs,
        merged,
        protocols,
        rate_limit_behaviour,
        render,
        render_estimate,
    )

    _check(args)
    prior = _prior(args)
    cap = args.cap or int(min(prior.quota.max_active, 4 * args.size))
    sandbox_s = prior.boot.median_s + SANDBOX_ALLOWANCE_S
    simulated = args.local or args.provider == "stub"
    scale = (args.time_scale or prior.default_time_scale) if simulated else 1.0
    plan = protocols(args.size, cap, sandbox_s, args.ramp_hold, scale)
    per_s, per_create, basis = _price(args, prior)
    est = estimate(plan, per_s, per_create, basis)
    print(render_estimate(est, args.budget_usd), flush=True)
    if args.budget_usd is not None and est.dollars is None:
        raise UsageError(f"--budget-usd: no published price ({basis}), so no budget can be held; drop --budget-usd")
    if est.over(args.budget_usd):
        raise UsageError(
            f"the estimate ({est.dollars:.4f} USD) exceeds --budget-usd {args.budget_usd:g}: lower --size or raise it"
        )
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    trial_dir = args.out / (args.trial_id or f"trial-{re.sub(r'[^A-Za-z0-9._-]', '-', args.provider)}-{stamp}")
    if trial_dir.exists():
        raise UsageError(f"{trial_dir} exists: give another --trial-id")
    trial_dir.mkdir(parents=True)
    outcomes: list[ProtocolOutcome] = []
    stopped = ""
    spent = 0.0
    for proto in plan:
        outcome = _run_protocol(proto, args, trial_dir, per_s, per_create)
        if not outcomes and outcome.exit_code == 2 and outcome.run_dir is None:  # refused before any load
            said = (trial_dir / f"{proto.name}.log").read_text().strip().splitlines() or ["(no output)"]
            raise UsageError(f"{proto.name}: {said[-1].removeprefix('stampede: error: ')}")
        outcomes.append(outcome)
        spent += outcome.dollars or 0.0
        stopped = budget_stop(spent, args.budget_usd, [p.name for p in plan[len(outcomes) :]])
        if stopped:
            print(f"[trial] stopped: {stopped}", file=sys.stderr)
            break
    observations = {}
    inputs: list[ProtocolObservation] = []  # what the fit reads: a ramp's stages apart (fit_inputs)
    for o in outcomes:
        if o.run_dir is None:
            continue
        try:
            stages = observations_from_run(o.run_dir)
            obs = merged(o.name, stages)
        except (UsageError, OSError, ValueError) as exc:
            o.note = o.note or f"unreadable run: {exc}"
            continue
        if obs is not None:
            observations[o.name] = obs
            inputs += fit_inputs(o.name, stages)
            o.attempts, o.failures = obs.attempts, dict(obs.failures)
    composites = [
        composite(name, observations[name].tti_s, observations[name].attempts)
        for name in SCORED
        if name in observations
    ]
    fit_note, fitted, unidentified, profile_path = "", {}, {}, None
    predictions: list[Prediction] = []
    try:
        result = fit_profile(inputs, prior, f"{args.provider}-trial")
        if args.bootstrap:
            result = with_intervals(result, inputs, prior, args.bootstrap)
        profile_path = str(write_profile_toml(result, trial_dir / f"{result.profile.name}.toml"))
        fitted, unidentified = dict(result.fitted), dict(result.unidentified)
        widths = [PREDICT_WIDTH] + ([args.target] if args.target and args.target != PREDICT_WIDTH else [])
    except ValueError as exc:  # no successful sandbox in any protocol
        fit_note = f"no fit: {exc}"
    else:
        try:
            predictions, fit_note = _predict(result, widths, inputs, prior, args.predict_refits, args.provider)
        except (ImportError, ValueError) as exc:  # the scorecard still says what the runs and the fit showed
            fit_note = f"no prediction: {type(exc).__name__}: {exc}"
    creates = sum(o.attempts for o in outcomes)
    dollars = None if per_s is None else sum(o.dollars or 0.0 for o in outcomes)
    per_1000 = None if dollars is None or not creates else dollars / creates * 1000
    card = Scorecard(
        provider=args.provider,
        profile=prior.name if simulated else None,
        size=args.size,
        trial_dir=str(trial_dir),
        estimate=est,
        budget_usd=args.budget_usd,
        stopped=stopped,
        outcomes=outcomes,
        composites=composites,
        failures_by_kind=failures_by_kind(outcomes),
        rate_limits=rate_limit_behaviour(outcomes, fitted),
        dollars=dollars,
        dollars_per_1000=per_1000,
        fitted_profile=profile_path,
        fitted=fitted,
        unidentified=unidentified,
        predictions=predictions,
        prediction_note=fit_note,
        leaked=sum(1 for o in outcomes if o.sweep_error or o.exit_code is None),
    )
    (trial_dir / "scorecard.json").write_text(json.dumps(card.to_json(), indent=2, default=str) + "\n")
    print(render(card))
    return 0 if any(o.run_dir for o in outcomes) else 1


__all__ = ["add_arguments", "run"]
