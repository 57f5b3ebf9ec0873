"""The `agent-sandbox` provider against a real cluster running kubernetes-sigs/agent-sandbox. Skips without one.

Runs only when `KUBECONFIG` names a kubeconfig file and `AGENT_SANDBOX_WARM_POOL` names a SandboxWarmPool in it,
with the router in `AGENT_SANDBOX_ROUTER_URL` (or a Gateway's name in `AGENT_SANDBOX_GATEWAY`);
`AGENT_SANDBOX_NAMESPACE` defaults to `default`. Two claims labelled with a fresh run id, one command, one delete,
then cleanup by run label. Never runs in this repository's CI, which has no cluster.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.live_lifecycle import check_live_lifecycle

_KUBECONFIG = os.environ.get("KUBECONFIG", "")
_ROUTE = os.environ.get("AGENT_SANDBOX_ROUTER_URL") or os.environ.get("AGENT_SANDBOX_GATEWAY")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (_KUBECONFIG and Path(_KUBECONFIG).is_file() and os.environ.get("AGENT_SANDBOX_WARM_POOL") and _ROUTE),
        reason="no KUBECONFIG, AGENT_SANDBOX_WARM_POOL and router/gateway: the live agent-sandbox test skips",
    ),
]


@pytest.mark.timeout(600)
async def test_real_agent_sandbox_lifecycle_and_cleanup() -> None:
    from providers.vendors.agent_sandbox import AgentSandboxProvider

    options = {
        "kubeconfig": _KUBECONFIG,
        "warm_pool": os.environ["AGENT_SANDBOX_WARM_POOL"],
        "namespace": os.environ.get("AGENT_SANDBOX_NAMESPACE", "default"),
    }
    if os.environ.get("AGENT_SANDBOX_ROUTER_URL"):
        options["router_url"] = os.environ["AGENT_SANDBOX_ROUTER_URL"]
    else:
        options["gateway"] = os.environ["AGENT_SANDBOX_GATEWAY"]
    await check_live_lifecycle(AgentSandboxProvider.from_options(options), 300)
