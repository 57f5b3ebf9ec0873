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

import sys
from typing import Any

from providers.sim.core.serving.serve_cli import ServeCommand
from providers.sim.daytona.server import DEFAULT_PROFILE, DaytonaSettings, RunningDaytona, start_daytona
from providers.sim.daytona.shapes import REGION

PROG = "python -m providers.sim.daytona.serve"


def _ready_fields(daytona: RunningDaytona) -> dict[str, Any]:
    return {
        "url": daytona.api_url,
        "toolbox_url": daytona.toolbox_url,
        "truth_url": daytona.url,
        "env": {"DAYTONA_API_URL": daytona.api_url, "DAYTONA_API_KEY": daytona.token, "DAYTONA_TARGET": REGION},
    }


COMMAND = ServeCommand(
    prog=PROG,
    description="Serve a local Daytona API (REST, toolbox, events) over the simulator.",
    title="stampede local Daytona",
    default_profile=DEFAULT_PROFILE,
    settings=DaytonaSettings,
    start=start_daytona,
    ready_fields=_ready_fields,
    where=lambda daytona: f"API {daytona.api_url} (DAYTONA_API_URL), toolbox {daytona.toolbox_url}",
)
build_parser = COMMAND.build_parser
main = COMMAND.main  # `stampede daytona-local serve` wires this


if __name__ == "__main__":
    sys.exit(main())
