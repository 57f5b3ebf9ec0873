"""Run the Prime-like stub standalone, or as the child process the harness embeds.

    python -m providers.sim.prime.serve --profile modal-like --seed 1 --port 0 --exit-on-stdin-eof

Once listening it prints ONE JSON line to stdout (`url`, `token`, `account_wide`, `profile`, `time_scale`, `seed`,
`pid`) for a parent to read, then a human line to stderr. It exits cleanly on SIGINT/SIGTERM and, with
`--exit-on-stdin-eof`, when its stdin closes, so an embedded child never outlives the harness that
started it. Bad input ends in one line on stderr and exit status 2.
"""

from __future__ import annotations

import sys

from providers.sim.core.serving.serve_cli import ServeCommand
from providers.sim.prime.api import StubSettings, start_stub

PROG = "python -m providers.sim.prime.serve"

COMMAND = ServeCommand(
    prog=PROG,
    description="Serve the Prime-like sandbox API over the vendor simulator.",
    title="stampede stub",
    default_profile="prime-like",
    settings=StubSettings,
    start=start_stub,
    where=lambda stub: f"listening on {stub.api_url}",
    ready_fields=lambda stub: {"account_wide": stub.simulator.profile.account_wide_limits()},
    token_help="API token clients must send (default: random)",
)
build_parser = COMMAND.build_parser
main = COMMAND.main  # `stampede stub serve` wires this


if __name__ == "__main__":
    sys.exit(main())
