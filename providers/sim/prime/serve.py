"""Run the Prime-like stub standalone, or as the child process the harness embeds.

    python -m providers.sim.prime.serve --profile modal-like --seed 1 --port 0 --exit-on-stdin-eof

Once listening it prints ONE JSON line to stdout (`url`, `token`, `profile`, `time_scale`, `seed`, `pid`)
for a parent to read, then a human line to stderr. It exits cleanly on SIGINT/SIGTERM and, with
`--exit-on-stdin-eof`, when its stdin closes, so an embedded child never outlives the harness that
started it. Bad input ends in one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from providers.sim.core.profile import load_profile
from providers.sim.core.serve_cli import (
    Parser,
    add_simulator_arguments,
    announce,
    parse_overrides,
    port,
    serve_main,
)
from providers.sim.prime.api import RunningStub, StubSettings, start_stub

PROG = "python -m providers.sim.prime.serve"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
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


def _announce(stub: RunningStub) -> None:
    sim = stub.simulator
    scale = sim.clock.time_scale
    line = {
        "url": stub.url,
        "token": stub.token,
        "profile": sim.profile.name,
        "time_scale": scale,
        "seed": sim.seed,
        "pid": os.getpid(),
        "account_wide": sim.profile.account_wide_limits(),
    }
    announce(
        line,
        f"stampede stub: {sim.profile.name} (seed {sim.seed}, time scale {scale:g}) "
        f"listening on {stub.url}/api/v1; Ctrl-C to stop",
    )


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Entry point (`stampede stub serve` wires this): 0 on a clean stop, 2 on bad input."""

    def parse() -> tuple[argparse.Namespace, StubSettings]:
        args = build_parser(prog).parse_args(argv)
        return args, _settings(args)

    return serve_main(prog, parse, start_stub, _announce)


if __name__ == "__main__":
    sys.exit(main())
