"""`stampede run`: a scenario file driven headless through Locust used as a library.

The same locustfiles run under `locust -f`; here we validate input up front (so mistakes cost one line, not
a half-started run), build Locust's options from ours, and run the shape to its end. Ctrl-C or SIGTERM stop
the run in order: users stop, the engine cancels in-flight rollouts and terminates every sandbox it holds,
and the results written so far stay readable.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import gevent
import locust
import locust.argument_parser
from locust.env import Environment
from locust.log import setup_logging
from locust.util.load_locustfile import load_locustfile

from harness.cli import UsageError
from harness.embedded_vendor import probe
from harness.options import RunSettings, SettingsError

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"
DEFAULT_STOP_TIMEOUT_S = 60.0
EXIT_INTERRUPTED = 130


def resolve_scenario(name_or_path: str) -> Path:
    """A built-in scenario name (`ramp`) or a path to a locustfile."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".py" or "/" in name_or_path:
        if not candidate.is_file():
            raise UsageError(f"scenario file {name_or_path} not found")
        return candidate.resolve()
    builtin = SCENARIO_DIR / f"{name_or_path}.py"
    if not builtin.is_file():
        names = sorted(p.stem for p in SCENARIO_DIR.glob("*.py") if not p.stem.startswith("_"))
        raise UsageError(f"unknown scenario {name_or_path!r} (built-in: {', '.join(names)}; or give a .py path)")
    return builtin


def _validate(args: argparse.Namespace) -> RunSettings:
    """Everything checkable before Locust starts: provider, profile, numbers, endpoint."""
    from providers import provider_class
    from providers.base import ProviderConfigError

    if args.users is not None and args.users <= 0:
        raise UsageError("--users must be a positive whole number")
    if args.spawn_rate is not None and args.spawn_rate <= 0:
        raise UsageError("--spawn-rate must be positive")
    try:
        settings = RunSettings.from_options(argparse.Namespace(**vars(args), num_users=args.users))
    except SettingsError as exc:
        raise UsageError(str(exc)) from None
    try:
        provider_class(settings.provider)
    except ProviderConfigError as exc:
        raise UsageError(str(exc)) from None
    if settings.embedded_vendor:
        from providers import LOCAL_VENDORS

        if settings.provider not in LOCAL_VENDORS:
            raise UsageError(f"provider {settings.provider!r} has no simulated vendor to run --local against")
        from providers.sim.profile import ProfileError, load_profile

        try:
            profile = load_profile(settings.profile)
            if settings.profile_overrides:
                profile.with_overrides(dict(settings.profile_overrides))
        except ProfileError as exc:
            raise UsageError(str(exc)) from None
    elif settings.provider == "stub":
        problem = probe(settings.base_url or "", settings.token)
        if problem:
            raise UsageError(problem)
    return settings


def _locust_options(args: argparse.Namespace, scenario: Path) -> Any:
    """Locust's own parsed options, with ours copied onto them (the session reads them from there)."""
    parser = locust.argument_parser.get_parser()
    argv = ["-f", str(scenario), "--headless", "--only-summary"]
    options = parser.parse_args(argv)
    for key, value in vars(args).items():
        if key in ("command", "scenario", "users", "spawn_rate", "run_time", "stop_timeout"):
            continue
        setattr(options, key, value)
    options.num_users = args.users
    options.spawn_rate = args.spawn_rate
    options.stop_timeout = DEFAULT_STOP_TIMEOUT_S if args.stop_timeout is None else args.stop_timeout
    options.run_time = _parse_run_time(args.run_time) if args.run_time else None
    return options


def _parse_run_time(text: str) -> int:
    from locust.util.timespan import parse_timespan

    try:
        return int(parse_timespan(text))
    except ValueError:
        raise UsageError(f"--run-time {text!r} is not a time span like 90s, 5m or 1h30m") from None


def run(args: argparse.Namespace) -> int:
    scenario = resolve_scenario(args.scenario)
    _validate(args)
    options = _locust_options(args, scenario)
    setup_logging("WARNING")
    logging.getLogger("stampede").setLevel(logging.INFO)

    try:
        user_classes, shapes = load_locustfile(str(scenario))
    except Exception as exc:  # a user's locustfile may fail to import: say where, in one line
        raise UsageError(f"cannot load scenario {scenario}: {type(exc).__name__}: {exc}") from None
    if not user_classes:
        raise UsageError(f"scenario {scenario} defines no Locust user class")
    shape = shapes[0] if shapes else None
    environment = Environment(
        user_classes=list(user_classes.values()),
        shape_class=shape,
        events=locust.events,
        parsed_options=options,
        locustfile=scenario.name,
        stop_timeout=options.stop_timeout,
    )
    runner = environment.create_local_runner()
    if shape is not None:
        shape.runner = runner
    environment.events.init.fire(environment=environment, runner=runner, web_ui=None)
    session = getattr(environment, "stampede", None)
    if session is None or session.failed_to_start:
        _quit(environment)
        return 2

    interrupted: list[int | None] = []

    def stop(signum: int | None = None) -> None:
        """Ctrl-C / SIGTERM: stop now. In-flight rollouts are cancelled (not waited for) and every sandbox
        they hold is terminated by the engine; the stop timeout only applies to a shape's natural end."""
        if not interrupted:
            print("\nstampede: stopping — terminating in-flight sandboxes…", file=sys.stderr, flush=True)
        interrupted.append(signum)
        environment.stop_timeout = 0
        gevent.spawn(runner.quit)

    gevent.signal_handler(signal.SIGTERM, stop, signal.SIGTERM)
    try:
        if shape is not None:
            runner.start_shape()
        else:
            runner.start(args.users or 1, args.spawn_rate or 1)
        if options.run_time:
            gevent.spawn_later(options.run_time, runner.quit)
        runner.greenlet.join()
    except KeyboardInterrupt:
        stop(signal.SIGINT)
        try:
            runner.greenlet.join()
        except KeyboardInterrupt:  # a second Ctrl-C: still drain, just say so
            print("stampede: still draining the engine; press Ctrl-C again only to abandon sandboxes",
                  file=sys.stderr)  # fmt: skip
            runner.greenlet.join()
    _quit(environment)
    if environment.process_exit_code not in (None, 0):
        return int(environment.process_exit_code)
    return EXIT_INTERRUPTED if interrupted else 0


def _quit(environment: Environment) -> None:
    if environment.runner is not None:
        environment.runner.quit()
    environment.events.quitting.fire(environment=environment, reverse=True)
