"""Run the Prime-like stub standalone, or as the child process the harness embeds.

    python -m providers.sim.serve --profile modal-like --seed 1 --port 0 --exit-on-stdin-eof

Once listening it prints ONE JSON line to stdout (`url`, `token`, `profile`, `time_scale`, `seed`, `pid`)
for a parent to read, then a human line to stderr. It exits cleanly on SIGINT/SIGTERM and, with
`--exit-on-stdin-eof`, when its stdin closes, so an embedded child never outlives the harness that
started it. Bad input ends in one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import sys
import threading
from typing import Any, NoReturn

from providers.sim.prime_api import RunningStub, StubSettings, serve
from providers.sim.profile import ProfileError, load_profile, profile_names


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535, got {value}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def build_parser(prog: str = "python -m providers.sim.serve") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="Serve the Prime-like sandbox API over the vendor simulator.")
    parser.add_argument(
        "--profile",
        default="prime-like",
        help=f"built-in profile ({', '.join(profile_names())}) or a path to a .toml file",
    )
    parser.add_argument("--seed", type=_int, default=0, help="simulator seed (default 0)")
    parser.add_argument(
        "--time-scale",
        type=_positive_float,
        default=None,
        help="real seconds per vendor second (default: the profile's default_time_scale)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=0, help="port (default 0: a free port)")
    parser.add_argument("--token", default=None, help="API token clients must send (default: random)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one profile value, e.g. --set quota.max_active=100 (repeatable)",
    )
    parser.add_argument(
        "--exit-on-stdin-eof",
        action="store_true",
        help="exit when stdin closes (for a child process owned by a harness)",
    )
    return parser


def _settings(args: argparse.Namespace) -> StubSettings:
    overrides: list[tuple[str, Any]] = []
    for item in args.overrides:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise _UsageError(f"--set expects KEY=VALUE, got {item!r}")
        overrides.append((key.strip(), value.strip()))
    profile = load_profile(args.profile)
    if overrides:
        profile = profile.with_overrides(dict(overrides))
    kwargs: dict[str, Any] = {}
    if args.token:
        kwargs["token"] = args.token
    return StubSettings(
        profile=profile, seed=args.seed, time_scale=args.time_scale, host=args.host, port=args.port, **kwargs
    )


async def _run(settings: StubSettings, exit_on_stdin_eof: bool) -> None:
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

    def ready(stub: RunningStub) -> None:
        sim = stub.simulator
        line = {
            "url": stub.url,
            "token": stub.token,
            "profile": sim.profile.name,
            "time_scale": float(getattr(sim.clock, "time_scale", 1.0)),
            "seed": sim.seed,
            "pid": os.getpid(),
        }
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        sys.stderr.write(
            f"stampede stub: {sim.profile.name} (seed {sim.seed}, time scale {line['time_scale']:g}) "
            f"listening on {stub.url}/api/v1; Ctrl-C to stop\n"
        )
        sys.stderr.flush()

    await serve(settings, stop=stop, on_ready=ready)


def main(argv: list[str] | None = None) -> int:
    """Entry point (`stampede stub serve` wires this): 0 on a clean stop, 2 on bad input."""
    prog = "python -m providers.sim.serve"
    try:
        args = build_parser(prog).parse_args(argv)
        settings = _settings(args)
        settings.resolved_time_scale(settings.resolved_profile())
    except _UsageError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return 2
    except (ProfileError, ValueError) as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return 2
    try:
        asyncio.run(_run(settings, args.exit_on_stdin_eof))
    except OSError as exc:
        sys.stderr.write(
            f"{prog}: error: cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}\n"
        )
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
