"""Run the local E2B standalone (`stampede e2b-local serve`), or as the child process the harness embeds (`--local`).

    python -m providers.sim.e2b.serve --profile e2b-like --seed 1 --port 0 --token T --exit-on-stdin-eof

Once listening it prints ONE JSON line to stdout: `url` (the control plane and the sandbox proxy, one server),
`token` (the API key), `env` (exactly what a user's own script sets for the unmodified e2b SDK:
`E2B_API_KEY`, `E2B_API_URL`, `E2B_SANDBOX_URL`), `provider_options` (what the e2b provider needs besides
`base_url` and `token`), `truth_url`, `profile`, `time_scale`, `seed`, `pid`; then a human line to stderr. It
exits cleanly on SIGINT/SIGTERM and, with `--exit-on-stdin-eof`, when its stdin closes. Bad input: one line on
stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from providers.sim.core.serve_cli import Parser, add_simulator_arguments, announce, parse_overrides, port, serve_main
from providers.sim.e2b.server import DEFAULT_PROFILE, E2BSettings, RunningE2B, start_e2b

PROG = "python -m providers.sim.e2b.serve"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description="Serve a local E2B (REST control plane + envd) over the vendor simulator.")
    add_simulator_arguments(parser, DEFAULT_PROFILE)
    parser.add_argument("--port", type=port, default=0, help="port (default 0: a free port)")
    parser.add_argument("--token", default=None, help="the API key clients must send (default: random)")
    return parser


def settings_from_args(args: argparse.Namespace) -> E2BSettings:
    kwargs: dict[str, Any] = {"token": args.token} if args.token else {}
    return E2BSettings(
        profile=args.profile,
        seed=args.seed,
        time_scale=args.time_scale,
        host=args.host,
        port=args.port,
        overrides=parse_overrides(args.overrides),
        **kwargs,
    )


def ready_line(e2b: RunningE2B) -> dict[str, Any]:
    sim = e2b.simulator
    return {
        "url": e2b.url,
        "token": e2b.token,
        "env": e2b.sdk_environment(),
        "provider_options": {"sandbox_url": e2b.url},
        "truth_url": e2b.url,
        "profile": sim.profile.name,
        "time_scale": e2b.time_scale,
        "seed": sim.seed,
        "pid": os.getpid(),
    }


async def _start(settings: E2BSettings) -> RunningE2B:
    return await start_e2b(settings)


def _announce(e2b: RunningE2B) -> None:
    line = ready_line(e2b)
    exports = " ".join(f"{key}={value}" for key, value in line["env"].items())
    announce(
        line,
        f"stampede local E2B: {line['profile']} (seed {line['seed']}, time scale {line['time_scale']:g}) "
        f"on {e2b.url}; point the e2b SDK here with: {exports}; Ctrl-C to stop",
    )


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Entry point (`stampede e2b-local serve` wires this): 0 on a clean stop, 2 on bad input."""

    def parse() -> tuple[argparse.Namespace, E2BSettings]:
        args = build_parser(prog).parse_args(argv)
        return args, settings_from_args(args)

    return serve_main(prog, parse, _start, _announce)


if __name__ == "__main__":
    sys.exit(main())
