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
import sys
from typing import Any

from foundation.converters import port
from providers.sim.core.serving.serve_cli import ServeCommand, UsageError
from providers.sim.modal.server import DEFAULT_PROFILE, ModalSettings, RunningModal, start_modal
from providers.sim.modal.tokens import DEFAULT_TOKEN_ID

PROG = "python -m providers.sim.modal.serve"


def _more_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--router-port", type=port, default=0, help="command-router port (default: a free port)")
    parser.add_argument("--truth-port", type=port, default=0, help="truth endpoint port (default: a free port)")
    parser.add_argument("--token-id", default=DEFAULT_TOKEN_ID, help=f"the token id (default {DEFAULT_TOKEN_ID})")


def _more_settings(args: argparse.Namespace) -> dict[str, Any]:
    if not args.token_id or not args.token_id.strip():
        raise UsageError("--token-id must not be empty")
    return {"router_port": args.router_port, "truth_port": args.truth_port, "token_id": args.token_id.strip()}


def _ready_fields(modal: RunningModal) -> dict[str, Any]:
    return {
        "router_url": modal.router_url,
        "truth_url": modal.truth_url,
        "token_id": modal.token_id,
        "provider_options": {"token_id": modal.token_id},
    }


COMMAND = ServeCommand(
    prog=PROG,
    description="Serve a local Modal control plane (gRPC) over the vendor simulator.",
    title="stampede local Modal",
    default_profile=DEFAULT_PROFILE,
    settings=ModalSettings,
    start=start_modal,
    ready_fields=_ready_fields,
    where=lambda modal: f"control plane {modal.url} (MODAL_SERVER_URL), router {modal.router_url}",
    token_help="the workspace token secret clients must send (default: random)",
    port_help="control-plane port (default 0: a free port)",
    more_arguments=_more_arguments,
    more_settings=_more_settings,
)
build_parser = COMMAND.build_parser
main = COMMAND.main  # `stampede modal-local serve` wires this


if __name__ == "__main__":
    sys.exit(main())
