"""Run the local Runloop standalone, or as the child process the harness embeds (`--provider runloop --local`).

    python -m providers.sim.runloop.serve --profile runloop-like --seed 1 --port 0 --exit-on-stdin-eof

Once listening it prints ONE JSON line to stdout: `url` (what `RUNLOOP_BASE_URL`, or the runloop provider's
`base_url`, must name; it also serves `/api/v1/_stampede/truth` with `Authorization: Bearer <token>`), `token`, `env`
(the exact variables a user's own script needs: `RUNLOOP_BASE_URL`, `RUNLOOP_API_KEY`), `profile`, `time_scale`,
`seed`, `pid`; then a human line to stderr. Bad input: one line on stderr, exit status 2.
"""

from __future__ import annotations

import sys
from typing import Any

from providers.sim.core.serving.serve_cli import ServeCommand
from providers.sim.runloop.server import DEFAULT_PROFILE, RunloopSettings, RunningRunloop, start_runloop

PROG = "python -m providers.sim.runloop.serve"


def _ready_fields(runloop: RunningRunloop) -> dict[str, Any]:
    return {
        "truth_url": runloop.url,
        "env": {"RUNLOOP_BASE_URL": runloop.url, "RUNLOOP_API_KEY": runloop.token},
    }


COMMAND = ServeCommand(
    prog=PROG,
    description="Serve a local Runloop API (devboxes, executions, files, snapshots) over the simulator.",
    title="stampede local Runloop",
    default_profile=DEFAULT_PROFILE,
    settings=RunloopSettings,
    start=start_runloop,
    ready_fields=_ready_fields,
    where=lambda runloop: f"API {runloop.url} (RUNLOOP_BASE_URL)",
)
build_parser = COMMAND.build_parser
main = COMMAND.main  # `stampede runloop-local serve` wires this


if __name__ == "__main__":
    sys.exit(main())
