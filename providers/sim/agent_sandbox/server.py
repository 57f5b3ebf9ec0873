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
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import BodyPartReader, web

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
from providers.sim.core.simulator import (
    CreateRequest,
    ExecError,
    ExecTimedOut,
    NotFound,
    NotRunning,
    Rejected,
    RejectReason,
    SandboxDied,
    SandboxStatus,
    SimSandbox,
    VendorSimulator,
)
from providers.sim.core.vendor_settings import VendorSettings

log = logging.getLogger(__name__)

DEFAULT_PROFILE = "agent-sandbox-like"
NAMESPACE = "default"
WARM_POOL = "stampede-pool"
TEMPLATE = "stampede-template"
IMAGE = "python-runtime-sandbox"
CLAIM_GROUP = "extensions.agents.x-k8s.io"
SANDBOX_GROUP = "agents.x-k8s.io"
VERSION = "v1beta1"
GROUPS = frozenset({CLAIM_GROUP, SANDBOX_GROUP})
KINDS = {
    "sandboxclaims": "SandboxClaim",
    "sandboxes": "Sandbox",
    "sandboxtemplates": "SandboxTemplate",
    "sandboxwarmpools": "SandboxWarmPool",
}
POD_IP = "127.0.0.1"  # what status.podIPs names: the SDK only forwards it to the router (X-Sandbox-Pod-IP)
EXEC_TIMEOUT_S = 60.0  # the legacy runtime's limit when the request names none


@dataclass(frozen=True)
class AgentSandboxSettings(VendorSettings):
    """The local agent-sandbox: profile, speed, address, token, and its controller's shape."""

    profile: Any = DEFAULT_PROFILE
    warm_pool: int = 16  # SandboxWarmPool replicas kept warm
    reconcile_workers: int = 8  # assumed: concurrent claim reconciles (controller-runtime MaxConcurrentReconciles)
    reconcile_s: float = 0.02  # assumed: vendor seconds one claim reconcile takes (its apiserver round trips)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    """The apiserver's `Status` object for a failure."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


_REASONS = {401: "Unauthorized", 404: "NotFound", 405: "MethodNotAllowed", 409: "AlreadyExists", 500: "InternalError"}


def error(request: web.Request, code: int, message: str) -> web.Response:
    return web.json_response(status_body(code, _REASONS.get(code, "BadRequest"), message), status=code)


@dataclass
class _Watcher:
    plural: str
    namespace: str
    name: str | None
    selector: Callable[[dict[str, Any]], bool]
    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)


def label_selector(text: str | None) -> Callable[[dict[str, Any]], bool]:
    """A Kubernetes equality-based label selector (`a=b,c!=d,e,!f`) as a predicate on an object."""
    terms = [term.strip() for term in (text or "").split(",") if term.strip()]

    def matches(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for term in terms:
            if "!=" in term:
                key, value = term.split("!=", 1)
                if labels.get(key.strip()) == value.strip():
                    return False
            elif "=" in term:
                key, value = term.replace("==", "=").split("=", 1)
                if labels.get(key.strip()) != value.strip():
                    return False
            elif term.startswith("!"):
                if term[1:] in labels:
                    return False
            elif term not in labels:
                return False
        return True

    return matches


def _field_name(text: str | None) -> str | None:
    """The name a `metadata.name=X` field selector asks for (the only field selector the SDK sends)."""
    for term in (text or "").split(","):
        key, _, value = term.partition("=")
        if key.strip() == "metadata.name" and value:
            return value.strip()
    return None


class Cluster:
    """The custom objects, their watches, and the claim and warm-pool controllers over the simulator."""

    def __init__(self, sim: VendorSimulator, settings: AgentSandboxSettings) -> None:
        self.sim = sim
        self.settings = settings
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.watchers: list[_Watcher] = []
        self._rv = itertools.count(1)
        self.sandbox_of: dict[str, str] = {}  # Sandbox name -> simulator id
        self.name_of: dict[str, str] = {}  # simulator id -> Sandbox name
        self.claim_of: dict[str, str] = {}  # Sandbox name -> claim name, once adopted
        self.warm: list[str] = []  # the pool's unadopted Sandbox names, oldest first
        self.workers = asyncio.Semaphore(max(1, settings.reconcile_workers))
        self.tasks: set[asyncio.Task[None]] = set()
        self.claim_labels: dict[str, list[str]] = {}  # simulator id -> the adopting claim's labels, for truth rows
        self.waiting: collections.deque[str] = collections.deque()  # claims whose cold pod waits for the cluster
        self._pacer: asyncio.Task[None] | None = None
        sim.add_listener(self._changed)

    # objects and watches
    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def put(self, plural: str, obj: dict[str, Any], event: str) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self._rv))
        key = (plural, meta.get("namespace", NAMESPACE), meta["name"])
        if event == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        for watcher in self.watchers:
            if watcher.plural == plural and watcher.namespace == key[1] and watcher.name in (None, key[2]):
                if watcher.selector(obj):
                    watcher.queue.put_nowait({"type": event, "object": obj})
        return obj

    def new_object(self, plural: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
        group = CLAIM_GROUP if plural in ("sandboxclaims", "sandboxwarmpools", "sandboxtemplates") else SANDBOX_GROUP
        return {
            "apiVersion": f"{group}/{VERSION}",
            "kind": KINDS.get(plural, "Unknown"),
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "uid": str(uuid.uuid4()),
                "creationTimestamp": _now(),
                "generation": 1,
                **meta,
            },
            "spec": spec,
        }

    def resource_version(self) -> int:
        return next(self._rv)

    # the warm pool
    def fill_pool(self) -> None:
        """Start warm sandboxes until the pool holds its replicas (adopted ones do not count)."""
        missing = self.settings.warm_pool - len(self.warm)
        for _ in range(max(0, missing)):
            name = self._start_sandbox(None)
            if name is None:
                return
            self.warm.append(name)

    async def pool_filled(self) -> None:
        """Wait until every warm sandbox of the first fill runs (what `serve` waits for before announcing)."""
        while any(self._sim_status(name) not in (SandboxStatus.RUNNING,) for name in self.warm):
            if any(self._ended(name) for name in self.warm):
                self.warm = [name for name in self.warm if not self._ended(name)]
                self.fill_pool()
            await asyncio.sleep(0.05)

    def _start_sandbox(self, claim: str | None) -> str | None:
        """A Sandbox object and its simulator sandbox; None when the simulator refuses (retried later)."""
        if self.waiting and claim is not None:  # pods start in order: no claim overtakes the queue
            self._queue(claim)
            return None
        try:
            sb = self.sim.create(CreateRequest(image=IMAGE, labels=(f"warmpool={WARM_POOL}",), lifetime_s=float("inf")))
        except Rejected as exc:
            if exc.reason == RejectReason.RATE_LIMITED:
                if claim is not None:
                    self._queue(claim)
                else:
                    self._spawn(self._later(exc.retry_after or 1.0, self.fill_pool))
            else:
                if claim is not None:
                    self._claim_ready(claim, False, "ReconcilerError", str(exc))
                self._spawn(self._later(1.0, self.fill_pool if claim is None else lambda: self._claim_again(claim)))
            return None
        return self._register(sb)

    def _register(self, sb: SimSandbox) -> str:
        name = sb.id  # the Sandbox (and its pod) is named by the simulator's id, so truth rows join on it
        self.sandbox_of[name] = sb.id
        self.name_of[sb.id] = name
        sandbox = self.new_object(
            "sandboxes",
            name,
            {"podTemplate": {"spec": {"containers": [{"name": "sandbox", "image": IMAGE}]}}},
            labels={"agents.x-k8s.io/warm-pool": WARM_POOL},
        )
        sandbox["status"] = {"conditions": [self._condition(False, "SandboxNotReady", "pod starting")]}
        self.put("sandboxes", sandbox, "ADDED")
        return name

    def _queue(self, claim: str) -> None:
        """A claim whose pod the cluster cannot start yet: it waits its turn, the throughput paced by one task
        (the scheduler and kubelets take pods in order; nothing is refused and nobody retries in a herd)."""
        self.waiting.append(claim)
        if self._pacer is None or self._pacer.done():
            self._pacer = asyncio.get_running_loop().create_task(self._pace())
            self.tasks.add(self._pacer)
            self._pacer.add_done_callback(self.tasks.discard)

    async def _pace(self) -> None:
        while self.waiting:
            claim = self.waiting[0]
            if ("sandboxclaims", NAMESPACE, claim) not in self.objects:
                self.waiting.popleft()
                continue
            try:
                sb_id = self.sim.create(
                    CreateRequest(image=IMAGE, labels=(f"warmpool={WARM_POOL}",), lifetime_s=float("inf"))
                ).id
            except Rejected as exc:
                await self.sim.clock.sleep(exc.retry_after if exc.retry_after else 1.0)
                continue
            self.waiting.popleft()
            name = self._register(self.sim.get(sb_id))
            self.claim_of[name] = claim
            self._bind(claim, name)

    async def _later(self, vendor_s: float, then: Callable[[], None]) -> None:
        await self.sim.clock.sleep(vendor_s)
        then()

    def _sim_status(self, name: str) -> SandboxStatus | None:
        try:
            return self.sim.get(self.sandbox_of[name]).status
        except (KeyError, NotFound):
            return None

    def _ended(self, name: str) -> bool:
        return self._sim_status(name) not in (SandboxStatus.PENDING, SandboxStatus.PROVISIONING, SandboxStatus.RUNNING)

    @staticmethod
    def _condition(ready: bool, reason: str, message: str = "") -> dict[str, Any]:
        return {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": _now(),
        }

    # the claim controller
    def claim_created(self, name: str) -> None:
        self._spawn(self._reconcile(name))

    def _claim_again(self, name: str) -> None:
        if ("sandboxclaims", NAMESPACE, name) in self.objects:
            self._spawn(self._reconcile(name))

    async def _reconcile(self, name: str) -> None:
        async with self.workers:
            await self.sim.clock.sleep(self.settings.reconcile_s)
            claim = self.objects.get(("sandboxclaims", NAMESPACE, name))
            if claim is None or (claim.get("status") or {}).get("sandbox"):
                return
            pool = ((claim.get("spec") or {}).get("warmPoolRef") or {}).get("name")
            if ("sandboxwarmpools", NAMESPACE, pool) not in self.objects:
                self._claim_ready(name, False, "WarmPoolNotFound", f'SandboxWarmPool "{pool}" not found')
                return
            self.warm = [sandbox for sandbox in self.warm if not self._ended(sandbox)]
            running = [sandbox for sandbox in self.warm if self._sim_status(sandbox) == SandboxStatus.RUNNING]
            chosen = running[0] if running else (self.warm[0] if self.warm else None)
            if chosen is not None:
                self.warm.remove(chosen)
                self.fill_pool()
            else:
                chosen = self._start_sandbox(name)
                if chosen is None:
                    return
            self.claim_of[chosen] = name
            self._bind(name, chosen)

    def _bind(self, claim_name: str, sandbox_name: str) -> None:
        claim = self.objects.get(("sandboxclaims", NAMESPACE, claim_name))
        if claim is None:
            return
        labels = (claim.get("metadata") or {}).get("labels") or {}
        self.claim_labels[self.sandbox_of.get(sandbox_name, sandbox_name)] = [f"{k}={v}" for k, v in labels.items()]
        ready = self._sim_status(sandbox_name) == SandboxStatus.RUNNING
        status = dict(claim.get("status") or {})
        status["sandbox"] = {"name": sandbox_name, "podIPs": [POD_IP] if ready else []}
        claim = {**claim, "status": status}
        self.objects[("sandboxclaims", NAMESPACE, claim_name)] = claim
        if ready:
            self._claim_ready(claim_name, True, "SandboxReady")
        elif self._ended(sandbox_name):
            self._sandbox_ended(sandbox_name)
        else:
            self._claim_ready(claim_name, False, "SandboxNotReady", "sandbox pod is starting")

    def _claim_ready(self, claim_name: str, ready: bool, reason: str, message: str = "") -> None:
        claim = self.objects.get(("sandboxclaims", NAMESPACE, claim_name))
        if claim is None:
            return
        status = dict(claim.get("status") or {})
        status["conditions"] = [self._condition(ready, reason, message)]
        self.put("sandboxclaims", {**claim, "status": status}, "MODIFIED")

    def _changed(self, sb: SimSandbox) -> None:
        """The simulator's status change, onto the Sandbox object and the claim bound to it."""
        name = self.name_of.get(sb.id)
        if name is None:
            return
        sandbox = self.objects.get(("sandboxes", NAMESPACE, name))
        if sb.status == SandboxStatus.RUNNING:
            if sandbox is not None:
                status = {"conditions": [self._condition(True, "DependenciesReady")], "podIPs": [POD_IP]}
                self.put("sandboxes", {**sandbox, "status": status}, "MODIFIED")
            claim = self.claim_of.get(name)
            if claim is not None:
                self._bind(claim, name)
        elif self._ended(name):
            self._sandbox_ended(name)

    def _sandbox_ended(self, name: str) -> None:
        sb_id = self.sandbox_of.get(name)
        sandbox = self.objects.get(("sandboxes", NAMESPACE, name))
        message = "sandbox ended"
        with contextlib.suppress(NotFound):
            if sb_id is not None:
                sb = self.sim.get(sb_id)
                message = sb.error_message or sb.status.value
        if sandbox is not None:
            status = {"conditions": [self._condition(False, "PodFailed", message)]}
            self.put("sandboxes", {**sandbox, "status": status}, "MODIFIED")
        claim = self.claim_of.get(name)
        if claim is not None:
            self._claim_ready(claim, False, "PodFailed", message)

    def claim_deleted(self, claim: dict[str, Any]) -> None:
        """Deleting a claim deletes the Sandbox it adopted (the controller's owner reference)."""
        sandbox_name = ((claim.get("status") or {}).get("sandbox") or {}).get("name")
        if not sandbox_name:
            return
        self.claim_of.pop(sandbox_name, None)
        sb_id = self.sandbox_of.pop(sandbox_name, None)
        sandbox = self.objects.get(("sandboxes", NAMESPACE, sandbox_name))
        if sandbox is not None:
            self.put("sandboxes", sandbox, "DELETED")
        if sb_id is not None:
            self.name_of.pop(sb_id, None)
            with contextlib.suppress(NotFound):
                self.sim.terminate(sb_id)


CLUSTER: web.AppKey[Cluster] = web.AppKey("cluster", Cluster)


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


def _where(request: web.Request) -> tuple[str, str, str]:
    group = request.match_info["group"]
    plural = request.match_info["plural"]
    if group not in GROUPS or plural not in KINDS:
        raise web.HTTPNotFound()
    return group, request.match_info["namespace"], plural


async def create_object(request: web.Request) -> web.Response:
    cluster = request.app[CLUSTER]
    _, namespace, plural = _where(request)
    try:
        body = await request.json()
        name = body["metadata"]["name"]
    except (ValueError, KeyError, TypeError):
        return web.json_response(
            status_body(400, "BadRequest", "the body must be an object with metadata.name"), status=400
        )
    if (plural, namespace, name) in cluster.objects:
        return error(request, 409, f'{plural} "{name}" already exists')
    meta = body["metadata"]
    meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
    body.setdefault("status", {})
    obj = cluster.put(plural, body, "ADDED")
    if plural == "sandboxclaims":
        cluster.claim_created(name)
    return web.json_response(obj, status=201)


async def get_object(request: web.Request) -> web.Response:
    cluster = request.app[CLUSTER]
    _, namespace, plural = _where(request)
    name = request.match_info["name"]
    obj = cluster.objects.get((plural, namespace, name))
    if obj is None:
        return error(request, 404, f'{plural} "{name}" not found')
    return web.json_response(obj)


async def delete_object(request: web.Request) -> web.Response:
    cluster = request.app[CLUSTER]
    _, namespace, plural = _where(request)
    name = request.match_info["name"]
    obj = cluster.objects.get((plural, namespace, name))
    if obj is None:
        return error(request, 404, f'{plural} "{name}" not found')
    cluster.put(plural, obj, "DELETED")
    if plural == "sandboxclaims":
        cluster.claim_deleted(obj)
    return web.json_response(obj)


async def list_objects(request: web.Request) -> web.StreamResponse:
    cluster = request.app[CLUSTER]
    group, namespace, plural = _where(request)
    query = request.query
    name = _field_name(query.get("fieldSelector"))
    selector = label_selector(query.get("labelSelector"))
    current = [
        obj
        for (p, ns, n), obj in cluster.objects.items()
        if p == plural and ns == namespace and name in (None, n) and selector(obj)
    ]
    if (query.get("watch") or "").lower() not in ("true", "1"):
        return web.json_response(
            {
                "apiVersion": f"{group}/{VERSION}",
                "kind": KINDS[plural] + "List",
                "metadata": {"resourceVersion": str(cluster.resource_version())},
                "items": current,
            }
        )
    return await _watch(request, cluster, plural, namespace, name, selector, current)


async def _watch(
    request: web.Request,
    cluster: Cluster,
    plural: str,
    namespace: str,
    name: str | None,
    selector: Callable[[dict[str, Any]], bool],
    current: list[dict[str, Any]],
) -> web.StreamResponse:
    """A watch: the current objects newer than `resourceVersion` first (all of them from "0" or none), then every
    change, one JSON event a line, until `timeoutSeconds` or the client leaves."""
    try:
        since = int(request.query.get("resourceVersion") or 0)
        timeout = float(request.query.get("timeoutSeconds") or 1800)
    except ValueError:
        return web.json_response(
            status_body(400, "BadRequest", "resourceVersion and timeoutSeconds are numbers"), status=400
        )
    watcher = _Watcher(plural, namespace, name, selector)
    cluster.watchers.append(watcher)
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        first = [obj for obj in current if since == 0 or int(obj["metadata"]["resourceVersion"]) > since]
        for obj in first:
            await response.write(
                json.dumps({"type": "ADDED" if since == 0 else "MODIFIED", "object": obj}).encode() + b"\n"
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) > 0:
            try:
                event = await asyncio.wait_for(watcher.queue.get(), left)
            except TimeoutError:
                break
            if event is None:
                break
            await response.write(json.dumps(event).encode() + b"\n")
        await response.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        cluster.watchers.remove(watcher)
    return response


async def execute(request: web.Request) -> web.Response:
    """The router and the legacy python-runtime's `/execute`: `{command, timeout_seconds}` -> stdout, stderr,
    exit_code, timed_out."""
    cluster = request.app[CLUSTER]
    name = request.headers.get("X-Sandbox-ID", "")
    sb_id = cluster.sandbox_of.get(name)
    if sb_id is None:
        return web.json_response({"error": f"sandbox {name!r} not found"}, status=404)
    try:
        body = await request.json()
        command = str(body["command"])
        timeout = float(body.get("timeout_seconds") or EXEC_TIMEOUT_S)
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": "the body must be {command, timeout_seconds}"}, status=400)
    try:
        outcome = await cluster.sim.exec(sb_id, command, timeout_s=timeout)
    except ExecTimedOut:
        return web.json_response({"stdout": "", "stderr": "", "exit_code": -1, "timed_out": True})
    except (NotFound, NotRunning, SandboxDied) as exc:
        return web.json_response({"error": str(exc)}, status=502)
    except ExecError as exc:
        return web.json_response({"error": str(exc)}, status=503)
    return web.json_response(
        {"stdout": outcome.stdout, "stderr": outcome.stderr, "exit_code": outcome.exit_code, "timed_out": False}
    )


RUNTIME_CWD = "/app"  # the python-runtime's working directory: the SDK sends every file path relative to it


def _tree_of(request: web.Request) -> tuple[Any, web.Response | None]:
    """The file tree of the sandbox `X-Sandbox-ID` names, or the router's answer when there is none."""
    cluster = request.app[CLUSTER]
    name = request.headers.get("X-Sandbox-ID", "")
    sb_id = cluster.sandbox_of.get(name)
    if sb_id is None:
        return None, web.json_response({"error": f"sandbox {name!r} not found"}, status=404)
    try:
        return cluster.sim.tree(sb_id), None
    except (NotFound, NotRunning) as exc:
        return None, web.json_response({"error": str(exc)}, status=502)


async def upload(request: web.Request) -> web.Response:
    """`POST /upload`: one multipart `file` part whose filename is the path (relative to the runtime's cwd)."""
    tree, refused = _tree_of(request)
    if refused is not None:
        return refused
    reader = await request.multipart()
    part = await reader.next()
    if part is None or not isinstance(part, BodyPartReader) or not part.filename:
        return web.json_response({"detail": "a multipart 'file' part with a filename is required"}, status=400)
    try:
        target = tree.writable(part.filename, cwd=RUNTIME_CWD)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(await part.read(decode=False))
    except OSError as exc:
        return web.json_response({"detail": str(exc)}, status=500)
    return web.json_response({"message": f"File '{part.filename}' uploaded successfully"})


async def download(request: web.Request) -> web.StreamResponse:
    tree, refused = _tree_of(request)
    if refused is not None:
        return refused
    path = tree.host_path(request.match_info["path"], cwd=RUNTIME_CWD)
    if not path.is_file():
        return web.json_response({"detail": "File not found"}, status=404)
    return web.Response(body=path.read_bytes(), content_type="application/octet-stream")


async def exists(request: web.Request) -> web.Response:
    tree, refused = _tree_of(request)
    if refused is not None:
        return refused
    path = tree.host_path(request.match_info["path"], cwd=RUNTIME_CWD)
    return web.json_response({"path": request.match_info["path"], "exists": path.exists()})


async def listing(request: web.Request) -> web.Response:
    tree, refused = _tree_of(request)
    if refused is not None:
        return refused
    path = tree.host_path(request.match_info["path"], cwd=RUNTIME_CWD)
    if not path.is_dir():
        return web.json_response({"detail": "Directory not found"}, status=404)
    entries = []
    for entry in sorted(path.iterdir()):
        info = entry.stat()
        kind = "directory" if entry.is_dir() else "file"
        entries.append({"name": entry.name, "size": info.st_size, "type": kind, "mod_time": info.st_mtime})
    return web.json_response(entries)


def create_app(settings: AgentSandboxSettings) -> web.Application:
    profile = settings.resolved_profile()
    scale = settings.resolved_time_scale(profile)
    app = web.Application(middlewares=[_middleware], client_max_size=4 * 1024 * 1024)
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
