"""A simulated vendor's memory stays bounded however long it runs: ended sandboxes are forgotten after a
retention window (with the fronts' per-sandbox state: Prime's gateway tokens, Modal's records), while the
vendor's truth still has every sandbox a run created. On the VirtualClock: counts, not timings."""

from __future__ import annotations

import asyncio

from providers.sim.core.clock import COMPACT_MIN, LoopClock, VirtualClock
from providers.sim.core.profile import load_profile
from providers.sim.core.simulator import CreateRequest, NotFound, VendorSimulator
from providers.sim.modal.registry import ModalRegistry
from providers.sim.prime.gateway import GatewayTokens

RETENTION_S = 60.0
CYCLES = 5000
IN_FLIGHT = 50
EVERY_S = 0.1  # a create every 0.1 s: 10/s, so one retention window is 600 ended sandboxes


def churn(sim: VendorSimulator, clock: VirtualClock, on_create=None) -> list[int]:  # type: ignore[no-untyped-def]
    """CYCLES create/run/terminate cycles with IN_FLIGHT alive at once; returns `sim.known` after each."""
    alive = []
    held = []
    for i in range(CYCLES):
        sb = sim.create(CreateRequest(image="img", labels=("stampede-run=soak",), idempotency_key=f"k{i}"))
        if on_create is not None:
            on_create(sb)
        alive.append(sb)
        if len(alive) > IN_FLIGHT:
            sim.terminate(alive.pop(0).id)
        clock.run_until(clock.now() + EVERY_S)
        held.append(sim.known)
    return held


def test_ended_sandboxes_are_forgotten_after_the_window_and_held_state_stays_bounded() -> None:
    clock = VirtualClock()
    sim = VendorSimulator(load_profile("ideal"), seed=1, clock=clock, retention_s=RETENTION_S)
    tokens = GatewayTokens()
    sim.add_prune_listener(tokens.forget)
    held = churn(sim, clock, on_create=lambda sb: tokens.issue(sb.id))

    window = int(RETENTION_S / EVERY_S)  # sandboxes ending within one window
    bound = IN_FLIGHT + window + 10
    assert max(held) <= bound, f"held {max(held)} sandboxes, more than {bound}"
    assert held[-1] >= IN_FLIGHT  # the live ones are all still there
    assert len(tokens._by_job) <= bound  # gateway tokens are pruned with their sandboxes
    assert sim.stats()["created"] == CYCLES
    assert sim.stats()["pruned"] == CYCLES - sim.known

    truth = sim.truth()  # every sandbox ever created, in acceptance order
    assert [row["seq"] for row in truth] == list(range(CYCLES))
    assert all("stampede-run=soak" in row["labels"] for row in truth)
    first = truth[0]
    assert first["status"] == "TERMINATED" and first["ended_s"] is not None
    try:
        sim.get(first["id"])
        raise AssertionError("a sandbox ended long ago is still held")
    except NotFound:
        pass
    # an idempotency key of a forgotten sandbox no longer pins it
    assert "k0" not in sim._idempotency


def test_a_sandbox_is_kept_for_the_whole_window_after_it_ended() -> None:
    clock = VirtualClock()
    sim = VendorSimulator(load_profile("ideal"), seed=1, clock=clock, retention_s=RETENTION_S)
    sb = sim.create(CreateRequest(image="img"))
    clock.run_until(5)
    sim.terminate(sb.id)
    clock.run_until(5 + RETENTION_S - 1)
    sim.create(CreateRequest(image="img"))  # pruning happens as creates arrive
    assert sim.get(sb.id).status == "TERMINATED"
    clock.run_until(5 + RETENTION_S + 1)
    sim.create(CreateRequest(image="img"))
    assert sim.known == 2 and next(row["id"] for row in sim.truth()) == sb.id


def test_modal_records_are_pruned_and_truth_keeps_modals_ids() -> None:
    clock = VirtualClock()
    sim = VendorSimulator(load_profile("ideal"), seed=2, clock=clock, retention_s=RETENTION_S)
    registry = ModalRegistry(sim)
    modal_ids: list[str] = []

    def register(sb):  # type: ignore[no-untyped-def]
        record = registry.add(
            sb,
            version=2,
            app_id="ap-x",
            tags={},
            image_id="im-x",
            has_readiness_probe=False,
            workdir=None,
            timeout_secs=300,
        )
        modal_ids.append(record.modal_id)

    churn(sim, clock, on_create=register)
    bound = IN_FLIGHT + int(RETENTION_S / EVERY_S) + 10
    assert len(registry.by_id) <= bound and len(registry.by_task) <= bound and len(registry.by_sim) <= bound
    pruned = [row for row in sim.truth() if "sim_id" in row]
    assert len(pruned) == CYCLES - sim.known
    assert [row["id"] for row in pruned] == modal_ids[: len(pruned)]


async def test_a_served_vendor_prunes_a_virtual_one_keeps_everything() -> None:
    assert VendorSimulator(load_profile("ideal"), seed=0, clock=VirtualClock()).retention_s == float("inf")
    clock = LoopClock(2.0)
    clock.start()
    live = VendorSimulator(load_profile("ideal"), seed=0, clock=clock)
    assert live.retention_s == 60.0 / 2.0  # real seconds, on a clock whose vendor second lasts 2 real ones
    live.close()


async def test_a_live_clock_does_not_keep_cancelled_timers_until_they_were_due() -> None:
    """Every ended sandbox cancels timers due up to its lifetime (an hour) later: they must not pile up."""
    clock = LoopClock(1.0)
    clock.start()
    fired: list[int] = []
    for i in range(20 * COMPACT_MIN):
        clock.call_at(clock.now() + 3600.0, lambda: fired.append(-1)).cancel()
        if i % 1000 == 0:
            clock.call_at(clock.now() + 3600.0, lambda: fired.append(-2))  # live ones stay
    assert len(clock._heap) <= 2 * COMPACT_MIN
    assert sum(1 for entry in clock._heap if not entry[2].cancelled) == 20 * COMPACT_MIN // 1000 + 1
    clock.call_at(clock.now() + 0.01, lambda: fired.append(1))
    for _ in range(200):  # bounded: the timer is due in 10 ms
        if fired:
            break
        await asyncio.sleep(0.01)
    assert fired == [1]
