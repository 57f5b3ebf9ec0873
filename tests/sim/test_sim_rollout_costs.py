"""What RL rollout steps cost on a simulated vendor beyond create and exec (issue 30): files in and out at a bandwidth
with the vendors' caps, snapshots and forks that grow with size, a fixed hold on every command (VirtualClock)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

from providers.sim.core.clock import LoopClock, VirtualClock
from providers.sim.core.execution.isolated_shell import IsolatedShell
from providers.sim.core.profile import load_profile
from providers.sim.core.records import CreateRequest, ExecOutcome, SimSandbox
from providers.sim.core.sandbox_state.sandbox_tree import SandboxUser
from providers.sim.core.simulator import NotRunning, TransferRefused, VendorSimulator

MIB = 1 << 20


def _sim(**overrides: Any) -> tuple[VendorSimulator, VirtualClock]:
    clock = VirtualClock()
    return VendorSimulator(load_profile("ideal").with_overrides(overrides), seed=0, clock=clock), clock


def _settle(clock: VirtualClock) -> None:
    """Run what is due in the next 500 vendor seconds (the sandboxes' 3600 s lifetimes stay ahead)."""
    clock.run_until(clock.now() + 500.0)


def _running(sim: VendorSimulator, clock: VirtualClock, **req: Any) -> SimSandbox:
    sb = sim.create(CreateRequest(image="python:3.12", user=SandboxUser(), lifetime_s=3600.0, **req))
    _settle(clock)
    assert sb.status == "RUNNING"
    return sb


def _transfer(sim: VendorSimulator, sb: SimSandbox, direction: str, size: int, out: list[float]) -> None:
    sim.transfer_start(sb.id, direction, size, out.append)


def test_a_file_takes_its_size_over_the_sandboxs_bandwidth() -> None:
    sim, clock = _sim(**{"sandbox.upload_mb_s": 10.0, "sandbox.download_mb_s": 50.0})
    sb = _running(sim, clock)
    took: list[float] = []
    for size in (10_000_000, 40_000_000):  # 10 MB and 40 MB up: 1 s and 4 s at 10 MB/s
        _transfer(sim, sb, "upload", size, took)
        _settle(clock)
    _transfer(sim, sb, "download", 100_000_000, took)  # 100 MB down at 50 MB/s
    _settle(clock)
    assert took == pytest.approx([1.0, 4.0, 2.0])
    assert sim.stats()["transferred_bytes"] == {"upload": 50_000_000, "download": 100_000_000}


def test_files_at_once_share_the_sandbox_and_the_account() -> None:
    sim, clock = _sim(**{"sandbox.upload_mb_s": 10.0})
    sb = _running(sim, clock)
    took: list[float] = []
    _transfer(sim, sb, "upload", 10_000_000, took)
    _transfer(sim, sb, "upload", 10_000_000, took)
    _settle(clock)
    assert took == pytest.approx([2.0, 2.0])  # two files share the sandbox's 10 MB/s
    sim, clock = _sim(**{"sandbox.upload_mb_s": 10.0, "sandbox.account_transfer_mb_s": 10.0})
    a, b = _running(sim, clock), _running(sim, clock)
    took = []
    _transfer(sim, a, "upload", 10_000_000, took)
    _transfer(sim, b, "upload", 10_000_000, took)
    _settle(clock)
    assert took == pytest.approx([2.0, 2.0])  # two sandboxes share the account's 10 MB/s


def test_the_vendors_caps_refuse_a_file_too_large_and_one_transfer_too_many() -> None:
    sim, clock = _sim(
        **{"sandbox.upload_mb_s": 10.0, "sandbox.max_file_mib": 100.0, "sandbox.max_concurrent_transfers": 4}
    )
    sb = _running(sim, clock)
    took: list[float] = []
    with pytest.raises(TransferRefused, match="100 MiB limit") as too_big:
        _transfer(sim, sb, "upload", 100 * MIB + 1, took)
    assert too_big.value.reason == "file_too_large" and too_big.value.limit == 100.0
    for _ in range(4):
        _transfer(sim, sb, "upload", MIB, took)
    with pytest.raises(TransferRefused, match="limit 4") as too_many:
        _transfer(sim, sb, "download", MIB, took)
    assert too_many.value.reason == "too_many_transfers"
    _settle(clock)
    _transfer(sim, sb, "download", MIB, took)  # the four arrived: room again
    _settle(clock)
    assert len(took) == 5
    assert sim.stats()["transfers_refused"] == {"file_too_large": 1, "too_many_transfers": 1}
    sim.terminate(sb.id)
    with pytest.raises(NotRunning):
        _transfer(sim, sb, "upload", 1, took)


def test_without_bandwidths_a_transfer_takes_no_time_and_no_timer() -> None:
    sim, clock = _sim()
    sb = _running(sim, clock)
    took: list[float] = []
    _transfer(sim, sb, "upload", 10**9, took)
    assert took == [0.0]  # answered at once, before the clock moved


def test_a_fork_boots_and_a_snapshot_takes_longer_by_the_gib_of_files() -> None:
    per_gib = {"sandbox.sigma": 0.0, "sandbox.fork_per_gib_s": 1024.0, "sandbox.snapshot_per_gib_s": 2048.0}
    sim, clock = _sim(**per_gib)  # 1 s of fork boot and 2 s of snapshot a MiB of files
    empty, full = _running(sim, clock), _running(sim, clock)
    sim.tree(full.id).writable("/home/user/blob").write_bytes(b"x" * (3 * MIB))
    forks = [_running(sim, clock, fork_of=source.id) for source in (empty, full)]
    boots = [f.running_at - f.started_at for f in forks if f.running_at is not None and f.started_at is not None]
    assert boots[0] == pytest.approx(1.0, abs=0.01)  # the fixed fork_median_s (the profile's default)
    assert boots[1] - boots[0] == pytest.approx(3.0, abs=0.01)
    snaps = [sim.snapshot(source.id) for source in (empty, full)]
    assert snaps[1].duration_s - snaps[0].duration_s == pytest.approx(6.0, abs=0.02)


def _answered(
    clock: VirtualClock, out: list[tuple[float, ExecOutcome | BaseException]], result: ExecOutcome | BaseException
) -> None:
    out.append((clock.now(), result))


def test_every_command_answer_is_held_the_profiles_fixed_overhead_exactly() -> None:
    answers: dict[float, list[float]] = {}
    for hold in (0.0, 1.0):
        sim, clock = _sim(**{"sandbox.exec_overhead_s": hold, "exec.overhead_sigma": 0.0})
        sb = _running(sim, clock)
        out: list[tuple[float, ExecOutcome | BaseException]] = []
        started = clock.now()
        sim.exec_start(sb.id, "sleep 2", timeout_s=60.0, on_done=functools.partial(_answered, clock, out))
        _settle(clock)
        answered, result = out[0]
        assert isinstance(result, ExecOutcome)
        answers[hold] = [answered - started, result.duration_s]
    assert answers[1.0][0] - answers[0.0][0] == pytest.approx(1.0, abs=1e-9)
    assert answers[1.0][1] - answers[0.0][1] == pytest.approx(1.0, abs=1e-9)


@pytest.mark.skipif(not IsolatedShell.available(), reason="real commands need bubblewrap")
def test_a_real_commands_answer_is_held_after_its_output() -> None:
    async def main() -> float:
        profile = load_profile("ideal").with_overrides({"sandbox.commands": "real", "sandbox.exec_overhead_s": 0.5})
        sim = VendorSimulator(profile, seed=0, clock=LoopClock(1.0))
        try:
            sb = sim.create(CreateRequest(image="python:3.12", user=SandboxUser(), lifetime_s=60.0))
            while sb.status != "RUNNING":
                await asyncio.sleep(0.01)
            result = await sim.exec(sb.id, "echo hi", timeout_s=30.0)
            assert result.stdout == "hi\n"
            return result.duration_s
        finally:
            sim.close()

    assert asyncio.run(main()) >= 0.5
