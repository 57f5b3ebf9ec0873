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

import sys
from typing import Any

from providers.sim.core.serving.serve_cli import ServeCommand, sdk_exports
from providers.sim.e2b.server import DEFAULT_PROFILE, E2BSettings, RunningE2B, start_e2b

PROG = "python -m providers.sim.e2b.serve"


def _ready_fields(e2b: RunningE2B) -> dict[str, Any]:
    return {
        "env": e2b.sdk_environment(),
        "provider_options": {"sandbox_url": e2b.url},
        "truth_url": e2b.url,
    }


def _where(e2b: RunningE2B) -> str:
    exports = sdk_exports(e2b.sdk_environment())
    return f"on {e2b.url}; point the e2b SDK here with: {exports}"


COMMAND = ServeCommand(
    prog=PROG,
    description="Serve a local E2B (REST control plane + envd) over the vendor simulator.",
    title="stampede local E2B",
    default_profile=DEFAULT_PROFILE,
    settings=E2BSettings,
    start=start_e2b,
    ready_fields=_ready_fields,
    where=_where,
)
build_parser = COMMAND.build_parser
main = COMMAND.main  # `stampede e2b-local serve` wires this


if __name__ == "__main__":
    sys.exit(main())
