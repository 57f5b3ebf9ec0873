"""Time-scale invariance: a live simulated vendor sees a burst's sending delay 1:1, whatever the time scale.

The harness needs real time to send a burst (~0.6 s for 960 creates). At time scale 0.1 an unpaced vendor saw that
as ~6 vendor seconds of spread-out arrivals, let the first sandboxes finish booting meanwhile, and failed fewer of
the rest (51.6% against 68.5% at scale 1 under modal-like, 960 wide). These tests send a burst with a real-time
spread into a `LoopClock` running 1000x faster than real time, note each create's real arrival, and replay the
same arrivals at the same offsets, 1:1, on a `VirtualClock`: the vendor's fate for every sandbox must match. Both
runs see the same real offsets, so a slow machine changes the spread but not the comparison; the unpaced control
shows the comparison can fail.
"""

from __future__ import annotations

import asyncio

import pytest

from providers.sim.core.clock import LoopClock, VirtualClock
from providers.sim.core.profile import Profile, load_profile
from providers.sim.core.simulator import CreateRequest, Rejected, VendorSimulator

BURST = 400  # past modal-like's collapse (~300 starting), small enough to send in well under a second
SCALE = 0.001  # the 299 s deadline plays in 0.3 s once the burst is sent
REQ = CreateRequest(image="python:3.12", labels=("burst",), lifetime_s=3600.0)


def _fates(sim: VendorSimulator) -> dict[int, str]:
    """Each sandbox's end state by acceptance number: RUNNING, or its error (PROVISIONING_TIMEOUT, ...)."""
    return {sb.seq: sb.error_type or str(sb.status) for sb in sim.list()}


def _create(sim: VendorSimulator) -> None:
    try:
        sim.create(REQ)
    except Rejected:
        pass  # the same attempt number is rejected in the replay too (draws are keyed by attempt)


def _modal_like_with_a_deadline() -> Profile:
    """modal-like with a vendor-side startup deadline of 299 s: the pacing is under test, and a fate the vendor
    records (PROVISIONING_TIMEOUT) shows it; modal-like itself leaves that deadline to the client (issue #34)."""
    return load_profile("modal-like").with_overrides({"startup.deadline_s": 299.0})


async def _live_burst(clock: LoopClock) -> tuple[dict[int, str], list[float]]:
    """Send BURST creates ~1 ms of real time apart; run until no sandbox is starting; the real offsets."""
    loop = asyncio.get_running_loop()
    sim = VendorSimulator(_modal_like_with_a_deadline(), seed=0, clock=clock)
    offsets = []
    first = loop.time()
    for _ in range(BURST):
        offsets.append(loop.time() - first)
        _create(sim)
        await asyncio.sleep(0.001)  # the harness's sending delay: real time between two creates
    for _ in range(6000):  # a hang guard, not a timing assertion: the deadline ends every start
        stats = sim.stats()
        if stats["pending"] == 0 and stats["provisioning"] == 0:
            break
        await asyncio.sleep(0.005)
    fates = _fates(sim)
    sim.close()
    return fates, offsets


def _replay(offsets: list[float]) -> dict[int, str]:
    """The same creates at the same offsets as vendor seconds (what a vendor at scale 1 sees), on a virtual clock."""
    clock = VirtualClock()
    sim = VendorSimulator(_modal_like_with_a_deadline(), seed=0, clock=clock)
    for offset in offsets:
        clock.run_until(offset)
        _create(sim)
    clock.run_until(offsets[-1] + 1000.0)  # past every deadline
    fates = _fates(sim)
    sim.close()
    return fates


async def test_a_burst_sent_over_real_time_meets_the_vendor_as_at_scale_one() -> None:
    # generous pacing bounds: the mechanism is under test, not the defaults (the 960 runs measure those)
    clock = LoopClock(SCALE, pace_window_s=1.0, pace_max_s=120.0)
    live, offsets = await _live_burst(clock)
    reference = _replay(offsets)
    timeouts = sum(fate == "PROVISIONING_TIMEOUT" for fate in reference.values())
    assert timeouts > 0.1 * BURST, "the burst must reach the start pipeline's collapse to say anything"
    assert live == reference


async def test_without_pacing_the_same_burst_fails_less() -> None:
    """The control: at this scale an unpaced vendor stretches the sending into ~400 vendor seconds."""
    clock = LoopClock(SCALE, pace_window_s=0.0)
    live, offsets = await _live_burst(clock)
    reference = _replay(offsets)
    live_timeouts = sum(fate == "PROVISIONING_TIMEOUT" for fate in live.values())
    reference_timeouts = sum(fate == "PROVISIONING_TIMEOUT" for fate in reference.values())
    assert live_timeouts < reference_timeouts / 2


async def test_pacing_keeps_timers_and_wall_clock_consistent() -> None:
    """Timers set before a change of pace fire at their vendor time; `wall` follows the mapping as played."""
    clock = LoopClock(0.01, pace_window_s=0.05, pace_max_s=10.0)
    loop = asyncio.get_running_loop()
    fired = loop.create_future()
    start = clock.now()
    clock.call_at(start + 2.0, lambda: fired.set_result(clock.now()))  # 20 ms real unpaced
    real0 = loop.time()
    clock.note_arrival()  # paced: vendor time 1:1 for at least 50 ms
    paced_at = clock.now()  # not `start`: on a busy machine the unpaced gap before this can be vendor ms
    vendor_when = await asyncio.wait_for(fired, 10)
    assert vendor_when >= start + 2.0 - 1e-6
    assert loop.time() - real0 >= 0.05 - 1e-3  # 50 ms 1:1 (0.05 vendor s), then the rest at the scale
    await asyncio.sleep(0.1)
    assert clock.paced_real_s >= 0.05 - 1e-3
    now = clock.now()
    assert clock.wall(now) - clock.wall(start) == pytest.approx(loop.time() - real0, abs=0.05)
    # inside the paced piece, 10 ms of vendor time took 10 ms of real time (unpaced: 0.1 ms)
    assert clock.wall(paced_at + 0.01) - clock.wall(paced_at) == pytest.approx(0.01, abs=2e-3)


async def test_a_steady_stream_of_creates_is_paced_only_in_its_opening_wave() -> None:
    """A closed loop replaces rollouts as they end: after the opening wave it runs at its scale, not 1:1."""
    clock = LoopClock(0.01, pace_window_s=5.0, pace_max_s=0.05, pace_idle_s=30.0)
    clock.note_arrival()
    assert clock.waves == 1 and clock.now() >= 0.0
    await asyncio.sleep(0.06)  # past the wave's longest sending
    for _ in range(20):  # creates keep coming, never a quiet vendor between them
        clock.note_arrival()
        await asyncio.sleep(0.001)
    assert clock.waves == 1
    before = clock.now()
    await asyncio.sleep(0.02)
    assert clock.now() - before >= 1.0  # 20 ms real at scale 0.01: 2 vendor s, not 0.02 (paced)


async def test_a_quiet_vendor_opens_a_new_wave() -> None:
    # quiet for 1 s opens a wave: a 0.1 s sleep stays under it even when a busy machine wakes it 0.9 s late
    clock = LoopClock(0.01, pace_window_s=0.05, pace_max_s=1.0, pace_idle_s=1.0)
    clock.note_arrival()
    await asyncio.sleep(0.1)  # the wave closed (window) but the vendor has not been quiet long enough
    clock.note_arrival()
    assert clock.waves == 1
    await asyncio.sleep(1.1)
    clock.note_arrival()
    assert clock.waves == 2
