"""`stampede run`: a scenario file driven headless through Locust used as a library.

The same locustfiles run under `locust -f`; here we validate input up front (so mistakes cost one line, not
a half-started run), build Locust's options from ours, and run the shape to its end. Ctrl-C or SIGTERM stop
the run in order: users stop, the engine cancels in-flight rollouts and terminates every sandbox it holds,
and the results written so far stay readable. A second one aborts (no grace for rollouts, sandboxes still
terminated); run.json and the exit status say which (harness.wire.run_endings holds the table).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
import gevent.subprocess
import locust
import locust.argument_parser
from locust.env import Environment
from locust.log import setup_logging
from locust.runners import MasterRunner
from locust.util.load_locustfile import load_locustfile

from foundation.phase_marks import mark
from harness.cli.capacity import engines_needed, spread_note
from harness.errors import UsageError
from harness.locust import early_processes
from harness.locust.provider_check import check_provider, preflight
from harness.locust.run_folder import check_results_writable
from harness.locust.run_limits import (
    MachineRoom,
    asked_peak,
    check_in_flight,
    cleartext_token_warning,
    open_master_warning,
)
from harness.locust.session import hand_over_settings, session_of
from harness.locust.settings import RunSettings
from harness.locust.shapes import RehearseShape, StampedeShape
from harness.locust.vendor_process import probe
from harness.wire.run_endings import ABORTED, EXIT_INTERRUPTED, exit_code_for

if TYPE_CHECKING:  # imported when --metrics-port asks: prometheus_client stays off every other run's start
    from harness.locust.live.metrics_endpoint import MetricsEndpoint, RunView
    from harness.locust.live.otlp_metrics import OtlpMetricsPusher

SCENARIO_DIR = Path(__file__).resolve().parents[2] / "scenarios"
DEFAULT_STOP_TIMEOUT_S = 60.0
WORKER_CONNECT_TIMEOUT_S = 60.0


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
    """Everything checkable before Locust starts: provider, its options and credentials, profile, numbers, endpoint."""
    from providers import provider_class
    from providers.base import ProviderConfigError

    if args.users is not None and args.users <= 0:
        raise UsageError("--users must be a positive whole number")
    if args.spawn_rate is not None and args.spawn_rate <= 0:
        raise UsageError("--spawn-rate must be positive")
    settings = RunSettings.from_options(argparse.Namespace(**vars(args), num_users=args.users))
    warning = cleartext_token_warning(settings.base_url)
    if warning:
        print(f"stampede: {warning}", file=sys.stderr, flush=True)
    check_results_writable(Path(settings.out))
    if settings.run_id:
        existing = Path(settings.out) / settings.run_id
        if existing.exists():  # a second run would mix its rows into the first one's records
            raise UsageError(f"{existing} already exists: give another --run-id, or remove that folder")
    try:
        provider_class(settings.provider)
    except ProviderConfigError as exc:
        raise UsageError(str(exc)) from None
    if settings.embedded_vendor:
        from providers import LOCAL_VENDORS

        if settings.provider not in LOCAL_VENDORS:
            raise UsageError(f"provider {settings.provider!r} has no simulated vendor to run --local against")
        from providers.sim.core.profile import ProfileError, load_profile

        try:
            profile = load_profile(settings.profile)
            if settings.profile_overrides:
                profile.with_overrides(dict(settings.profile_overrides))
        except ProfileError as exc:
            raise UsageError(str(exc)) from None
    check_provider(settings, endpoint=False)  # the adapter built from the run's options: no traffic yet
    return settings


def _check_vendor(settings: RunSettings) -> None:
    """The one check that talks to the vendor (a real endpoint's preflight; the stub's probe), made last: every
    check this machine can make alone comes first, so a run refused for its own numbers sends nothing anywhere."""
    if settings.embedded_vendor:
        return
    if settings.provider == "stub":
        problem = probe(settings.base_url or "", settings.token)
        if problem:
            raise UsageError(problem)
        return
    preflight(settings)


def _locust_options(args: argparse.Namespace, scenario: Path) -> Any:
    """Locust's own parsed options, with ours copied onto them (the session reads them from there)."""
    parser = locust.argument_parser.get_parser()
    argv = ["-f", str(scenario), "--headless", "--only-summary"]
    options = parser.parse_args(argv)
    for key, value in vars(args).items():
        if key in (
            "command",
            "scenario",
            "users",
            "spawn_rate",
            "run_time",
            "stop_timeout",
            "workers",
            "master",
            "expect_workers",
            "master_bind_host",
            "worker",
            "master_host",
            "master_port",
            "metrics_port",
            "metrics_host",
        ):
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


def _parse_workers(text: object) -> int | None:
    """`--workers N` or `auto` (None)."""
    if text is None or str(text).strip().lower() == "auto":
        return None
    try:
        return int(str(text))
    except ValueError:
        raise UsageError(f"--workers takes a whole number or auto (got {text!r})") from None


def _role(args: argparse.Namespace) -> str:
    roles = [
        name for name, on in (("workers", args.workers > 0), ("master", args.master), ("worker", args.worker)) if on
    ]
    if len(roles) > 1:
        raise UsageError(f"choose one of --workers N, --master and --worker (got {', '.join('--' + r for r in roles)})")
    if args.workers < 0 or args.expect_workers < 1 or not 0 < args.master_port < 65536:
        raise UsageError("--workers, --expect-workers and --master-port must be positive")
    return roles[0] if roles else "local"


def _spawn_local_workers(args: argparse.Namespace, scenario: Path, port: int) -> list[gevent.subprocess.Popen]:
    """N `stampede run --worker` processes of this machine, each a Locust worker with its own engine."""
    argv = [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        "--worker",
        "--master-host",
        "127.0.0.1",
        "--master-port",
        str(port),
        "--scenario",
        str(scenario),
    ]
    if getattr(args, "otlp_endpoint", ""):  # each worker's engine exports its own rollouts' traces
        argv += ["--otlp-endpoint", args.otlp_endpoint]
    return [gevent.subprocess.Popen(argv, start_new_session=True) for _ in range(args.workers)]


def _wait_for_workers(runner: Any, count: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while len(runner.clients.ready) < count:
        if time.monotonic() > deadline:
            return False
        gevent.sleep(0.2)
    return True


def _free_port() -> int:
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        return int(probe_socket.getsockname()[1])


def _dump_greenlets() -> None:
    """SIGUSR1: every greenlet's stack to stderr (py-spy cannot see inside gevent)."""
    import gevent.util

    print("\n".join(gevent.util.format_run_info()), file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    gevent.signal_handler(signal.SIGUSR1, _dump_greenlets)
    requested_workers = _parse_workers(args.workers)
    args.workers = requested_workers or 0
    role = _role(args)
    scenario = resolve_scenario(args.scenario)
    settings = _validate(args) if role != "worker" else None  # a worker takes every setting from its master
    mark("command: options checked")
    options = _locust_options(args, scenario)
    setup_logging(os.environ.get("STAMPEDE_LOCUST_LOG", "WARNING"))
    logging.getLogger("stampede").setLevel(logging.INFO)

    try:
        user_classes, shapes = load_locustfile(str(scenario))
    except Exception as exc:  # a user's locustfile may fail to import: say where, in one line
        raise UsageError(f"cannot load scenario {scenario}: {type(exc).__name__}: {exc}") from None
    if not user_classes:
        raise UsageError(f"scenario {scenario} defines no Locust user class")
    shape = shapes[0] if shapes else None
    note = None
    if requested_workers is None and role == "local" and settings is not None and isinstance(shape, StampedeShape):
        peak = shape.peak_users(settings)
        args.workers = engines_needed(peak)
        role = "workers" if args.workers else role
        note = spread_note(peak, args.workers)
    if settings is not None:  # before Locust spawns a user: a count this machine cannot hold ends here
        peak, what = asked_peak(
            shape.peak_users(settings) if isinstance(shape, StampedeShape) else args.users,
            settings,
            shaped=isinstance(shape, StampedeShape),
        )
        check_in_flight(
            peak, what, MachineRoom.measure(), engines=max(1, args.workers), allow=settings.allow_oversubscribe
        )
    if settings is not None and settings.trainer is None and isinstance(shape, RehearseShape):
        raise UsageError(
            f"scenario {scenario.name} needs an emulated trainer: run it with `stampede rehearse --config rl.toml`"
        )
    if settings is not None:
        _check_vendor(settings)
    environments: list[Environment] = []  # the scrape's view of the run, once Locust's environment exists
    # served from its own greenlet until the process ends (harness.cli.main's exit_now), never closed here: a scrape
    # meanwhile reads the drained run's last counts, and a close would wait out its server's 0.5 s poll every run
    _metrics_endpoint(args, role, environments)
    otlp = _otlp_pusher(args, role, environments)
    if note:
        print(f"stampede: {note}", file=sys.stderr, flush=True)
    environment = Environment(
        user_classes=list(user_classes.values()),
        shape_class=shape,
        events=locust.events,
        parsed_options=options,
        locustfile=scenario.name,
        stop_timeout=options.stop_timeout,
    )
    environments.append(environment)
    workers: list[gevent.subprocess.Popen] = []
    runner: Any
    if role == "worker":
        try:
            runner = environment.create_worker_runner(args.master_host, args.master_port)
        except OSError as exc:
            raise UsageError(f"cannot reach the master at {args.master_host}:{args.master_port}: {exc}") from None
    elif role in ("master", "workers"):
        port = _free_port() if role == "workers" else args.master_port
        bind = "127.0.0.1" if role == "workers" else args.master_bind_host
        warning = open_master_warning(bind)
        if warning:
            print(f"stampede: {warning}", file=sys.stderr, flush=True)
        runner = environment.create_master_runner(master_bind_host=bind, master_bind_port=port)
        quit_when_stopped(environment, runner)
    else:
        runner = environment.create_local_runner()
    if shape is not None:
        shape.runner = runner
    if settings is not None:  # parsed and checked once, above (a worker takes its settings from its master)
        hand_over_settings(environment, settings)
    mark("command: locust runner made")
    environment.events.init.fire(environment=environment, runner=runner, web_ui=None)
    early_processes.discard()  # what the head start guessed and the session did not take (harness.cli.head_start)
    mark("command: vendor and engine started")
    session = session_of(environment)
    if session is None or session.failed_to_start:
        _quit(environment)
        return 2
    if role == "worker":
        return _run_worker(environment, runner)
    if role in ("master", "workers"):
        expected = args.workers if role == "workers" else args.expect_workers
        if role == "workers":
            workers = _spawn_local_workers(args, scenario, port)
        print(f"stampede: waiting for {expected} worker(s)…", file=sys.stderr, flush=True)
        if not _wait_for_workers(runner, expected, WORKER_CONNECT_TIMEOUT_S):
            _quit(environment)
            _stop_workers(workers)
            raise UsageError(
                f"only {len(runner.clients.ready)} of {expected} workers connected within "
                f"{WORKER_CONNECT_TIMEOUT_S:.0f}s"
            )

    interrupted: list[int | None] = []

    def stop(signum: int | None = None) -> None:
        """Ctrl-C / SIGTERM: stop now. In-flight rollouts are cancelled (not waited for) and every sandbox
        they hold is terminated by the engine; the stop timeout only applies to a shape's natural end.
        A second one aborts: the engine gives rollouts no grace (sandboxes are still terminated)."""
        interrupted.append(signum)
        if len(interrupted) == 1:
            print(
                "\nstampede: stopping — terminating in-flight sandboxes… (again: abort, faster)",
                file=sys.stderr,
                flush=True,
            )
        elif len(interrupted) == 2:
            print(
                "stampede: aborting — no grace for rollouts; their sandboxes are still terminated",
                file=sys.stderr,
                flush=True,
            )
        else:
            print(
                "stampede: still terminating sandboxes (kill -9 would leave them to `stampede cleanup`)",
                file=sys.stderr,
                flush=True,
            )
        session.note_signal(len(interrupted))
        if len(interrupted) == 1:
            environment.stop_timeout = 0
            gevent.spawn(_stop_then_quit, runner)

    gevent.signal_handler(signal.SIGTERM, stop, signal.SIGTERM)
    gevent.signal_handler(signal.SIGINT, stop, signal.SIGINT)  # not KeyboardInterrupt: it lands anywhere
    try:
        if shape is not None:
            runner.start_shape()
        else:
            runner.start(args.users or 1, args.spawn_rate or 1)
        if options.run_time:
            gevent.spawn_later(options.run_time, runner.quit)
        runner.greenlet.join()
    except KeyboardInterrupt:  # a Ctrl-C before the handler above took over
        stop(signal.SIGINT)
        runner.greenlet.join()
    mark("command: runner ended")
    _quit(environment)
    _stop_workers(workers)
    if otlp is not None:  # the run's last figures; what the collector did not take, said once
        mark("command: otlp closing")
        lost = otlp.close()
        if lost:
            print(lost, file=sys.stderr, flush=True)
    mark("command: processes stopped")
    if environment.process_exit_code not in (None, 0):
        return int(environment.process_exit_code)
    if interrupted:  # the table in harness.wire.run_endings: 130 interrupted, 131 aborted
        return exit_code_for(ABORTED) if len(interrupted) >= 2 else EXIT_INTERRUPTED
    return 0


def _live_session_view(environments: list[Environment]) -> Callable[[], RunView | None]:
    """What the live exporters read at each scrape or push: the run's session, once Locust's environment exists
    (`environments` is filled after the exporters are built)."""
    from harness.locust.live.metrics_endpoint import session_view

    return lambda: session_view(session_of(environments[0])) if environments else None


def _metrics_endpoint(args: argparse.Namespace, role: str, environments: list[Environment]) -> MetricsEndpoint | None:
    """`--metrics-port`: the endpoint, bound now (a port in use ends the run before any load); a worker's figures
    reach its master, which serves them. `stampede rehearse` builds its own namespace, without the option: off."""
    port = int(getattr(args, "metrics_port", 0) or 0)
    if not port:
        return None
    if role == "worker":
        raise UsageError("--metrics-port is the master's: a worker's figures reach it (give it to the master)")
    from harness.locust.live.metrics_endpoint import MetricsEndpoint

    endpoint = MetricsEndpoint(
        _live_session_view(environments),
        port,
        str(getattr(args, "metrics_host", None) or "127.0.0.1"),
    )
    print(f"stampede: metrics at http://{endpoint.host}:{endpoint.port}/metrics", file=sys.stderr, flush=True)
    return endpoint


def _otlp_pusher(args: argparse.Namespace, role: str, environments: list[Environment]) -> OtlpMetricsPusher | None:
    """`--otlp-endpoint`: the SDK checked now (missing: one line, before any load) and, on all but a worker, the
    metrics' periodic export. The engine hears the endpoint in its `configure` (Locust's options carry it; local
    workers get it on their command line), never through the environment: a changed environment would refuse the
    head start's engine and vendor. `stampede rehearse` builds its own namespace, without the option: off."""
    endpoint = str(getattr(args, "otlp_endpoint", "") or "")
    if not endpoint:
        return None
    try:
        import opentelemetry.exporter.otlp.proto.http
        import opentelemetry.sdk  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            f"--otlp-endpoint needs the OpenTelemetry SDK and OTLP exporter ({exc.name} is missing): "
            "pip install 'stampede[otlp]'"
        ) from None
    if role == "worker":  # its engine's traces go straight to the collector; its metrics reach the master
        return None
    from harness.locust.live.otlp_metrics import OtlpMetricsPusher

    return OtlpMetricsPusher(
        _live_session_view(environments),
        endpoint,
        "master" if role in ("master", "workers") else "local",
    )


def quit_when_stopped(environment: Environment, runner: MasterRunner) -> None:
    """A master runs one test: once it has stopped, for whatever reason, its runner quits.

    Locust stops a master whose every worker went missing (its heartbeat check: "The last worker went missing,
    stopping test.") without quitting it, and kills the shape that would have. Its heartbeat, listener and CPU
    greenlets then live on, so `runner.greenlet.join()` never returned: the run had printed its summary and hung
    (CI 2026-12-07). The quit runs after the session's own test_stop, which concludes the run (the ending says the
    workers went missing: `run_stopping.watch_workers`); on every other path it is one more than Locust's, which
    does nothing."""
    environment.events.test_stop.add_listener(lambda **_: gevent.spawn(runner.quit))


def _stop_then_quit(runner: Any) -> None:
    """A master stops its workers before it quits: Locust's quit ends the test (and our wait for the workers'
    records) before it tells any worker, so a SIGTERM waited out the workers' 60 s heartbeat timeout."""
    if isinstance(runner, MasterRunner):
        runner.stop()
    runner.quit()


def _run_worker(environment: Environment, runner: Any) -> int:
    """Until the master says quit (or SIGTERM / Ctrl-C): the master drives everything."""

    def stop(*_: Any) -> None:
        gevent.spawn(runner.quit)

    gevent.signal_handler(signal.SIGTERM, stop)
    try:
        runner.greenlet.join()
    except KeyboardInterrupt:
        runner.quit()
    _quit(environment)
    return int(environment.process_exit_code or 0)


def _stop_workers(workers: list[gevent.subprocess.Popen]) -> None:
    """Local workers have drained and shipped their records by now (the master waited for them)."""
    for process in workers:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in workers:
        try:
            process.wait(timeout=60)
        except gevent.subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _quit(environment: Environment) -> None:
    if environment.runner is not None:
        environment.runner.quit()
    environment.events.quitting.fire(environment=environment, reverse=True)
