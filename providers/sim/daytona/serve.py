"""Run the local Daytona standalone, or as the child process the harness embeds (`--provider daytona --local`).

    python -m providers.sim.daytona.serve --profile daytona-like --seed 1 --port 0 --exit-on-stdin-eof

Once listening it prints ONE JSON line to stdout: `url` (what `DAYTONA_API_URL`, or the daytona provider's
`base_url`, must name), `toolbox_url`, `truth_url` (serves `/api/v1/_stampede/truth` with `Authorization:
Bearer <token>`), `token`, `env` (the exact variables a user's own script needs: `DAYTONA_API_URL`,
`DAYTONA_API_KEY`, `DAYTONA_TARGET`), `profile`, `time_scale`, `seed`, `pid`; then a human line to stderr.
It exits cleanly on SIGINT/SIGTERM and, with `--exit-on-stdin-eof`, when its stdin closes. Bad input: one
line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from providers.sim.core.serve_cli import (
    Parser,
    add_simulator_arguments,
    announce,
    parse_overrides,
    port,
    serve_main,
)
from providers.sim.daytona.server import DEFAULT_PROFILE, DaytonaSettings, RunningDaytona, start_daytona
from providers.sim.daytona.shapes import REGION

PROG = "python -m providers.sim.daytona.serve"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description="Serve a local Daytona API (REST, toolbox, events) over the simulator.")
    add_simulator_arguments(parser, DEFAULT_PROFILE)
    parser.add_argument("--port", type=port, default=0, help="port (default 0: a free port)")
    parser.add_argument("--token", default=None, help="the API key clients must send (default: random)")
    return parser


def settings_from_args(args: argparse.Namespace) -> DaytonaSettings:
    kwargs: dict[str, Any] = {}
    if args.token:
        kwargs["token"] = args.token
    return DaytonaSettings(
        profile=args.profile,
        seed=args.seed,
        time_scale=args.time_scale,
        host=args.host,
        port=args.port,
        overrides=parse_overrides(args.overrides),
        **kwargs,
    )


def ready_line(daytona: RunningDaytona) -> dict[str, Any]:
    sim = daytona.simulator
    return {
        "url": daytona.api_url,
        "toolbox_url": daytona.toolbox_url,
        "truth_url": daytona.url,
        "token": daytona.token,
        "env": {"DAYTONA_API_URL": daytona.api_url, "DAYTONA_API_KEY": daytona.token, "DAYTONA_TARGET": REGION},
        "profile": sim.profile.name,
        "time_scale": daytona.time_scale,
        "seed": sim.seed,
        "pid": os.getpid(),
    }


async def _start(settings: DaytonaSettings) -> RunningDaytona:
    return await start_daytona(settings)


def _announce(daytona: RunningDaytona) -> None:
    line = ready_line(daytona)
    announce(
        line,
        f"stampede local Daytona: {line['profile']} (seed {line['seed']}, time scale "
        f"{line['time_scale']:g}) API {daytona.api_url} (DAYTONA_API_URL), toolbox "
        f"{daytona.toolbox_url}; Ctrl-C to stop",
    )


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Entry point (`stampede daytona-local serve` wires this): 0 on a clean stop, 2 on bad input."""

    def parse() -> tuple[argparse.Namespace, DaytonaSettings]:
        args = build_parser(prog).parse_args(argv)
        return args, settings_from_args(args)

    return serve_main(prog, parse, _start, _announce)


if __name__ == "__main__":
    sys.exit(main())
