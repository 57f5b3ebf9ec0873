"""Run the local agent-sandbox standalone (`stampede agent-sandbox-local serve`), or as the harness's child (`--local`).

    python -m providers.sim.agent_sandbox.serve --profile agent-sandbox-like --seed 1 --port 0 --warm-pool 16

Once listening, its warm pool running, it prints ONE JSON line to stdout: `url` (the Kubernetes API and the
sandbox router, one server), `token`, `env` (what a user's own script needs for the unmodified k8s-agent-sandbox
SDK: `KUBECONFIG`, the kubeconfig file it wrote, and `AGENT_SANDBOX_ROUTER_URL`, what
`SandboxDirectConnectionConfig(api_url=...)` names), `provider_options`, `truth_url`, `profile`, `time_scale`,
`seed`, `pid`; then a human line to stderr. Claims name the warm pool `stampede-pool`; its size is `--warm-pool`
(or `STAMPEDE_AGENT_SANDBOX_WARM_POOL`, which is how a `--local` run sizes it), filled before the ready line.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from foundation.cli_help import set_env_var
from foundation.converters import integer
from foundation.errors import UsageError
from providers.sim.agent_sandbox.server import (
    DEFAULT_PROFILE,
    WARM_POOL,
    AgentSandboxSettings,
    RunningAgentSandbox,
    start_agent_sandbox,
)
from providers.sim.core.serving.serve_cli import ServeCommand, sdk_exports

PROG = "python -m providers.sim.agent_sandbox.serve"
DEFAULT_WARM_POOL = AgentSandboxSettings.warm_pool
WARM_POOL_ENV = "STAMPEDE_AGENT_SANDBOX_WARM_POOL"  # how `--local` (which passes only the common flags) sizes it


def _more_arguments(parser: argparse.ArgumentParser) -> None:
    action = parser.add_argument(
        "--warm-pool",
        type=integer,
        default=None,
        help=f"SandboxWarmPool replicas kept running (default {DEFAULT_WARM_POOL}); claims beyond it start cold",
    )
    set_env_var(action, WARM_POOL_ENV)


def _more_settings(args: argparse.Namespace) -> dict[str, Any]:
    size = args.warm_pool
    if size is None:
        raw = os.environ.get(WARM_POOL_ENV, "").strip()
        try:
            size = int(raw) if raw else DEFAULT_WARM_POOL
        except ValueError:
            raise UsageError(f"{WARM_POOL_ENV} must be a whole number, got {raw!r}") from None
    if size < 0:
        raise UsageError(f"--warm-pool must be >= 0, got {size}")
    return {"warm_pool": size}


def _ready_fields(front: RunningAgentSandbox) -> dict[str, Any]:
    return {
        "env": front.sdk_environment(),
        "provider_options": {"kubeconfig": front.kubeconfig, "router_url": front.router_url, "warm_pool": WARM_POOL},
        "truth_url": front.url,
    }


def _where(front: RunningAgentSandbox) -> str:
    exports = sdk_exports(front.sdk_environment())
    return f"on {front.url}; point k8s-agent-sandbox here with: {exports} (warm pool {WARM_POOL!r})"


COMMAND = ServeCommand(
    prog=PROG,
    description="Serve a local Kubernetes agent-sandbox (custom resources, watches, warm pool, router).",
    title="stampede local agent-sandbox",
    default_profile=DEFAULT_PROFILE,
    settings=AgentSandboxSettings,
    start=start_agent_sandbox,
    ready_fields=_ready_fields,
    where=_where,
    more_arguments=_more_arguments,
    more_settings=_more_settings,
)
build_parser = COMMAND.build_parser
main = COMMAND.main  # `stampede agent-sandbox-local serve` wires this


if __name__ == "__main__":
    sys.exit(main())
