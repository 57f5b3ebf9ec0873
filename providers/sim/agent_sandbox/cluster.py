"""The local agent-sandbox's cluster: its custom objects and their watches, the warm pool, and the claim controller
over the vendor simulator (adopting a warm sandbox, else one still booting, else a cold pod queued for the
cluster's rate); and the settings that shape it."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from providers.sim.agent_sandbox.shapes import (
    CLAIM_GROUP,
    IMAGE,
    KINDS,
    NAMESPACE,
    POD_IP,
    SANDBOX_GROUP,
    VERSION,
    WARM_POOL,
    Watcher,
    now_stamp,
)
from providers.sim.core.simulator import (
    CreateRequest,
    NotFound,
    Rejected,
    RejectReason,
    SandboxStatus,
    SimSandbox,
    VendorSimulator,
)
from providers.sim.core.vendor_settings import VendorSettings

DEFAULT_PROFILE = "agent-sandbox-like"


@dataclass(frozen=True)
class AgentSandboxSettings(VendorSettings):
    """The local agent-sandbox: profile, speed, address, token, and its controller's shape."""

    profile: Any = DEFAULT_PROFILE
    warm_pool: int = 16  # SandboxWarmPool replicas kept warm
    reconcile_workers: int = 8  # assumed: concurrent claim reconciles (controller-runtime MaxConcurrentReconciles)
    reconcile_s: float = 0.02  # assumed: vendor seconds one claim reconcile takes (its apiserver round trips)


class Cluster:
    """The custom objects, their watches, and the claim and warm-pool controllers over the simulator."""

    def __init__(self, sim: VendorSimulator, settings: AgentSandboxSettings) -> None:
        self.sim = sim
        self.settings = settings
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.watchers: list[Watcher] = []
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
                "creationTimestamp": now_stamp(),
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
            "lastTransitionTime": now_stamp(),
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
