"""`stampede`: the command line. Errors a user can cause end in one line on stderr and exit status 2.

Imports are deferred per command: `stampede run` must import Locust (which monkey-patches the interpreter
with gevent) before anything imports asyncio or ssl.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from foundation.cli_help import DefaultsHelpFormatter, set_env_var
from harness.errors import EXIT_USAGE, UsageError, print_usage_error


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (`stampede: error: ...`), not a usage block, and every option's
    help states its default and environment variable (foundation.cli_help)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"stampede: error: {message} (see {self.prog} --help)\n")


def _add_run(sub: argparse._SubParsersAction) -> None:
    from harness.locust.settings import add_arguments

    run = sub.add_parser(
        "run",
        help="run a scenario headless and write results/<run_id>/",
        description="Ramp rollouts against a sandbox provider (default: the embedded Prime-like stub).",
    )
    run.add_argument("--scenario", default="ramp", help="scenario name (ramp, burst, ...) or path to a locustfile")
    dist = run.add_argument_group("distributed (Locust master and workers, each worker with its own engine)")
    dist.add_argument(
        "--workers",
        default="auto",
        help="run a master here and N local worker processes, each with its own engine (default auto: one "
        "process, or as many engines as the peak in flight needs)",
    )
    dist.add_argument("--master", action="store_true", help="be the master for workers on other machines")
    dist.add_argument("--expect-workers", type=int, default=1, help="--master: wait for this many workers")
    dist.add_argument("--master-bind-host", default="*", help="--master: interface to listen on (default: all)")
    dist.add_argument("--worker", action="store_true", help="be a worker of the master at --master-host")
    dist.add_argument("--master-host", default="127.0.0.1", help="--worker: the master's address")
    dist.add_argument("--master-port", type=int, default=5557, help="the master's port (default 5557)")
    run.add_argument(
        "-u",
        "--users",
        type=int,
        default=None,
        help="peak concurrency: the last ramp stage, or the burst size (default: the scenario's)",
    )
    run.add_argument("-r", "--spawn-rate", type=float, default=None, help="users started per second between stages")
    run.add_argument(
        "-t", "--run-time", default=None, help="stop after this long, e.g. 90s, 5m (default: the shape's end)"
    )
    run.add_argument(
        "--stop-timeout",
        type=float,
        default=None,
        help="seconds in-flight rollouts get to finish when the run ends (default: 60)",
    )
    add_arguments(run, locust=False)


def _add_stub(sub: argparse._SubParsersAction) -> None:
    stub = sub.add_parser("stub", help="the Prime-like HTTP API stub over the vendor simulator")
    stub_sub = stub.add_subparsers(dest="stub_command", metavar="COMMAND", parser_class=OneLineParser)
    stub_sub.required = True
    # `stampede stub serve ...` is handed whole to providers.sim.prime.serve (see main), which owns its options.
    stub_sub.add_parser("serve", help="run the stub standalone (options: stampede stub serve --help)")


def _add_cleanup(sub: argparse._SubParsersAction) -> None:
    cleanup = sub.add_parser(
        "cleanup",
        help="terminate every sandbox a run left behind (found by its run label), or every one stampede tagged",
    )
    cleanup.add_argument("--provider", default="stub", help="the vendor the sandboxes are on")
    cleanup.add_argument("--base-url", default=None, help="its API endpoint (default: the vendor's own)")
    set_env_var(cleanup.add_argument("--token", default=None, help="the vendor's API token"), "STAMPEDE_TOKEN")
    cleanup.add_argument("--provider-option", action="append", default=None, help="KEY=VALUE (repeatable)")
    which = cleanup.add_mutually_exclusive_group(required=True)
    which.add_argument("--run-id", help="the run whose sandboxes to reap")
    which.add_argument(
        "--all-owned",
        action="store_true",
        help="every live sandbox stampede ever tagged on this vendor, whatever the run (crashed runs' leftovers)",
    )


def _add_analysis(sub: argparse._SubParsersAction) -> None:
    from harness.cli import compare as compare_command
    from harness.cli import export as export_command
    from harness.cli import model as model_command
    from harness.cli import report as report_command

    for name, module, text in (
        ("report", report_command, "tables, figures and report.html for one or more runs (side by side)"),
        ("export", export_command, "write the latency model (latency_model.json, v1) of one or more runs"),
        ("model", model_command, "generator throughput and trainer idle from a latency model and an RL config"),
        (
            "compare",
            compare_command,
            "a candidate run against a baseline: deltas, intervals, a verdict (exit 98: worse)",
        ),
    ):
        module.add_arguments(sub.add_parser(name, help=text, description=text))


def _add_rehearse(sub: argparse._SubParsersAction) -> None:
    from harness.cli.rehearse import add_arguments

    text = "an emulated RL loop through the harness, measured and compared with `stampede model`"
    epilog = (
        "a simulated vendor runs at the time scale throughout (rehearse sets STAMPEDE_SIM_BURST_PACING=0: no "
        "1:1 pacing of create bursts, which would stretch the loop's clock)"
    )
    add_arguments(sub.add_parser("rehearse", help=text, description=text, epilog=epilog))


def _cmd_rehearse(args: argparse.Namespace) -> int:
    from harness.cli.rehearse import run

    return run(args)


def _add_calibrate(sub: argparse._SubParsersAction) -> None:
    from harness.cli.calibrate import add_arguments

    text = "run the public benchmarks' protocols against simulated vendor profiles; simulated vs public"
    add_arguments(sub.add_parser("calibrate", help=text, description=text))


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from harness.cli.calibrate import run

    return run(args)


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("stampede")
    except PackageNotFoundError:
        return "(not installed: run pip install -e .)"


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="stampede", description="Load-test a fleet of code-execution sandboxes.")
    parser.add_argument("--version", action="version", version=f"stampede {_installed_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    _add_run(sub)
    _add_stub(sub)
    sub.add_parser("profiles", help="list the simulated vendor profiles")
    _add_summary(sub)
    _add_cleanup(sub)
    _add_analysis(sub)
    _add_rehearse(sub)
    _add_calibrate(sub)
    modal_local = sub.add_parser("modal-local", help="the local Modal control plane over the vendor simulator")
    modal_sub = modal_local.add_subparsers(dest="modal_command", metavar="COMMAND", parser_class=OneLineParser)
    modal_sub.required = True
    modal_sub.add_parser("serve", help="run it standalone (options: stampede modal-local serve --help)")
    e2b_local = sub.add_parser("e2b-local", help="the local E2B (REST control plane + envd) over the vendor simulator")
    e2b_sub = e2b_local.add_subparsers(dest="e2b_command", metavar="COMMAND", parser_class=OneLineParser)
    e2b_sub.required = True
    e2b_sub.add_parser("serve", help="run it standalone (options: stampede e2b-local serve --help)")
    daytona_local = sub.add_parser("daytona-local", help="the local Daytona API over the vendor simulator")
    daytona_sub = daytona_local.add_subparsers(dest="daytona_command", metavar="COMMAND", parser_class=OneLineParser)
    daytona_sub.required = True
    daytona_sub.add_parser("serve", help="run it standalone (options: stampede daytona-local serve --help)")
    docker = sub.add_parser("docker", help="the local Docker provider's helpers")
    docker_sub = docker.add_subparsers(dest="docker_command", metavar="COMMAND", parser_class=OneLineParser)
    docker_sub.required = True
    docker_sub.add_parser(
        "image", help="build the offline busybox sandbox image (options: stampede docker image --help)"
    )
    return parser


def _cmd_profiles(_: argparse.Namespace) -> int:
    from providers.sim.core.profile import load_profile, profile_names

    for name in profile_names():
        profile = load_profile(name)
        print(f"{name:<12} time scale {profile.default_time_scale:<5g} {profile.description}")
    return 0


def _add_summary(sub: argparse._SubParsersAction) -> None:
    from harness.cli.summary import add_arguments

    text = "how a run ended, its per-stage table and thresholds; writes RUN_DIR/summary.json"
    add_arguments(sub.add_parser("summary", help=text, description=text))


def _cmd_summary(args: argparse.Namespace) -> int:
    from harness.cli.summary import run
    from harness.results.run_pointer import resolve_run_dir

    return run(args, resolve_run_dir(args.run_dir))  # results/latest: the run it names


def _cmd_stub_serve(argv: list[str]) -> int:
    from providers.sim.prime.serve import main as serve_main

    return int(serve_main(argv, prog="stampede stub serve"))


def _cmd_cleanup(args: argparse.Namespace) -> int:
    import asyncio
    import os

    from harness.locust.settings import parse_key_values
    from providers import create_provider
    from providers.base import ProviderConfigError, ProviderError

    options: dict[str, object] = dict(parse_key_values(args.provider_option, "provider-option"))
    if args.base_url:
        options["base_url"] = args.base_url
    token = args.token or os.environ.get("STAMPEDE_TOKEN")
    if token:
        options["token"] = token

    async def reap() -> int:
        provider = create_provider(args.provider, options)
        try:
            await provider.preflight()
            if args.all_owned:
                return await provider.cleanup_all_owned()
            return await provider.cleanup(args.run_id)
        finally:
            await provider.aclose()

    try:
        count = asyncio.run(reap())
    except (ProviderConfigError, ProviderError) as exc:
        raise UsageError(str(exc)) from None
    if args.all_owned:
        print(f"reaped {count} sandboxes stampede had tagged on {args.provider} (every run)")
    else:
        print(f"reaped {count} sandboxes of run {args.run_id}")
    return 0


def _cmd_analysis(args: argparse.Namespace) -> int:
    from harness.cli import compare as compare_command
    from harness.cli import export as export_command
    from harness.cli import model as model_command
    from harness.cli import report as report_command

    module = {"report": report_command, "export": export_command, "model": model_command, "compare": compare_command}[
        args.command
    ]
    return int(module.run(args))


def _cmd_run(args: argparse.Namespace) -> int:
    from harness.cli.run import run

    return run(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": _cmd_run,
    "profiles": _cmd_profiles,
    "summary": _cmd_summary,
    "cleanup": _cmd_cleanup,
    "report": _cmd_analysis,
    "export": _cmd_analysis,
    "model": _cmd_analysis,
    "compare": _cmd_analysis,
    "rehearse": _cmd_rehearse,
    "calibrate": _cmd_calibrate,
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["run"], ["rehearse"]):
        import locust  # noqa: F401  (gevent must patch before asyncio and ssl are imported)
    if argv[:2] == ["stub", "serve"]:
        return _cmd_stub_serve(argv[2:])
    if argv[:2] == ["modal-local", "serve"]:
        from providers.sim.modal.serve import main as modal_serve_main

        return int(modal_serve_main(argv[2:], prog="stampede modal-local serve"))
    if argv[:2] == ["e2b-local", "serve"]:
        from providers.sim.e2b.serve import main as e2b_serve_main

        return int(e2b_serve_main(argv[2:], prog="stampede e2b-local serve"))
    if argv[:2] == ["daytona-local", "serve"]:
        from providers.sim.daytona.serve import main as daytona_serve_main

        return int(daytona_serve_main(argv[2:], prog="stampede daytona-local serve"))
    if argv[:2] == ["docker", "image"]:
        from providers.docker_image import main as docker_image_main

        return int(docker_image_main(argv[2:]))
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # inside the try: a reader that left is met here, not in a traceback at exit
        return code
    except UsageError as exc:
        return print_usage_error(exc)
    except KeyboardInterrupt:
        print("stampede: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `stampede summary RUN | head`: the reader left; say nothing more (Python would print a traceback at exit)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command killed by it
