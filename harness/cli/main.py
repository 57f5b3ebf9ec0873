"""`stampede`: the command line, as a table of commands. Errors a user can cause end in one line, exit status 2.

Each command is a module with `add_arguments(parser)` and `run(args) -> int`; the table below names it. Only the
command being run has its module imported and its options added (startup stays cheap, and `stampede run` must
import Locust, which monkey-patches the interpreter with gevent, before anything imports asyncio or ssl).
The simulated vendors' `serve` commands and `docker image` own their parsers (they also run as
`python -m providers.sim.<vendor>.serve`); they are handed their arguments whole.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from foundation.cli_help import DefaultsHelpFormatter
from foundation.phase_marks import mark
from foundation.process_exit import exit_now
from harness.cli import head_start
from harness.errors import EXIT_USAGE, UsageError, print_usage_error
from harness.wire.redact import redact, secret_values


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (`stampede: error: ...`), not a usage block, and every option's
    help states its default and environment variable (foundation.cli_help)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"stampede: error: {message} (see {self.prog} --help)\n")


@dataclass(frozen=True)
class Command:
    """One `stampede NAME`: its module (add_arguments, run) and the line `stampede --help` shows for it."""

    name: str
    module: str
    help: str
    description: str | None = None
    epilog: str | None = None
    gevent_first: bool = False  # imports Locust before anything else (it patches the interpreter)
    options_module: str | None = None  # where add_arguments lives, when `module` is too heavy to import for it


@dataclass(frozen=True)
class HandedOver:
    """`stampede GROUP SUB ...` handed whole to a module's `main(argv, prog=...)` (it owns its parser)."""

    group: str
    group_help: str
    sub: str
    help: str
    main: str  # "module:function"
    takes_prog: bool = True


COMMANDS: tuple[Command, ...] = (
    Command(
        "run",
        "harness.cli.run",
        "run a scenario headless and write results/<run_id>/",
        "Ramp rollouts against a sandbox provider (default: the embedded Prime-like stub).",
        gevent_first=True,
        options_module="harness.cli.run_options",
    ),
    Command("profiles", "harness.cli.profiles", "list the simulated vendor profiles"),
    Command(
        "summary",
        "harness.cli.summary",
        "how a run ended, its per-stage table and thresholds; writes RUN_DIR/summary.json",
    ),
    Command(
        "cleanup",
        "harness.cli.cleanup",
        "terminate every sandbox a run left behind (found by its run label), or every one stampede tagged",
    ),
    Command("report", "harness.cli.report", "tables, figures and report.html for one or more runs (side by side)"),
    Command("export", "harness.cli.export", "write the latency model (latency_model.json, v1) of one or more runs"),
    Command(
        "model",
        "harness.cli.model",
        "generator throughput and trainer idle from a latency model and an RL config",
    ),
    Command(
        "compare",
        "harness.cli.compare",
        "a candidate run against a baseline: deltas, intervals, a verdict (exit 98: worse)",
    ),
    Command(
        "rehearse",
        "harness.cli.rehearse",
        "an emulated RL loop through the harness, measured and compared with `stampede model`",
        epilog="a simulated vendor runs at the time scale throughout (rehearse sets STAMPEDE_SIM_BURST_PACING=0: no "
        "1:1 pacing of create bursts, which would stretch the loop's clock)",
        gevent_first=True,
    ),
    Command(
        "calibrate",
        "harness.cli.calibrate",
        "run the public benchmarks' protocols against simulated vendor profiles; simulated vs public",
    ),
    Command(
        "trial",
        "harness.cli.trial",
        "the leaderboard's protocols and a ramp against one vendor, priced first; one scorecard, fitted and predicted",
    ),
)

HANDED_OVER: tuple[HandedOver, ...] = (
    HandedOver(
        "stub",
        "the Prime-like HTTP API stub over the vendor simulator",
        "serve",
        "run the stub standalone (options: stampede stub serve --help)",
        "providers.sim.prime.serve:main",
    ),
    HandedOver(
        "modal-local",
        "the local Modal control plane over the vendor simulator",
        "serve",
        "run it standalone (options: stampede modal-local serve --help)",
        "providers.sim.modal.serve:main",
    ),
    HandedOver(
        "e2b-local",
        "the local E2B (REST control plane + envd) over the vendor simulator",
        "serve",
        "run it standalone (options: stampede e2b-local serve --help)",
        "providers.sim.e2b.serve:main",
    ),
    HandedOver(
        "daytona-local",
        "the local Daytona API over the vendor simulator",
        "serve",
        "run it standalone (options: stampede daytona-local serve --help)",
        "providers.sim.daytona.serve:main",
    ),
    HandedOver(
        "agent-sandbox-local",
        "the local Kubernetes agent-sandbox (custom resources, watches, warm pool, router) over the vendor simulator",
        "serve",
        "run it standalone (options: stampede agent-sandbox-local serve --help)",
        "providers.sim.agent_sandbox.serve:main",
    ),
    HandedOver(
        "runloop-local",
        "the local Runloop API over the vendor simulator",
        "serve",
        "run it standalone (options: stampede runloop-local serve --help)",
        "providers.sim.runloop.serve:main",
    ),
    HandedOver(
        "coreweave-local",
        "the local CoreWeave Sandbox API (gRPC) over the vendor simulator",
        "serve",
        "run it standalone (options: stampede coreweave-local serve --help)",
        "providers.sim.coreweave.serve:main",
    ),
    HandedOver(
        "vercel-local",
        "the local Vercel Sandbox API over the vendor simulator",
        "serve",
        "run it standalone (options: stampede vercel-local serve --help)",
        "providers.sim.vercel.serve:main",
    ),
    HandedOver(
        "docker",
        "the local Docker provider's helpers",
        "image",
        "build the offline busybox sandbox image (options: stampede docker image --help)",
        "providers.vendors.docker.image:main",
        takes_prog=False,
    ),
)


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("stampede")
    except PackageNotFoundError:
        return "(not installed: run pip install -e .)"


def build_parser(only: str | None = None) -> OneLineParser:
    """Every command's parser; with `only`, just that command's options are added (the others keep their line)."""
    parser = OneLineParser(prog="stampede", description="Load-test a fleet of code-execution sandboxes.")
    parser.add_argument("--version", action="version", version=f"stampede {_installed_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    for command in COMMANDS:
        command_parser = sub.add_parser(
            command.name,
            help=command.help,
            description=command.description or command.help,
            epilog=command.epilog,
        )
        if only is None or only == command.name:
            importlib.import_module(command.options_module or command.module).add_arguments(command_parser)
    groups: dict[str, argparse._SubParsersAction] = {}
    for handed in HANDED_OVER:
        if handed.group not in groups:
            group = sub.add_parser(handed.group, help=handed.group_help)
            groups[handed.group] = group.add_subparsers(
                dest=f"{handed.group}_command", metavar="COMMAND", parser_class=OneLineParser
            )
            groups[handed.group].required = True
        groups[handed.group].add_parser(handed.sub, help=handed.help)
    return parser


def _run_handed_over(argv: list[str]) -> int | None:
    """The exit status of a handed-over command, or None when argv names none."""
    for handed in HANDED_OVER:
        if argv[:2] == [handed.group, handed.sub]:
            module_name, function = handed.main.split(":")
            try:
                entry = getattr(importlib.import_module(module_name), function)
            except ModuleNotFoundError as exc:  # a simulated vendor speaking its SDK's wire (modal_proto)
                from providers import missing_sdk_message

                subject = f"stampede {handed.group} {handed.sub}"
                return print_usage_error(UsageError(missing_sdk_message(module_name, exc.name, subject)))
            if handed.takes_prog:
                return int(entry(argv[2:], prog=f"stampede {handed.group} {handed.sub}"))
            return int(entry(argv[2:]))
    return None


def known_secrets(args: argparse.Namespace) -> list[str]:
    """Every secret this invocation was given (its options whose names say secret, `--provider-option` values
    whose keys do, the token in the environment): `redact` masks them wherever an error quotes them."""
    found = secret_values({k: v for k, v in vars(args).items() if isinstance(v, str)})
    for pair in getattr(args, "provider_option", None) or []:
        key, _, value = str(pair).partition("=")
        found += secret_values({key: value})
    return found + secret_values({"STAMPEDE_TOKEN": os.environ.get("STAMPEDE_TOKEN")})


def main(argv: Sequence[str] | None = None) -> int:
    mark("command: interpreter up")
    own_process = argv is None  # the command line itself, not a caller (a test) running a command in its interpreter
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((command for command in COMMANDS if argv[:1] == [command.name]), None)
    head_started = own_process and chosen is not None and chosen.name == "run" and "locust" not in sys.modules
    try:
        return _main(argv, chosen, own_process, head_started)
    finally:
        if head_started:
            head_start.end()  # whatever the head start began that the run did not take (a refused run)


def _main(argv: list[str], chosen: Command | None, own_process: bool, head_started: bool) -> int:
    if head_started and head_start.patch_interpreter():
        mark("command: gevent patched")
        # the engine and the vendor import their worlds while this process imports Locust's and its own
        head_start.begin(argv[1:])
    if chosen is not None and chosen.gevent_first:
        import locust  # noqa: F401  (gevent must patch before asyncio and ssl are imported)

        mark("command: locust imported")
    handed_over_status = _run_handed_over(argv)
    if handed_over_status is not None:
        return handed_over_status
    args = build_parser(only=chosen.name if chosen else "").parse_args(argv)
    try:
        module = importlib.import_module(next(c.module for c in COMMANDS if c.name == args.command))
        mark("command: its module imported")
        code = int(module.run(args))
        sys.stdout.flush()  # inside the try: a reader that left is met here, not in a traceback at exit
        mark("command: done")
        if own_process and chosen is not None and chosen.gevent_first:
            # Locust, gevent, pandas and pyarrow took 0.5-2 s to tear down after the summary; every file the run
            # wrote is closed and its engine and vendor have exited by now
            if head_started:
                head_start.end()
            exit_now(code)
        return code
    except UsageError as exc:
        # one redaction for every printed error: a vendor's message may quote the credentials it was sent
        return print_usage_error(UsageError(redact(str(exc), known_secrets(args))))
    except KeyboardInterrupt:
        print("stampede: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `stampede summary RUN | head`: the reader left; say nothing more (Python would print a traceback at exit)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command killed by it
