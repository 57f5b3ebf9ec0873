"""The local agent-sandbox: a Kubernetes API for its custom resources and the sandbox router, on one port.

k8s-agent-sandbox 1.0.8 reaches a cluster through the `kubernetes` client (a kubeconfig) and a sandbox through
the sandbox router (`SandboxDirectConnectionConfig(api_url=...)`, `X-Sandbox-ID` naming the sandbox). Both are
served here, over the vendor simulator:

- `/apis/{group}/{version}/namespaces/{ns}/{plural}[/{name}]`: create, get, list (label and `metadata.name`
  field selectors), delete, and `?watch=true` (chunked newline-delimited watch events, from a resourceVersion,
  closed after `timeoutSeconds`) for any plural under the agents groups. Startup makes one SandboxTemplate and
  one SandboxWarmPool (`WARM_POOL`) in `default`.
- the claim controller: a SandboxClaim is reconciled by `reconcile_workers` workers, `reconcile_s` vendor seconds
  each (controller-runtime's queue, the apiserver round trips). It adopts a warm sandbox (Ready at once: no boot),
  else one of the pool's still booting, else starts one cold through the simulator (its rate bucket, pipeline
  congestion and deadline). Each adoption asks the simulator for a replacement warm sandbox. A cold start the
  simulator refuses for its create rate is retried after the refusal's wait, as a controller requeues; any other
  refusal leaves the claim `Ready=False` (`ReconcilerError`, transient), so the SDK waits out its own timeout.
- the router: the legacy python-runtime's `POST /execute`, `POST /upload`, `GET /download|exists|list/{path}` (paths
  relative to its working directory `/app`, on the sandbox's own file tree), the sandbox named by `X-Sandbox-ID`.

Requests without `Authorization: Bearer <token>` get the apiserver's 401 Status.

This module is the application, auth and the kubeconfig; the parts sit by job: `cluster.py` (objects, watches,
controllers), `apiserver.py` (the Kubernetes routes), `router.py` (the sandbox router), `shapes.py` (the wire).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from aiohttp import web

from providers.sim.agent_sandbox.apiserver import create_object, delete_object, get_object, list_objects
from providers.sim.agent_sandbox.cluster import CLUSTER, DEFAULT_PROFILE, AgentSandboxSettings, Cluster
from providers.sim.agent_sandbox.router import download, execute, exists, listing, upload
from providers.sim.agent_sandbox.shapes import IMAGE, TEMPLATE, WARM_POOL, error
from providers.sim.core.clock import LoopClock
from providers.sim.core.serving.bearer import bearer_matches
from providers.sim.core.serving.listening import (
    SIMULATOR,
    RunningApp,
    http_url,
    listen,
    stampede_stats,
    vendor_middleware,
)
from providers.sim.core.simulator import VendorSimulator

__all__ = [
    "DEFAULT_PROFILE",
    "WARM_POOL",
    "AgentSandboxSettings",
    "RunningAgentSandbox",
    "create_app",
    "start_agent_sandbox",
    "write_kubeconfig",
]


async def truth(request: web.Request) -> web.Response:
    """`GET /api/v1/_stampede/truth`: the simulator's rows, each carrying the labels of the claim that adopted it
    (a warm sandbox was started before any claim, so the simulator's own labels name only its pool)."""
    cluster = request.app[CLUSTER]
    rows = cluster.sim.truth()
    for row in rows:
        extra = cluster.claim_labels.get(str(row.get("id")))
        if extra:
            row["labels"] = [*row.get("labels", []), *extra]
    return web.json_response({**cluster.sim.facts(), "sandboxes": rows})


def _authorize(request: web.Request) -> web.Response | None:
    if not request.path.startswith(("/apis/", "/api/")):
        return None  # the router is the cluster's own service: it asks for no credentials
    if not bearer_matches(request.headers.get("Authorization"), request.app[TOKEN]):
        return error(request, 401, "Unauthorized")
    return None


TOKEN: web.AppKey[str] = web.AppKey("token", str)
_middleware = vendor_middleware(error, _authorize, front="local agent-sandbox")


def create_app(settings: AgentSandboxSettings) -> web.Application:
    profile = settings.resolved_profile()
    scale = settings.resolved_time_scale(profile)
    # a repository uploaded as one archive runs to tens of MB (swe-task: ~20 MB); 4 MiB refused it with a 413
    app = web.Application(middlewares=[_middleware], client_max_size=256 * 1024 * 1024)
    app[TOKEN] = settings.token

    async def on_startup(app: web.Application) -> None:
        clock = LoopClock(scale)
        clock.start()
        sim = VendorSimulator(profile, seed=settings.seed, clock=clock)
        cluster = Cluster(sim, settings)
        app[SIMULATOR] = sim
        app[CLUSTER] = cluster
        cluster.put(
            "sandboxtemplates",
            cluster.new_object(
                "sandboxtemplates", TEMPLATE, {"podTemplate": {"spec": {"containers": [{"image": IMAGE}]}}}
            ),
            "ADDED",
        )
        pool_spec = {"replicas": settings.warm_pool, "sandboxTemplateRef": {"name": TEMPLATE}}
        cluster.put("sandboxwarmpools", cluster.new_object("sandboxwarmpools", WARM_POOL, pool_spec), "ADDED")
        cluster.fill_pool()

    async def on_shutdown(app: web.Application) -> None:
        if CLUSTER in app:
            for watcher in app[CLUSTER].watchers:
                watcher.queue.put_nowait(None)

    async def on_cleanup(app: web.Application) -> None:
        if CLUSTER in app:
            for task in list(app[CLUSTER].tasks):
                task.cancel()
            app[SIMULATOR].close()

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    app.on_cleanup.append(on_cleanup)
    base = "/apis/{group}/{version}/namespaces/{namespace}/{plural}"
    app.router.add_post(base, create_object)
    app.router.add_get(base, list_objects)
    app.router.add_get(base + "/{name}", get_object)
    app.router.add_delete(base + "/{name}", delete_object)
    app.router.add_post("/execute", execute)
    app.router.add_post("/upload", upload)
    app.router.add_get("/download/{path:.*}", download)
    app.router.add_get("/exists/{path:.*}", exists)
    app.router.add_get("/list/{path:.*}", listing)
    app.router.add_get("/api/v1/_stampede/truth", truth)  # where the harness reads every front's truth
    app.router.add_get("/api/v1/_stampede/stats", stampede_stats)
    return app


KUBECONFIG_TEMPLATE = """apiVersion: v1
kind: Config
clusters:
- name: stampede-local
  cluster:
    server: {url}
contexts:
- name: stampede-local
  context:
    cluster: stampede-local
    user: stampede
    namespace: default
current-context: stampede-local
users:
- name: stampede
  user:
    token: {token}
"""


@dataclass
class RunningAgentSandbox(RunningApp):
    """A local agent-sandbox listening on a port of this loop; `kubeconfig` is the file naming it."""

    kubeconfig: str = ""

    @property
    def router_url(self) -> str:
        """What `SandboxDirectConnectionConfig(api_url=...)` names: the router, on the same port."""
        return self.url

    def sdk_environment(self) -> dict[str, str]:
        return {"KUBECONFIG": self.kubeconfig, "AGENT_SANDBOX_ROUTER_URL": self.router_url}

    async def close(self) -> None:
        """Stop listening and remove the kubeconfig it wrote (it holds the token)."""
        try:
            await super().close()
        finally:
            if self.kubeconfig:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.kubeconfig)


def write_kubeconfig(url: str, token: str, path: str | None = None) -> str:
    """A kubeconfig naming this server and token (a temporary file unless `path`); returns its path."""
    import tempfile

    if path is None:
        handle, path = tempfile.mkstemp(prefix="stampede-agent-sandbox-", suffix=".kubeconfig")
        with open(handle, "w", encoding="utf-8") as out:
            out.write(KUBECONFIG_TEMPLATE.format(url=url, token=token))
    else:
        with open(path, "w", encoding="utf-8") as out:
            out.write(KUBECONFIG_TEMPLATE.format(url=url, token=token))
    return path


async def start_agent_sandbox(settings: AgentSandboxSettings | None = None) -> RunningAgentSandbox:
    """Start it on the running loop (tests, `serve`), its warm pool filled; port 0 picks a free port."""
    settings = settings or AgentSandboxSettings()
    app = create_app(settings)
    runner, port = await listen(app, settings.host, settings.port)
    url = http_url(settings.host, port)
    try:
        await app[CLUSTER].pool_filled()
    except BaseException:
        await runner.cleanup()
        raise
    return RunningAgentSandbox(
        url=url,
        port=port,
        token=settings.token,
        app=app,
        runner=runner,
        kubeconfig=write_kubeconfig(url, settings.token),
    )
