"""Baseline: Kubernetes agent-sandbox's SDK alone (`k8s_agent_sandbox.AsyncSandboxClient`), N lifecycles in flight.

    KUBECONFIG=FILE AGENT_SANDBOX_ROUTER_URL=URL python bench/baselines/sdk_agent_sandbox.py \
        --concurrency 64 --seconds 30 --out r.json

One `AsyncSandboxClient` on the router (`SandboxDirectConnectionConfig`), over one `kubernetes_asyncio` `ApiClient`
loaded from the kubeconfig with its pool widened to 1000 (`connection_pool_maxsize`, the client's own setting; its
100 would queue a 960-wide loop in the client: every create holds a connection for its claim watch). A lifecycle:
`create_sandbox(pool)` (answers once the claim is bound and Ready: the SDK's own watch) -> `commands.run("true")`
-> `terminate`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from k8s_agent_sandbox import AsyncSandboxClient
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdk_driver import main

WARM_POOL = os.environ.get("AGENT_SANDBOX_WARM_POOL", "stampede-pool")  # the local plane's


@asynccontextmanager
async def open_client() -> AsyncIterator[AsyncSandboxClient]:
    configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = 1000
    api = k8s_client.ApiClient(configuration)
    connection = SandboxDirectConnectionConfig(api_url=os.environ["AGENT_SANDBOX_ROUTER_URL"])
    client = AsyncSandboxClient(connection_config=connection, cleanup=False, api_client=api)
    try:
        yield client
    finally:
        await client.close()


async def lifecycle(client: AsyncSandboxClient, index: int) -> tuple[str, float]:
    started = time.monotonic()
    sandbox = await client.create_sandbox(WARM_POOL, namespace="default", labels={"bench": "bare"})
    try:
        await sandbox.commands.run("true")
        return sandbox.sandbox_id, time.monotonic() - started
    finally:
        await sandbox.terminate()


if __name__ == "__main__":
    main(open_client, lifecycle, __doc__ or "")
