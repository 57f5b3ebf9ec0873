"""Modal's view of the simulator's sandboxes: ids, tags, apps, images, and waiting for state changes.

The control plane and the command router are two servers over one `VendorSimulator`; this registry is
what they share. A sandbox has a Modal id (V1 `sb-` + 22 base62, or a V2 shape), a task id (revealed
once the sandbox is scheduled for V1, at create for V2, as the SDK expects), its tags, the App it belongs
to and the bits of its definition the fronts act on (readiness probe, workdir). Waiting is event-driven:
one simulator listener wakes exactly the waiters of the sandbox that changed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from providers.sim.core.simulator import (
    NotFound,
    NotRunning,
    SandboxStatus,
    SimSandbox,
    SnapshotFailed,
    VendorSimulator,
)
from providers.sim.modal.errors import task_gone_error
from providers.sim.modal.tokens import base62_id

Predicate = Callable[[SimSandbox], bool]


def is_usable_or_ended(sb: SimSandbox) -> bool:
    return sb.status is SandboxStatus.RUNNING or not sb.active


def is_ended(sb: SimSandbox) -> bool:
    return not sb.active


def is_scheduled_or_ended(sb: SimSandbox) -> bool:
    return sb.started_at is not None or not sb.active


@dataclass(slots=True, eq=False)
class ModalSandbox:
    """One sandbox as the Modal fronts know it."""

    modal_id: str
    sim: SimSandbox
    version: int  # 1 or 2: which RPC family created it
    task_id: str
    app_id: str
    tags: Mapping[str, str]
    created_wall: float  # epoch seconds, unique and increasing (list paging relies on it)
    image_id: str
    has_readiness_probe: bool
    workdir: str | None
    timeout_secs: int
    sandbox_token: str = ""
    name: str = ""

    @property
    def scheduled(self) -> bool:
        """Placed on a worker: the moment a V1 sandbox gets its task id."""
        return self.sim.started_at is not None


@dataclass(slots=True)
class App:
    app_id: str
    name: str
    environment: str
    created_wall: float


@dataclass(slots=True)
class _Waiter:
    predicate: Predicate
    future: asyncio.Future[SimSandbox]


class ModalRegistry:
    """Sandboxes by Modal id, task id and simulator id; Apps by name; images by id."""

    def __init__(self, sim: VendorSimulator) -> None:
        self.sim = sim
        self.seed = sim.seed
        self.by_id: dict[str, ModalSandbox] = {}
        self.by_task: dict[str, ModalSandbox] = {}
        self.by_sim: dict[str, ModalSandbox] = {}
        self.apps: dict[tuple[str, str], App] = {}
        self.apps_by_id: dict[str, App] = {}
        self.images: dict[str, str] = {}  # image id -> the image name the simulator pulls
        self.snapshots: dict[str, str] = {}  # image id of a filesystem snapshot -> the simulator's snapshot id
        self.secrets: dict[str, dict[str, str]] = {}  # secret id -> its environment variables
        self._waiters: dict[str, list[_Waiter]] = {}
        self._last_created = 0.0
        sim.add_listener(self._changed)
        sim.add_prune_listener(self._pruned)

    # --- records --------------------------------------------------------------------------------------

    def add(
        self,
        sb: SimSandbox,
        *,
        version: int,
        app_id: str,
        tags: Mapping[str, str],
        image_id: str,
        has_readiness_probe: bool,
        workdir: str | None,
        timeout_secs: int,
        name: str = "",
    ) -> ModalSandbox:
        known = self.by_sim.get(sb.id)
        if known is not None:  # an idempotent retry of a create that already succeeded
            return known
        material = f"{self.seed}:{sb.id}"
        if version == 1:
            modal_id = base62_id("sb", material + ":v1", 22)
            task_id = base62_id("ta", material + ":task", 22)
        else:
            modal_id = base62_id("sb", material + ":v2", 26)
            task_id = base62_id("ta", material + ":task", 22, suffix="V")
        created = max(time.time(), self._last_created + 1e-6)
        self._last_created = created
        record = ModalSandbox(
            modal_id=modal_id,
            sim=sb,
            version=version,
            task_id=task_id,
            app_id=app_id,
            tags=dict(tags),
            created_wall=created,
            image_id=image_id,
            has_readiness_probe=has_readiness_probe,
            workdir=workdir,
            timeout_secs=timeout_secs,
            sandbox_token=base62_id("st", material + ":token", 32) if version == 2 else "",
            name=name,
        )
        self.by_id[modal_id] = record
        self.by_task[task_id] = record
        self.by_sim[sb.id] = record
        return record

    def app(self, name: str, environment: str, *, create: bool) -> App | None:
        key = (environment, name)
        found = self.apps.get(key)
        if found is None and create:
            found = App(base62_id("ap", f"{self.seed}:{environment}:{name}"), name, environment, time.time())
            self.apps[key] = found
            self.apps_by_id[found.app_id] = found
        return found

    def secret(self, env: Mapping[str, str]) -> str:
        """The id of an anonymous Secret holding `env` (same contents, same id)."""
        material = "\0".join(f"{key}={value}" for key, value in sorted(env.items()))
        secret_id = base62_id("st", f"{self.seed}:secret:{material}")
        self.secrets[secret_id] = dict(env)
        return secret_id

    def environment(self, secret_ids: Iterable[str], sources: Iterable[Any] = ()) -> dict[str, str]:
        """Environment variables from Secrets by id and from `SecretSource`s (by id or inline `env`)."""
        env: dict[str, str] = {}
        for secret_id in secret_ids:
            env.update(self.secrets.get(secret_id, {}))
        for source in sources:
            if source.secret_id:
                env.update(self.secrets.get(source.secret_id, {}))
            else:
                env.update(dict(source.env.contents))
        return env

    async def snapshot_image(self, record: ModalSandbox) -> str:
        """`snapshot_filesystem`: the sandbox's tree copied by the simulator (its profile's time, waited here),
        named as an Image a later create may start from. A sandbox that is gone answers as a gone task."""
        try:
            snapshot = self.sim.snapshot(record.sim.id)
        except (NotFound, NotRunning):
            raise task_gone_error(record.task_id, record.sim) from None
        except SnapshotFailed as exc:  # the profile's snapshot_error_prob: its time spent, then an INTERNAL status
            await self.sim.clock.sleep(exc.duration_s)
            raise GRPCError(Status.INTERNAL, exc.message) from None
        await self.sim.clock.sleep(snapshot.duration_s)
        image_id = base62_id("im", f"{self.seed}:snapshot:{snapshot.id}")
        self.images[image_id] = self.images.get(record.image_id, record.image_id)
        self.snapshots[image_id] = snapshot.id
        return image_id

    def modal_id_of(self, sim_id: str) -> str:
        record = self.by_sim.get(sim_id)
        return record.modal_id if record is not None else sim_id

    # --- waiting --------------------------------------------------------------------------------------

    async def wait_for(self, record: ModalSandbox, predicate: Predicate, timeout: float | None) -> bool:
        """Wait (real seconds; None: no limit) until `predicate(sandbox)` holds; False on timeout."""
        if predicate(record.sim):
            return True
        if timeout is not None and timeout <= 0:
            return False
        future: asyncio.Future[SimSandbox] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(predicate, future)
        waiters = self._waiters.setdefault(record.sim.id, [])
        waiters.append(waiter)
        try:
            if timeout is None:
                await future
                return True
            try:
                await asyncio.wait_for(asyncio.shield(future), timeout)
            except TimeoutError:
                return future.done()
            return True
        finally:
            remaining = self._waiters.get(record.sim.id)
            if remaining is not None:
                if waiter in remaining:
                    remaining.remove(waiter)
                if not remaining:
                    del self._waiters[record.sim.id]

    def _changed(self, sb: SimSandbox) -> None:
        waiters = self._waiters.get(sb.id)
        if not waiters:
            return
        for waiter in waiters:
            if not waiter.future.done() and waiter.predicate(sb):
                waiter.future.set_result(sb)

    def _pruned(self, sb: SimSandbox, row: dict[str, Any]) -> None:
        """The simulator forgot an ended sandbox: forget its Modal record, and keep Modal's ids in its truth row."""
        record = self.by_sim.pop(sb.id, None)
        self._waiters.pop(sb.id, None)
        if record is None:
            return
        self.by_id.pop(record.modal_id, None)
        self.by_task.pop(record.task_id, None)
        row.update(modal_fields(record, row["id"]))

    def close(self) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.future.done():
                    waiter.future.cancel()
        self._waiters.clear()


def modal_fields(record: ModalSandbox, sim_id: str) -> dict[str, Any]:
    """What the truth rows say of a sandbox in Modal's terms (`sim_id` keeps the simulator's own id)."""
    return {"sim_id": sim_id, "id": record.modal_id, "backend": f"v{record.version}", "task_id": record.task_id}
