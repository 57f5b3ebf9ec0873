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
import os
import sys
from typing import Any

from providers.sim.prime_api import RunningStub, StubSettings, start_stub
from providers.sim.profile import ProfileError, load_profile
from providers.sim.serve_cli import (
    Parser,
    UsageError,
    add_simulator_arguments,
    announce,
    parse_overrides,
    port,
    serve_until_stopped,
)


def build_parser(prog: str = "python -m providers.sim.serve") -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description="Serve the Prime-like sandbox API over the vendor simulator.")
    add_simulator_arguments(parser, "prime-like")
    parser.add_argument("--port", type=port, default=0, help="port (default 0: a free port)")
    parser.add_argument("--token", default=None, help="API token clients must send (default: random)")
    return parser


def _settings(args: argparse.Namespace) -> StubSettings:
    overrides = parse_overrides(args.overrides)
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
    def ready(stub: RunningStub) -> None:
        sim = stub.simulator
        scale = float(getattr(sim.clock, "time_scale", 1.0))
        line = {"url": stub.url, "token": stub.token, "profile": sim.profile.name, "time_scale": scale,
                "seed": sim.seed, "pid": os.getpid()}  # fmt: skip
        announce(line, f"stampede stub: {sim.profile.name} (seed {sim.seed}, time scale {scale:g}) "
                       f"listening on {stub.url}/api/v1; Ctrl-C to stop")  # fmt: skip

    await serve_until_stopped(lambda: start_stub(settings), ready, exit_on_stdin_eof)


def main(argv: list[str] | None = None) -> int:
    """Entry point (`stampede stub serve` wires this): 0 on a clean stop, 2 on bad input."""
    prog = "python -m providers.sim.serve"
    try:
        args = build_parser(prog).parse_args(argv)
        settings = _settings(args)
        settings.resolved_time_scale(settings.resolved_profile())
    except UsageError as exc:
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
