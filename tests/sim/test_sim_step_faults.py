"""The simulator's failures for the new steps (`[errors] upload_error_prob`, `download_error_prob`,
`snapshot_error_prob`, `fork_error_prob`), on a virtual clock: what a user who sets one gets from the vendor model
before any front words it. Off (0, every shipped profile) nothing fails and the other draws are the same."""

from __future__ import annotations

from typing import Any

import pytest

from providers.sim.core.clock import VirtualClock
from providers.sim.core.profile import ProfileError, load_profile
from providers.sim.core.records import CreateRequest, Rejected, RejectReason, SimSandbox, SnapshotFailed
from providers.sim.core.sandbox_state.sandbox_tree import SandboxUser
from providers.sim.core.simulator import TransferRefused, VendorSimulator


def _sim(**overrides: Any) -> tuple[VendorSimulator, VirtualClock]:
    clock = VirtualClock()
    return VendorSimulator(load_profile("ideal").with_overrides(overrides), seed=0, clock=clock), clock


def _running(sim: VendorSimulator, clock: VirtualClock, **req: Any) -> SimSandbox:
    sb = sim.create(CreateRequest(image="python:3.12", user=SandboxUser(), lifetime_s=3600.0, **req))
    clock.run_until(clock.now() + 500.0)
    assert sb.status == "RUNNING"
    return sb


def test_a_failed_file_costs_half_its_time_then_fails_and_the_other_direction_still_moves() -> None:
    sim, clock = _sim(**{"errors.upload_error_prob": 1.0, "sandbox.upload_mb_s": 10.0})
    sb = _running(sim, clock)
    done: list[float] = []
    failed: list[tuple[str, float]] = []
    began = clock.now()
    sim.transfer_start(sb.id, "upload", 10_000_000, done.append, lambda f: failed.append((f.reason, clock.now())))
    clock.run_until(clock.now() + 500.0)  # 1 s whole at 10 MB/s: it fails half-way
    assert done == [] and [reason for reason, _ in failed] == ["transfer_failed"]
    assert failed[0][1] - began == pytest.approx(0.5)
    assert sim.stats()["transferred_bytes"]["upload"] == 5_000_000
    sim.transfer_start(sb.id, "download", 1000, done.append, lambda f: failed.append((f.reason, clock.now())))
    clock.run_until(clock.now() + 500.0)
    assert len(done) == 1 and len(failed) == 1  # downloads are not failed
    assert sim.stats()["steps_failed"] == {"upload": 1, "download": 0, "snapshot": 0, "fork": 0}


def test_an_unbounded_failed_file_is_refused_at_once() -> None:
    sim, clock = _sim(**{"errors.download_error_prob": 1.0})
    sb = _running(sim, clock)
    with pytest.raises(TransferRefused) as refused:
        sim.transfer_start(sb.id, "download", 4096, lambda _: None)
    assert refused.value.reason == "transfer_failed"


def test_a_failed_snapshot_keeps_nothing_and_a_failed_restore_starts_nothing() -> None:
    sim, clock = _sim(**{"errors.snapshot_error_prob": 1.0})
    sb = _running(sim, clock)
    with pytest.raises(SnapshotFailed) as failed:
        sim.snapshot(sb.id)
    assert failed.value.duration_s > 0 and sim.snapshots() == []
    sim, clock = _sim(**{"errors.fork_error_prob": 1.0})
    sb = _running(sim, clock)
    snap = sim.snapshot(sb.id)  # snapshots still work
    before = len(sim.list())
    for req in ({"from_snapshot": snap.id}, {"fork_of": sb.id}):
        with pytest.raises(Rejected) as refused:
            sim.create(CreateRequest(image="python:3.12", lifetime_s=3600.0, **req))
        assert refused.value.reason is RejectReason.TRANSIENT and refused.value.restore
    assert len(sim.list()) == before and sim.stats()["steps_failed"]["fork"] == 2
    plain = sim.create(CreateRequest(image="python:3.12", lifetime_s=3600.0))  # a plain create is not a restore
    assert plain.status == "PENDING"


def test_every_shipped_profile_has_them_off_and_a_bad_rate_is_one_line() -> None:
    for name in ("ideal", "modal-like", "prime-like", "e2b-like", "daytona-like"):
        errors = load_profile(name).errors
        rates = (errors.upload_error_prob, errors.download_error_prob, errors.snapshot_error_prob)
        assert rates == (0.0, 0.0, 0.0) and errors.fork_error_prob == 0.0
    with pytest.raises(ProfileError, match="upload_error_prob must be a probability"):
        load_profile("ideal").with_overrides({"errors.upload_error_prob": "1.5"})
