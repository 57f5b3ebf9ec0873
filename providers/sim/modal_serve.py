"""Run the local Modal control plane standalone, or as the child process the harness embeds (`--local`).

    python -m providers.sim.modal_serve --profile modal-like --seed 1 --port 0 --token T --exit-on-stdin-eof

Once listening it prints ONE JSON line to stdout for a parent to read: `url` (what `MODAL_SERVER_URL`, or the
modal provider's `base_url`, must name), `router_url`, `truth_url` (serves `/api/v1/_stampede/truth` with
`Authorization: Bearer T`), `token`, `token_id`, `provider_options` (what the modal provider needs besides
`base_url` and `token`), `profile`, `time_scale`, `seed`, `pid`; then a human line to stderr. It exits
cleanly on SIGINT/SIGTERM and, with `--exit-on-stdin-eof`, when its stdin closes. Bad input: one line on
stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import signal
import sys
import threading
from typing import Any, NoReturn

from providers.sim.modal_server import DEFAULT_PROFILE, ModalSettings, RunningModal, serve_modal
from providers.sim.modal_tokens import DEFAULT_TOKEN_ID
from providers.sim.profile import ProfileError, profile_names

PROG = "python -m providers.sim.modal_serve"


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


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="Serve a local Modal control plane (gRPC) over the vendor simulator.")
    parser.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        help=f"built-in profile ({', '.join(profile_names())}) or a path to a .toml file (default {DEFAULT_PROFILE})",
    )
    parser.add_argument("--seed", type=_int, default=0, help="simulator seed (default 0)")
    parser.add_argument("--time-scale", type=_positive_float, default=None,
                        help="real seconds per vendor second (default: the profile's default_time_scale)")  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=0, help="control-plane port (default 0: a free port)")
    parser.add_argument("--router-port", type=_port, default=0, help="command-router port (default: a free port)")
    parser.add_argument("--truth-port", type=_port, default=0, help="truth endpoint port (default: a free port)")
    parser.add_argument("--token", default=None, help="the workspace token secret clients must send (default: random)")
    parser.add_argument("--token-id", default=DEFAULT_TOKEN_ID, help=f"the token id (default {DEFAULT_TOKEN_ID})")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one profile value, e.g. --set quota.max_active=100 (repeatable)")  # fmt: skip
    parser.add_argument("--exit-on-stdin-eof", action="store_true",
                        help="exit when stdin closes (for a child process owned by a harness)")  # fmt: skip
    return parser


def settings_from_args(args: argparse.Namespace) -> ModalSettings:
    """Validated settings (bad values raise _UsageError, ProfileError or ValueError with one-line messages)."""
    overrides: list[tuple[str, Any]] = []
    for item in args.overrides:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise _UsageError(f"--set expects KEY=VALUE, got {item!r}")
        overrides.append((key.strip(), value.strip()))
    if not args.token_id or not args.token_id.strip():
        raise _UsageError("--token-id must not be empty")
    kwargs: dict[str, Any] = {}
    if args.token:
        kwargs["token"] = args.token
    settings = ModalSettings(
        profile=args.profile,
        seed=args.seed,
        time_scale=args.time_scale,
        host=args.host,
        port=args.port,
        router_port=args.router_port,
        truth_port=args.truth_port,
        token_id=args.token_id.strip(),
        overrides=tuple(overrides),
        **kwargs,
    )
    settings.resolved_time_scale(settings.resolved_profile())  # fail here, before anything listens
    return settings


def ready_line(modal: RunningModal) -> dict[str, Any]:
    sim = modal.simulator
    return {
        "url": modal.url,
        "router_url": modal.router_url,
        "truth_url": modal.truth_url,
        "token": modal.token,
        "token_id": modal.token_id,
        "provider_options": {"token_id": modal.token_id},
        "profile": sim.profile.name,
        "time_scale": modal.time_scale,
        "seed": sim.seed,
        "pid": os.getpid(),
    }


def _raise_fd_limit() -> None:
    """Every SDK sandbox holds its own connection to the command router: 960 sandboxes, 960 sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


async def _run(settings: ModalSettings, exit_on_stdin_eof: bool) -> None:
    _raise_fd_limit()
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

    def ready(modal: RunningModal) -> None:
        line = ready_line(modal)
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        sys.stderr.write(
            f"stampede local Modal: {line['profile']} (seed {line['seed']}, time scale {line['time_scale']:g}) "
            f"control plane {modal.url} (MODAL_SERVER_URL), router {modal.router_url}; Ctrl-C to stop\n"
        )
        sys.stderr.flush()

    await serve_modal(settings, stop=stop, on_ready=ready)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Entry point (`stampede modal-local serve` wires this): 0 on a clean stop, 2 on bad input."""
    try:
        args = build_parser(prog).parse_args(argv)
        settings = settings_from_args(args)
    except (_UsageError, ProfileError, ValueError) as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return 2
    try:
        asyncio.run(_run(settings, args.exit_on_stdin_eof))
    except OSError as exc:
        sys.stderr.write(f"{prog}: error: cannot listen on {settings.host}: {exc.strerror or exc}\n")
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
