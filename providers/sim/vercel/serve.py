"""Run the local Vercel Sandbox standalone (`stampede vercel-local serve`), or as the child process the harness
embeds (`--local`).

    python -m providers.sim.vercel.serve --profile vercel-like --seed 1 --port 0 --token T --exit-on-stdin-eof

Once listening it prints ONE JSON line to stdout: `url`, `token`, `base_url` (what the unmodified SDK takes as
`SandboxServiceOptions(base_url=...)`: it reads no environment variable for it), `env` (the credentials it reads:
`VERCEL_TOKEN`, `VERCEL_TEAM_ID`, `VERCEL_PROJECT_ID`), `provider_options` (what the vercel provider needs besides
`base_url` and `token`), `truth_url`, `profile`, `time_scale`, `seed`, `pid`; then a human line to stderr. It exits
cleanly on SIGINT/SIGTERM and, with `--exit-on-stdin-eof`, when its stdin closes. Bad input: one line on stderr,
exit status 2.
"""

from __future__ import annotations

import sys
from typing import Any

from providers.sim.core.serving.serve_cli import ServeCommand, sdk_exports
from providers.sim.vercel.server import (
    DEFAULT_PROFILE,
    PROJECT_ID,
    TEAM_ID,
    RunningVercel,
    VercelSettings,
    start_vercel,
)

PROG = "python -m providers.sim.vercel.serve"


def _ready_fields(vercel: RunningVercel) -> dict[str, Any]:
    return {
        "base_url": vercel.base_url,
        "env": vercel.sdk_environment(),
        "provider_options": {"team_id": TEAM_ID, "project_id": PROJECT_ID},
        "truth_url": vercel.url,
    }


def _where(vercel: RunningVercel) -> str:
    exports = sdk_exports(vercel.sdk_environment())
    return (
        f"on {vercel.url}; point the vercel-sandbox SDK here with SandboxServiceOptions(base_url={vercel.base_url!r})"
        f" and: {exports}"
    )


COMMAND = ServeCommand(
    prog=PROG,
    description="Serve a local Vercel Sandbox (its REST API, NDJSON command logs) over the vendor simulator.",
    title="stampede local Vercel Sandbox",
    default_profile=DEFAULT_PROFILE,
    settings=VercelSettings,
    start=start_vercel,
    ready_fields=_ready_fields,
    where=_where,
)
build_parser = COMMAND.build_parser
main = COMMAND.main  # `stampede vercel-local serve` wires this


if __name__ == "__main__":
    sys.exit(main())
