"""Snapshots and forks: a sandbox's files copied, kept by id (and name), and a new sandbox started from the copy.

A snapshot copies the sandbox's tree when it is asked for (the vendor's "snapshotting" pause is its
`duration_s`, drawn from the profile's `sandbox.snapshot_median_s`: the front waits it before answering), so
later writes in the source never reach it. A create with `from_snapshot` starts with a copy of the snapshot and
boots as any create does (on Daytona and E2B a snapshot is what a sandbox boots from); a create with `fork_of`
starts with a copy of a running or paused sandbox's files and boots in `sandbox.fork_median_s`. Both grow with
size: a snapshot's median is `snapshot_median_s + snapshot_per_gib_s x GiB of files`, a fork's `fork_median_s +
fork_per_gib_s x GiB of the source's files` (E2B's resume -> fork -> pause 2-4 s and Morph's < 250 ms a branch are
the public fixed parts; no vendor publishes a per-GiB figure). Copies are made only where files exist: a fork of a
sandbox nobody wrote to gets its tree on first use, like any other.

Names: a snapshot may carry a name; `get`/`delete` take an id or a name (the newest snapshot of that name).

Failures (`[errors]`, seeded draws): `snapshot_error_prob` fails a snapshot after its drawn time (SnapshotFailed,
nothing kept); `fork_error_prob` fails a create from a snapshot or fork source at once (the vendor could not restore
it: a TRANSIENT rejection, which every front already answers as its create's server error).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Protocol

from providers.sim.core.clock import SimClock
from providers.sim.core.draws import Stream
from providers.sim.core.profile import Profile
from providers.sim.core.records import (
    _ENDED,
    _PAUSED,
    _RUNNING,
    CreateRequest,
    NotRunning,
    Rejected,
    RejectReason,
    SimSandbox,
    SimSnapshot,
    SnapshotFailed,
    SnapshotNotFound,
)
from providers.sim.core.sandbox_state.sandbox_tree import SandboxTrees, SandboxUser


class SnapshotHost(Protocol):
    """What snapshots need of the simulator (the simulator is one; no import of it here)."""

    profile: Profile
    seed: int
    clock: SimClock

    @property
    def trees(self) -> SandboxTrees: ...

    def get(self, sandbox_id: str) -> SimSandbox: ...


def user_of(sb: SimSandbox) -> SandboxUser:
    """Who a sandbox's commands run as (root unless the create named a user)."""
    return sb.user if sb.user is not None else SandboxUser.root()


class Snapshots:
    """One simulator's snapshots, in the order taken."""

    def __init__(self, host: SnapshotHost, id_nonce: str = "") -> None:
        self.host = host
        self._nonce = id_nonce
        self._by_id: dict[str, SimSnapshot] = {}
        self._taken = 0
        self._starts = 0  # creates from a snapshot or fork source: the fork failure's draw index
        self.failed = {"snapshot": 0, "fork": 0}

    def __len__(self) -> int:
        return len(self._by_id)

    def take(self, sandbox_id: str, name: str | None = None) -> SimSnapshot:
        """Copy a RUNNING or PAUSED sandbox's files now. Raises NotFound, NotRunning (starting or ended), or
        SnapshotFailed (the profile's `snapshot_error_prob`)."""
        host = self.host
        sb = host.get(sandbox_id)
        if sb._phase not in (_RUNNING, _PAUSED):
            raise NotRunning(sb.id, sb.status, sb.error_type, sb.error_message)
        k = self._taken
        self._taken += 1
        if Stream(host.seed, "snapshot_fault", k).chance(host.profile.errors.snapshot_error_prob):
            self.failed["snapshot"] += 1
            spec = host.profile.sandbox
            raise SnapshotFailed(sb.id, Stream(host.seed, "snapshot", k).lognormal(spec.snapshot_median_s, spec.sigma))
        digest = hashlib.blake2b(f"{host.seed}:snapshot:{k}{self._nonce}".encode(), digest_size=12).hexdigest()
        snapshot_id = f"snap{digest}"
        root = host.trees.save(sb.id, snapshot_id, user_of(sb))
        spec = host.profile.sandbox
        size = _size_of(root)
        median = spec.snapshot_median_s + spec.snapshot_per_gib_s * size / GIB
        snap = SimSnapshot(
            id=snapshot_id,
            name=name or snapshot_id,
            source_sandbox_id=sb.id,
            image=sb.image,
            created_at=host.clock.now(),
            size_bytes=size,
            duration_s=Stream(host.seed, "snapshot", k).lognormal(median, spec.sigma),
        )
        self._by_id[snapshot_id] = snap
        return snap

    def all(self) -> list[SimSnapshot]:
        return list(self._by_id.values())

    def get(self, id_or_name: str) -> SimSnapshot:
        """A snapshot by id, else the newest of that name; SnapshotNotFound when none."""
        snap = self._by_id.get(id_or_name)
        if snap is not None:
            return snap
        for snap in reversed(self._by_id.values()):
            if snap.name == id_or_name:
                return snap
        raise SnapshotNotFound(id_or_name)

    def delete(self, id_or_name: str) -> SimSnapshot:
        """Forget a snapshot and its files (sandboxes started from it keep their own copies)."""
        snap = self.get(id_or_name)
        del self._by_id[snap.id]
        self.host.trees.drop_snapshot(snap.id)
        return snap

    def check_source(self, req: CreateRequest) -> None:
        """Before a create is admitted: its snapshot exists (SnapshotNotFound), its fork source is known (NotFound)
        and not ended (NotRunning); both at once is an INVALID request."""
        if req.from_snapshot is not None and req.fork_of is not None:
            raise Rejected(RejectReason.INVALID, "a sandbox starts from a snapshot or a fork, not both")
        if req.from_snapshot is not None:
            self.get(req.from_snapshot)
        if req.fork_of is not None:
            source = self.host.get(req.fork_of)
            if source._phase == _ENDED:
                raise NotRunning(source.id, source.status, source.error_type, source.error_message)
        k = self._starts
        self._starts += 1
        if Stream(self.host.seed, "fork_fault", k).chance(self.host.profile.errors.fork_error_prob):
            self.failed["fork"] += 1
            what = f"snapshot {req.from_snapshot}" if req.from_snapshot is not None else f"sandbox {req.fork_of}"
            message = f"Internal error while restoring {what}: the sandbox did not start"
            raise Rejected(RejectReason.TRANSIENT, message, restore=True)

    def seed_tree(self, sb: SimSandbox, req: CreateRequest) -> None:
        """An accepted sandbox's files: a copy of its snapshot or of its fork source (nothing for a plain create)."""
        if req.from_snapshot is not None:
            snap = self.get(req.from_snapshot)
            sb.from_snapshot = snap.id
            self.host.trees.restore(snap.id, sb.id, user_of(sb))
        elif req.fork_of is not None:
            sb.fork_of = req.fork_of
            trees = self.host.trees
            if req.fork_of in trees:
                sb.state_bytes = _size_of(trees.copy(req.fork_of, sb.id, user_of(sb)).root)

    def close(self) -> None:
        self._by_id.clear()


GIB = float(1 << 30)


def _size_of(root: Path) -> int:
    """Bytes of the regular files under `root` (what the vendor would bill as the snapshot's size)."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            total += st.st_size
    return total
