"""What every simulated vendor's `serve` entry point shares: its command line, and running until told to stop.

A serve module runs standalone or as the child process the harness embeds: it prints one JSON line to stdout
once listening (for the parent), a human line to stderr, and exits on SIGINT/SIGTERM or, with
`--exit-on-stdin-eof`, when its stdin closes, so an embedded child never outlives its harness.

`ServeCommand` is that whole skeleton; each front's `serve.py` is one of it, supplying only what differs: its
settings class and start function, its own arguments, what its ready line and human line add.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NoReturn, Protocol, TypeVar

from foundation.cli_help import DefaultsHelpFormatter, set_env_var
from foundation.converters import integer, port, positive_finite_float
from foundation.errors import EXIT_USAGE, UsageError
from foundation.gc_freezing import freeze_survivors, tune_for_latency
from foundation.open_files import raise_open_files_limit
from foundation.process_exit import exit_now
from providers.sim.core.execution.isolated_shell import MISSING as MISSING_BWRAP
from providers.sim.core.execution.isolated_shell import IsolatedShell
from providers.sim.core.profile import COMMAND_MODES, ProfileError, profile_names
from providers.sim.core.vendor_settings import VendorSettings

if TYPE_CHECKING:
    from providers.sim.core.simulator import VendorSimulator


class RunningServer(Protocol):
    async def close(self) -> None: ...


class RunningFront(RunningServer, Protocol):
    """What every front returns once listening (`listening.RunningApp`, the local Modal's own record)."""

    @property
    def url(self) -> str: ...

    @property
    def token(self) -> str: ...

    @property
    def simulator(self) -> VendorSimulator: ...

    @property
    def time_scale(self) -> float: ...


Server = TypeVar("Server", bound=RunningServer)
Front = TypeVar("Front", bound=RunningFront)
Settings = TypeVar("Settings", bound=VendorSettings)


class Parser(argparse.ArgumentParser):
    """A usage error is one line; every option's help states its default (foundation.cli_help)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def add_simulator_arguments(parser: argparse.ArgumentParser, default_profile: str) -> None:
    """--profile --seed --time-scale --host --set --exit-on-stdin-eof (ports and tokens are each front's own)."""
    parser.add_argument(
        "--profile",
        default=default_profile,
        help=f"built-in profile ({', '.join(profile_names())}) or a path to a .toml file (default {default_profile})",
    )
    parser.add_argument("--seed", type=integer, default=0, help="simulator seed (default 0)")
    parser.add_argument(
        "--time-scale",
        type=positive_finite_float,
        default=None,
        help="real seconds per vendor second (default: the profile's default_time_scale)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one profile value, e.g. --set quota.max_active=100 (repeatable)",
    )
    parser.add_argument(
        "--commands",
        choices=COMMAND_MODES,
        default=None,
        help="run sandbox commands for real (a shell in each sandbox's own tree, under bubblewrap) or modelled "
        "(in-process, no processes: the load path) (default: the profile's [sandbox] commands, modelled)",
    )
    parser.add_argument(
        "--exit-on-stdin-eof",
        action="store_true",
        help="exit when stdin closes (for a child process owned by a harness)",
    )


def parse_overrides(items: list[str]) -> tuple[tuple[str, Any], ...]:
    overrides: list[tuple[str, Any]] = []
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--set expects KEY=VALUE, got {item!r}")
        overrides.append((key.strip(), value.strip()))
    return tuple(overrides)


def announce(line: dict[str, Any], human: str) -> None:
    """The JSON line a parent reads, then a line for people."""
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()
    sys.stderr.write(human + "\n")
    sys.stderr.flush()


async def serve_until_stopped(
    start: Callable[[], Awaitable[Server]], on_ready: Callable[[Server], None], exit_on_stdin_eof: bool
) -> None:
    """Start a server, announce it, and close it on SIGINT/SIGTERM or (optionally) at the end of stdin."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if exit_on_stdin_eof:

        def watch_stdin() -> None:
            try:
                while sys.stdin.buffer.read(65536):
                    pass
            except (OSError, ValueError):
                pass
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=watch_stdin, name="stdin-eof", daemon=True).start()
    server = await start()
    tune_for_latency()  # what start-up built is never garbage; from now on survivors are frozen every second
    freezer = loop.create_task(freeze_survivors())
    try:
        on_ready(server)
        await stop.wait()
    finally:
        freezer.cancel()
        await server.close()


def serve_main(
    prog: str,
    parse: Callable[[], tuple[argparse.Namespace, Settings]],
    start: Callable[[Settings], Awaitable[Server]],
    on_ready: Callable[[Server], None],
) -> int:
    """A serve module's entry point: 0 on a clean stop, 2 on bad input. Settings are checked before anything
    listens, and a port that cannot be bound counts as bad input too: one line on stderr either way."""
    try:
        args, settings = parse()
        profile = settings.resolved_profile()
        settings.resolved_time_scale(profile)
        if profile.sandbox.commands == "real" and not IsolatedShell.available():
            raise UsageError(MISSING_BWRAP)
    except (UsageError, ProfileError, ValueError) as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return EXIT_USAGE
    raise_open_files_limit()  # every client connection is a file: thousands in flight need more than 1,024
    try:
        asyncio.run(serve_until_stopped(lambda: start(settings), on_ready, args.exit_on_stdin_eof))
    except OSError as exc:
        sys.stderr.write(f"{prog}: error: cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}\n")
        return 2
    except KeyboardInterrupt:
        pass
    if args.exit_on_stdin_eof:
        # a harness's child, its server closed and its sandboxes with it: the interpreter's teardown (0.1-1 s of
        # freeing the simulator's world) would keep the harness waiting for nothing
        exit_now(0)
    return 0


TOKEN_ENV = "STAMPEDE_SERVE_TOKEN"
"""Where a served vendor reads its token: a command line is world-readable (`ps`, /proc/PID/cmdline), a process's
environment is its owner's only; the harness starts its embedded vendors this way."""


def served_token(args: argparse.Namespace, prog: str) -> str | None:
    """The token from --token-file, the environment or --token (None: a random one). `--token` still works for a
    user, with a warning on stderr, since every local user can read it."""
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as file:
                token = file.readline().strip()
        except OSError as exc:
            raise UsageError(f"--token-file: cannot read {args.token_file}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise UsageError(f"--token-file: {args.token_file} is not UTF-8 text") from None
        if not token:
            raise UsageError(f"--token-file: {args.token_file} is empty")
        return token
    if args.token:
        print(
            f"{prog}: warning: --token shows the token to every user of this machine (ps, /proc/PID/cmdline); "
            f"pass it in {TOKEN_ENV} or --token-file instead",
            file=sys.stderr,
        )
        return str(args.token)
    return os.environ.get(TOKEN_ENV) or None


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    return None


def _no_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {}


def _no_fields(front: RunningFront) -> dict[str, Any]:
    return {}


def sdk_exports(env: dict[str, str]) -> str:
    """The variables a user's own script sets for the unmodified SDK, as one `KEY=VALUE ...` line (human lines)."""
    return " ".join(f"{key}={value}" for key, value in env.items())


@dataclass(frozen=True)
class ServeCommand(Generic[Settings, Front]):
    """One simulated vendor's `serve` command; the fields are all that differs from one front to another.

    The common arguments (`add_simulator_arguments`, `--port`, `--token`) become `settings(...)`; `more_arguments`
    and `more_settings` add a front's own. The ready line is the front's `url` and `token` (what every parent
    reads), `ready_fields(front)` (its own, which may name another `url`), then the run's facts (profile, time
    scale, seed, pid); the human line is "<title>: <profile> (seed N, time scale S) <where(front)>; Ctrl-C to
    stop".
    """

    prog: str
    description: str
    title: str
    default_profile: str
    settings: Callable[..., Settings]
    start: Callable[[Settings], Awaitable[Front]]
    where: Callable[[Front], str]
    ready_fields: Callable[[Front], dict[str, Any]] = _no_fields
    token_help: str = "the API key clients must send (default: random)"
    port_help: str = "port (default 0: a free port)"
    more_arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    more_settings: Callable[[argparse.Namespace], dict[str, Any]] = _no_settings  # UsageError on a bad value

    def build_parser(self, prog: str | None = None) -> argparse.ArgumentParser:
        parser = Parser(prog=prog or self.prog, description=self.description)
        add_simulator_arguments(parser, self.default_profile)
        parser.add_argument("--port", type=port, default=0, help=self.port_help)
        self.more_arguments(parser)
        set_env_var(parser.add_argument("--token", default=None, help=self.token_help), TOKEN_ENV)
        parser.add_argument(
            "--token-file", default=None, metavar="PATH", help="read the token from this file (its first line)"
        )
        return parser

    def settings_from_args(self, args: argparse.Namespace) -> Settings:
        """Settings from the command line (a bad value raises UsageError with a one-line message)."""
        common: dict[str, Any] = {
            "profile": args.profile,
            "seed": args.seed,
            "time_scale": args.time_scale,
            "host": args.host,
            "port": args.port,
            "overrides": parse_overrides(args.overrides)
            + ((("sandbox.commands", args.commands),) if getattr(args, "commands", None) else ()),
        }
        token = served_token(args, self.prog)
        if token:
            common["token"] = token
        return self.settings(**common, **self.more_settings(args))

    def ready_line(self, front: Front) -> dict[str, Any]:
        """The JSON line a parent reads: url and token, the front's own fields, then the run's facts."""
        common = {"url": front.url, "token": front.token}
        return {**common, **self.ready_fields(front), **front.simulator.facts(), "pid": os.getpid()}

    def announce(self, front: Front) -> None:
        line = self.ready_line(front)
        announce(
            line,
            f"{self.title}: {line['profile']} (seed {line['seed']}, time scale {line['time_scale']:g}) "
            f"{self.where(front)}; Ctrl-C to stop",
        )

    def main(self, argv: list[str] | None = None, prog: str | None = None) -> int:
        """The entry point: 0 on a clean stop, 2 on bad input (one line on stderr)."""
        shown = prog or self.prog

        def parse() -> tuple[argparse.Namespace, Settings]:
            args = self.build_parser(shown).parse_args(argv)
            return args, self.settings_from_args(args)

        def on_ready(front: Front) -> None:
            self.announce(front)
            front.simulator.watch_loop()  # how late its own loop runs, for a run to tell from the profile's draws

        return serve_main(shown, parse, self.start, on_ready)
