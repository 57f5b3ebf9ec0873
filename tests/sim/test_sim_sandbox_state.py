"""Sandboxes that hold state in the simulator: files, pause and resume, snapshots and forks (VirtualClock)."""

from __future__ import annotations

import asyncio
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest

from providers.sim.core.clock import LoopClock, VirtualClock
from providers.sim.core.execution.isolated_shell import IsolatedShell
from providers.sim.core.profile import PROFILES_DIR, ProfileError, load_profile, parse_profile
from providers.sim.core.sandbox_state.sandbox_tree import SandboxUser
from providers.sim.core.simulator import (
    CreateRequest,
    NotFound,
    NotRunning,
    Rejected,
    RejectReason,
    SandboxDied,
    SandboxStatus,
    SimSandbox,
    SnapshotNotFound,
    VendorSimulator,
)
from tests.docker_support import unavailable

REQ = CreateRequest(image="python:3.12", lifetime_s=600.0, user=SandboxUser())
ONE_SLOT = {"pool.initial_nodes": 1, "pool.slots_per_node": 1.0, "pool.max_nodes": 1}


def _sim(profile: str = "ideal", seed: int = 0, **overrides: Any) -> tuple[VendorSimulator, VirtualClock]:
    prof = load_profile(profile)
    if overrides:
        prof = prof.with_overrides(overrides)
    clock = VirtualClock()
    return VendorSimulator(prof, seed=seed, clock=clock), clock


def _running(sim: VendorSimulator, clock: VirtualClock, req: CreateRequest = REQ) -> SimSandbox:
    sb = sim.create(req)
    _settle(clock, sb)
    assert sb.status == SandboxStatus.RUNNING
    return sb


def _settle(clock: VirtualClock, sb: SimSandbox, limit: float = 60.0) -> None:
    """Run the clock until `sb` is RUNNING or ended (or `limit` vendor seconds pass)."""
    end = clock.now() + limit
    while sb.status not in (SandboxStatus.RUNNING, SandboxStatus.TERMINATED, SandboxStatus.ERROR):
        when = clock.next_time()
        if when is None or when > end:
            break
        clock.run_until(when)


def _write(sim: VendorSimulator, sandbox_id: str, path: str, text: str) -> None:
    target = sim.tree(sandbox_id).writable(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def _read(sim: VendorSimulator, sandbox_id: str, path: str) -> str:
    return sim.tree(sandbox_id).host_path(path).read_text()


def test_pause_frees_the_slot_and_the_quota_and_keeps_the_files() -> None:
    sim, clock = _sim(**ONE_SLOT, **{"quota.max_active": 1})
    a = _running(sim, clock)
    _write(sim, a.id, "notes.txt", "kept")
    with pytest.raises(Rejected) as full:
        sim.create(REQ)
    assert full.value.reason == RejectReason.QUOTA_EXHAUSTED
    seconds = sim.pause(a.id)
    assert seconds > 0 and a.status == SandboxStatus.PAUSED and a.node is None
    assert sim.stats()["paused"] == 1 and sim.stats()["free_slots"] == 1
    b = _running(sim, clock)  # the paused one holds neither the only slot nor the quota of one
    assert b.status == SandboxStatus.RUNNING
    assert _read(sim, a.id, "notes.txt") == "kept"  # a paused sandbox's files stay reachable


def test_resume_waits_for_a_slot_and_comes_back_running_with_its_files() -> None:
    sim, clock = _sim(**ONE_SLOT)
    seen: list[tuple[str, str]] = []
    sim.add_listener(lambda sb: seen.append((sb.id, str(sb.status))))
    a = _running(sim, clock)
    first_running = a.running_at
    _write(sim, a.id, "work/state.json", "{}")
    sim.pause(a.id)
    b = _running(sim, clock)
    clock.run_until(clock.now() + 30.0)
    assert sim.resume(a.id) is a and a.status == SandboxStatus.PENDING
    clock.run_until(clock.now() + 30.0)
    assert a.status == SandboxStatus.PENDING  # b holds the only slot
    sim.terminate(b.id)
    _settle(clock, a)
    assert a.status == SandboxStatus.RUNNING and a.node is not None
    assert _read(sim, a.id, "work/state.json") == "{}"
    assert a.running_at == first_running  # TTI stays the create's
    row = next(r for r in sim.truth() if r["id"] == a.id)
    assert row["pause_count"] == 1 and row["paused_s"] >= 30.0
    mine = [status for sid, status in seen if sid == a.id]
    assert mine[-4:] == ["PAUSED", "PENDING", "PROVISIONING", "RUNNING"]
    assert sim.stats()["pauses"] == 1 and sim.stats()["resumes"] == 1


def test_pause_and_resume_refuse_the_wrong_states() -> None:
    sim, clock = _sim()
    starting = sim.create(REQ)
    with pytest.raises(NotRunning) as e:
        sim.pause(starting.id)
    assert e.value.status == SandboxStatus.PENDING
    a = _running(sim, clock)
    with pytest.raises(NotRunning):
        sim.resume(a.id)  # running, not paused
    sim.pause(a.id)
    with pytest.raises(NotRunning) as e:
        sim.pause(a.id)
    assert e.value.status == SandboxStatus.PAUSED
    sim.terminate(a.id)
    for call in (sim.pause, sim.resume):
        with pytest.raises(NotRunning):
            call(a.id)
    with pytest.raises(NotFound):
        sim.pause("sb-nope")


def test_resume_is_refused_when_the_account_is_full() -> None:
    sim, clock = _sim(**{"quota.max_active": 1})
    a = _running(sim, clock)
    sim.pause(a.id)
    _running(sim, clock)
    with pytest.raises(Rejected) as e:
        sim.resume(a.id)
    assert e.value.reason == RejectReason.QUOTA_EXHAUSTED and a.status == SandboxStatus.PAUSED


def test_a_paused_sandbox_keeps_its_disk_but_not_its_vcpus() -> None:
    """Daytona's stopped sandboxes give back vCPU and memory to the organization's pool and keep their disk."""
    sim, clock = _sim(**{"resource_pool.cpu": 3.0, "resource_pool.memory_gb": 100.0, "resource_pool.disk_gb": 10.0})
    a = _running(sim, clock, CreateRequest(image="python:3.12", cpu=2.0, disk_gb=6.0))
    with pytest.raises(Rejected) as e:
        sim.create(CreateRequest(image="python:3.12", cpu=2.0))
    assert e.value.resource == "cpu"
    sim.pause(a.id)
    b = _running(sim, clock, CreateRequest(image="python:3.12", cpu=2.0, disk_gb=4.0))
    with pytest.raises(Rejected) as e:
        sim.create(CreateRequest(image="python:3.12", cpu=1.0, disk_gb=1.0))
    assert e.value.resource == "disk"  # 6 GiB still held by the paused one
    with pytest.raises(Rejected) as e:
        sim.resume(a.id)
    assert e.value.reason == RejectReason.QUOTA_EXHAUSTED and e.value.resource == "cpu"
    sim.terminate(b.id)
    sim.resume(a.id)
    _settle(clock, a)
    assert a.status == SandboxStatus.RUNNING
    sim.terminate(a.id)
    assert sim.admission.pool_used == pytest.approx((0.0, 0.0, 0.0))


def test_a_pause_kills_the_commands_in_flight() -> None:
    sim, clock = _sim()
    a = _running(sim, clock)
    box: list[Any] = []
    sim.exec_start(a.id, "sleep 5", timeout_s=60.0, on_done=box.append)
    sim.pause(a.id)
    assert len(box) == 1 and isinstance(box[0], SandboxDied) and box[0].status == "PAUSED"


def test_the_lifetime_stops_while_paused() -> None:
    sim, clock = _sim()
    a = _running(sim, clock, CreateRequest(image="python:3.12", lifetime_s=10.0))
    clock.run_until(a.created_at + 4.0)
    sim.pause(a.id)
    clock.run_until(clock.now() + 1000.0)
    assert a.status == SandboxStatus.PAUSED  # E2B never ends a paused sandbox on its own
    resumed_at = clock.now()
    sim.resume(a.id)
    clock.run()
    assert a.status == SandboxStatus.TIMEOUT
    assert a.ended_at == pytest.approx(resumed_at + 6.0)
    b = _running(sim, clock, CreateRequest(image="python:3.12", lifetime_s=10.0))
    sim.pause(b.id)
    sim.set_lifetime(b.id, 50.0)  # set while paused: counted from the resume
    clock.run_until(clock.now() + 100.0)
    assert b.status == SandboxStatus.PAUSED
    start = clock.now()
    sim.resume(b.id)
    clock.run()
    assert b.ended_at == pytest.approx(start + 50.0)
    b = _running(sim, clock, CreateRequest(image="python:3.12", lifetime_s=10.0))
    sim.pause(b.id)
    sim.resume(b.id, lifetime_s=100.0)  # E2B's connect(timeout=...): the lifetime restarts from the resume
    start = clock.now()
    clock.run()
    assert b.ended_at == pytest.approx(start + 100.0)


def test_a_sandbox_that_pauses_at_its_timeout_is_kept_with_its_files() -> None:
    sim, clock = _sim()
    a = _running(sim, clock, CreateRequest(image="python:3.12", lifetime_s=10.0, pause_at_timeout=True))
    _write(sim, a.id, "kept.txt", "still here")
    clock.run_until(a.created_at + 10.0)
    assert a.status == SandboxStatus.PAUSED and a.ended_at is None  # E2B's autoPause: paused, not ended
    assert sim.stats()["running"] == 0
    with pytest.raises(ValueError, match="needs a lifetime"):  # nothing left of the old lifetime to run again with
        sim.resume(a.id)
    sim.resume(a.id, lifetime_s=30.0)
    _settle(clock, a)
    assert a.status == SandboxStatus.RUNNING
    assert _read(sim, a.id, "kept.txt") == "still here"
    sim.set_lifetime(a.id, 0.0)  # E2B's set_timeout(0): the timeout is now, and it pauses again
    clock.run_until(clock.now())
    assert a.status == SandboxStatus.PAUSED and a.pause_count == 2
    b = _running(sim, clock, CreateRequest(image="python:3.12", lifetime_s=10.0))
    clock.run_until(b.created_at + 10.0)
    assert b.status == SandboxStatus.TIMEOUT  # without it, the timeout ends the sandbox


def test_a_snapshot_copies_the_files_and_later_writes_stay_apart() -> None:
    sim, clock = _sim()
    a = _running(sim, clock)
    _write(sim, a.id, "data.txt", "v1")
    snap = sim.snapshot(a.id, name="base")
    assert snap.source_sandbox_id == a.id and snap.image == a.image and snap.size_bytes >= 2 and snap.duration_s > 0
    _write(sim, a.id, "data.txt", "v2")
    b = _running(sim, clock, CreateRequest(image="python:3.12", user=SandboxUser(), from_snapshot="base"))
    assert b.from_snapshot == snap.id and _read(sim, b.id, "data.txt") == "v1"
    _write(sim, b.id, "data.txt", "b's")
    c = _running(sim, clock, CreateRequest(image="python:3.12", user=SandboxUser(), from_snapshot=snap.id))
    assert _read(sim, c.id, "data.txt") == "v1" and _read(sim, a.id, "data.txt") == "v2"
    assert [s.id for s in sim.snapshots()] == [snap.id] and sim.get_snapshot("base") == snap
    assert sim.stats()["snapshots"] == 1


def test_a_fork_copies_a_running_or_paused_sandbox() -> None:
    sim, clock = _sim()
    a = _running(sim, clock)
    _write(sim, a.id, "repo/main.py", "print(1)")
    fork = _running(sim, clock, CreateRequest(image="python:3.12", user=SandboxUser(), fork_of=a.id))
    assert fork.fork_of == a.id and _read(sim, fork.id, "repo/main.py") == "print(1)"
    _write(sim, fork.id, "repo/main.py", "print(2)")
    assert _read(sim, a.id, "repo/main.py") == "print(1)"
    sim.pause(a.id)
    second = _running(sim, clock, CreateRequest(image="python:3.12", user=SandboxUser(), fork_of=a.id))
    assert _read(sim, second.id, "repo/main.py") == "print(1)"
    sim.terminate(a.id)
    with pytest.raises(NotRunning):
        sim.create(CreateRequest(image="python:3.12", fork_of=a.id))
    with pytest.raises(NotFound):
        sim.create(CreateRequest(image="python:3.12", fork_of="sb-nope"))
    with pytest.raises(Rejected) as e:
        sim.create(CreateRequest(image="python:3.12", fork_of=fork.id, from_snapshot="x"))
    assert e.value.reason == RejectReason.INVALID


def test_delete_snapshot_forgets_it_and_its_files() -> None:
    sim, clock = _sim()
    a = _running(sim, clock)
    snap = sim.snapshot(a.id, name="gone")
    assert sim.trees.has_snapshot(snap.id)
    assert sim.delete_snapshot("gone") == snap
    assert not sim.trees.has_snapshot(snap.id)
    with pytest.raises(SnapshotNotFound):
        sim.get_snapshot(snap.id)
    with pytest.raises(SnapshotNotFound):
        sim.delete_snapshot(snap.id)
    with pytest.raises(NotFound):  # a SnapshotNotFound is a NotFound
        sim.create(CreateRequest(image="python:3.12", from_snapshot=snap.id))


def test_a_snapshot_of_a_sandbox_not_running_is_refused() -> None:
    sim, clock = _sim()
    starting = sim.create(REQ)
    with pytest.raises(NotRunning):
        sim.snapshot(starting.id)
    a = _running(sim, clock)
    sim.pause(a.id)
    assert sim.snapshot(a.id).source_sandbox_id == a.id  # a paused sandbox can be snapshotted
    sim.terminate(a.id)
    with pytest.raises(NotRunning):
        sim.snapshot(a.id)


def test_the_files_go_when_the_sandbox_ends() -> None:
    sim, clock = _sim()
    killed = _running(sim, clock)
    _write(sim, killed.id, "x", "1")
    root = sim.tree(killed.id).root
    timed_out = _running(sim, clock, CreateRequest(image="python:3.12", lifetime_s=5.0))
    timed_root = sim.tree(timed_out.id).root
    paused = _running(sim, clock)
    paused_root = sim.tree(paused.id).root
    sim.pause(paused.id)
    sim.terminate(killed.id)
    sim.terminate(paused.id)  # a paused sandbox can be killed
    clock.run()
    assert timed_out.status == SandboxStatus.TIMEOUT
    assert not root.exists() and not timed_root.exists() and not paused_root.exists()
    with pytest.raises(NotRunning):
        sim.tree(killed.id)
    assert sim.stats()["paused"] == 0


def test_close_removes_every_tree_and_snapshot() -> None:
    sim, clock = _sim()
    a = _running(sim, clock)
    _write(sim, a.id, "x", "1")
    sim.snapshot(a.id)
    base = sim.trees.base
    assert base.exists()
    sim.close()
    assert not base.exists()


def test_a_workload_that_touches_no_file_makes_no_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sim, clock = _sim()
    boxes = [sim.create(REQ) for _ in range(20)]
    clock.run_until(10.0)
    results: list[Any] = []
    for sb in boxes:
        sim.exec_start(sb.id, "echo hi", timeout_s=10.0, on_done=results.append)
    clock.run_until(20.0)
    for sb in boxes:
        sim.terminate(sb.id)
    sim.close()
    assert len(results) == 20 and list(tmp_path.iterdir()) == []


def test_a_seed_reproduces_the_pause_resume_snapshot_and_fork_times() -> None:
    def timings(seed: int) -> list[float]:
        sim, clock = _sim("e2b-like", seed=seed)
        a = _running(sim, clock)
        pause = sim.pause(a.id)
        sim.resume(a.id)
        _settle(clock, a)
        assert a.resumed_at is not None
        resume = clock.now() - a.resumed_at
        snap = sim.snapshot(a.id).duration_s
        fork = _running(sim, clock, CreateRequest(image="python:3.12", fork_of=a.id))
        assert fork.running_at is not None and fork.started_at is not None
        out = [pause, resume, snap, fork.running_at - fork.started_at]
        sim.close()
        return out

    first = timings(3)
    assert timings(3) == first
    assert timings(4) != first
    assert first[0] == pytest.approx(2.0, rel=0.8)  # e2b-like: about 4 s per GiB, a 512 MiB sandbox


def test_the_sandbox_section_is_checked_and_optional() -> None:
    data = tomllib.loads((PROFILES_DIR / "e2b-like.toml").read_text())
    for field, value, words in (
        ("commands", "sometimes", "commands must be one of modelled, real"),
        ("resume_median_s", -1.0, "resume_median_s must be >= 0"),
        ("sigma", -0.1, "sigma must be >= 0"),
        ("pause_median_s", float("inf"), "pause_median_s must be finite"),
    ):
        bad = {**data, "sandbox": {**data["sandbox"], field: value}}
        with pytest.raises(ProfileError) as e:
            parse_profile(bad, where="e2b-like")
        assert words in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ProfileError, match=r"unknown field sandbox\.pause_s"):
        parse_profile({**data, "sandbox": {"pause_s": 1.0}}, where="x")
    without = {key: value for key, value in data.items() if key != "sandbox"}
    profile = parse_profile(without, where="x")
    assert profile.sandbox.commands == "modelled"
    assert profile.sources["sandbox.resume_median_s"].startswith("assumption:")
    assert load_profile("e2b-like").with_overrides({"sandbox.commands": "real"}).sandbox.commands == "real"
    with pytest.raises(ProfileError, match="commands must be one of"):
        load_profile("e2b-like").with_overrides({"sandbox.commands": "both"})


async def test_a_pause_ends_real_commands_and_a_resume_keeps_the_files() -> None:
    """With real commands (bubblewrap, live clock): the paused sandbox's processes end, its files come back."""
    if not IsolatedShell.available():
        unavailable("bubblewrap is not installed (apt-get install bubblewrap)")
    profile = load_profile("e2b-like").with_overrides({"sandbox.commands": "real"})
    sim = VendorSimulator(profile, seed=0, clock=LoopClock(0.1))
    try:
        sb = sim.create(REQ)
        await _until_running(sb)
        written = await sim.exec(sb.id, "echo kept > notes.txt && whoami", timeout_s=60.0)
        assert written.exit_code == 0 and written.stdout == "user\n"
        box: list[Any] = []
        sim.exec_start(sb.id, "sleep 600", timeout_s=900.0, on_done=box.append)
        shell = sim.real_shell
        assert shell is not None
        for _ in range(500):
            if shell.running(sb.id):
                break
            await asyncio.sleep(0.01)
        sim.pause(sb.id)
        assert len(box) == 1 and isinstance(box[0], SandboxDied)
        assert shell.running(sb.id) == 0 and not shell.has_holder(sb.id)
        sim.resume(sb.id)
        await _until_running(sb)
        again = await sim.exec(sb.id, "cat notes.txt", timeout_s=60.0)
        assert again.stdout == "kept\n"
    finally:
        sim.close()


async def _until_running(sb: SimSandbox) -> None:
    for _ in range(1000):
        if sb.status == SandboxStatus.RUNNING:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"sandbox {sb.id} never ran: {sb.status}")
