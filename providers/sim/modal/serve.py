"""Run the local Modal control plane standalone, or as the child process the harness embeds (`--local`).

    python -m providers.sim.modal.serve --profile modal-like --seed 1 --port 0 --token T --exit-on-stdin-eof

Once listening it prints ONE JSON line to stdout for a parent to read: `url` (what `MODAL_SERVER_URL`, or the
modal provider's `base_url`, must name), `router_url`, `truth_url` (serves `/api/v1/_stampede/truth` with
`Authorization: Bearer T`), `token`, `token_id`, `provider_options` (what the modal provider needs besides
`base_url` and `token`), `profile`, `time_scale`, `seed`, `pid`; then a human line to stderr. It exits
cleanly on SIGINT/SIGTERM and, with `--exit-on-stdin-eof`, when its stdin closes. Bad input: one line on
stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from providers.sim.core.serve_cli import (
    Parser,
    UsageError,
    add_simulator_arguments,
    announce,
    parse_overrides,
    port,
    serve_main,
)
from providers.sim.modal.server import DEFAULT_PROFILE, ModalSettings, RunningModal, start_modal
from providers.sim.modal.tokens import DEFAULT_TOKEN_ID

PROG = "python -m providers.sim.modal.serve"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description="Serve a local Modal control plane (gRPC) over the vendor simulator.")
    add_simulator_arguments(parser, DEFAULT_PROFILE)
    parser.add_argument("--port", type=port, default=0, help="control-plane port (default 0: a free port)")
    parser.add_argument("--router-port", type=port, default=0, help="command-router port (default: a free port)")
    parser.add_argument("--truth-port", type=port, default=0, help="truth endpoint port (default: a free port)")
    parser.add_argument("--token", default=None, help="the workspace token secret clients must send (default: random)")
    parser.add_argument("--token-id", default=DEFAULT_TOKEN_ID, help=f"the token id (default {DEFAULT_TOKEN_ID})")
    return parser


def settings_from_args(args: argparse.Namespace) -> ModalSettings:
    """Settings from the command line (bad values raise UsageError with a one-line message)."""
    overrides = parse_overrides(args.overrides)
    if not args.token_id or not args.token_id.strip():
        raise UsageError("--token-id must not be empty")
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


async def _start(settings: ModalSettings) -> RunningModal:
    return await start_modal(settings)


def _announce(modal: RunningModal) -> None:
    line = ready_line(modal)
    announce(
        line,
        f"stampede local Modal: {line['profile']} (seed {line['seed']}, time scale "
        f"{line['time_scale']:g}) control plane {modal.url} (MODAL_SERVER_URL), router "
        f"{modal.router_url}; Ctrl-C to stop",
    )


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Entry point (`stampede modal-local serve` wires this): 0 on a clean stop, 2 on bad input."""

    def parse() -> tuple[argparse.Namespace, ModalSettings]:
        args = build_parser(prog).parse_args(argv)
        return args, settings_from_args(args)

    return serve_main(prog, parse, _start, _announce)


if __name__ == "__main__":
    sys.exit(main())
