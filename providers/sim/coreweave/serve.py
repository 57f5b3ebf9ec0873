"""Run the local CoreWeave Sandbox standalone (`stampede coreweave-local serve`), or as the child process the harness
embeds (`--local`).

    python -m providers.sim.coreweave.serve --profile coreweave-like --seed 1 --port 0 --exit-on-stdin-eof

Once listening it prints ONE JSON line to stdout: `url` (the gRPC API: what `CWSANDBOX_BASE_URL` names), `token`
(the API key), `env` (exactly what a user's own script sets for the unmodified cwsandbox SDK: `CWSANDBOX_BASE_URL`,
`CWSANDBOX_API_KEY`), `truth_url` (HTTP, `/api/v1/_stampede/truth`), `provider_options` (what the coreweave
provider needs besides `base_url` and `token`: the gateway data plane, since no direct one is served), `profile`,
`time_scale`, `seed`, `pid`; then a human line to stderr. It exits cleanly on SIGINT/SIGTERM and, with
`--exit-on-stdin-eof`, when its stdin closes. Bad input: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from foundation.converters import port
from providers.sim.core.serving.serve_cli import ServeCommand, sdk_exports
from providers.sim.coreweave.server import DEFAULT_PROFILE, CoreWeaveSettings, RunningCoreWeave, start_coreweave

PROG = "python -m providers.sim.coreweave.serve"


def _more_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--truth-port", type=port, default=0, help="truth endpoint port (default: a free port)")


def _more_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"truth_port": args.truth_port}


def _ready_fields(front: RunningCoreWeave) -> dict[str, Any]:
    return {
        "env": front.sdk_environment(),
        "truth_url": front.truth_url,
        "provider_options": {"data_plane_mode": "gateway"},
    }


def _where(front: RunningCoreWeave) -> str:
    exports = sdk_exports(front.sdk_environment())
    return f"gRPC API {front.url}; point the cwsandbox SDK here with: {exports}"


COMMAND = ServeCommand(
    prog=PROG,
    description="Serve a local CoreWeave Sandbox API (gRPC) over the vendor simulator.",
    title="stampede local CoreWeave Sandbox",
    default_profile=DEFAULT_PROFILE,
    settings=CoreWeaveSettings,
    start=start_coreweave,
    ready_fields=_ready_fields,
    where=_where,
    port_help="gRPC API port (default 0: a free port)",
    more_arguments=_more_arguments,
    more_settings=_more_settings,
)
build_parser = COMMAND.build_parser
main = COMMAND.main  # `stampede coreweave-local serve` wires this


if __name__ == "__main__":
    sys.exit(main())
