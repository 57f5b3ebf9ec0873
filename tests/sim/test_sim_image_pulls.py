"""Image pulls by size (`providers/sim/core/image_pulls.py`): shared layers, per-node caches, shared bandwidth, and the
960 cold-cache burst against the warm one (VirtualClock, seeded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from providers.base import IMAGE_SIZE_LABEL
from providers.sim.core import pull_table
from providers.sim.core.clock import VirtualClock
from providers.sim.core.experiments import simulate_burst
from providers.sim.core.profile import ProfileError, load_profile
from providers.sim.core.records import CreateRequest, SimSandbox
from providers.sim.core.simulator import VendorSimulator

# the ideal vendor (5 ms boots) with pulls by size: 100 MB/s a node, 100 MB/s the registry, caches cold
SIZED: dict[str, Any] = {
    "image.node_bandwidth_mb_s": 100.0,
    "image.registry_bandwidth_mb_s": 100.0,
    "pool.initial_nodes_warm": False,
}
CATALOGUE = "swe/*: base=500, {image}=100"


def _sim(**overrides: Any) -> tuple[VendorSimulator, VirtualClock]:
    clock = VirtualClock()
    profile = load_profile("ideal").with_overrides({**SIZED, **overrides})
    return VendorSimulator(profile, seed=0, clock=clock), clock


def _create(sim: VendorSimulator, image: str, size_mb: float | None = None) -> SimSandbox:
    labels = (f"{IMAGE_SIZE_LABEL}={size_mb:g}",) if size_mb is not None else ()
    return sim.create(CreateRequest(image=image, labels=labels, lifetime_s=3600.0))


def test_a_declared_size_is_pulled_at_the_bandwidth_and_one_pull_serves_a_node() -> None:
    sim, clock = _sim()
    a, b = _create(sim, "img", 1000), _create(sim, "img", 1000)
    clock.run()
    assert a.pull_s == pytest.approx(10.0) and b.pull_s == pytest.approx(10.0)  # 1000 MB at 100 MB/s, shared pull
    assert a.running_at == pytest.approx(10.0 + 0.005)
    assert sim.stats()["pulled_mb"] == pytest.approx(1000.0)


def test_layers_shared_between_images_are_pulled_once_per_node() -> None:
    sim, clock = _sim(**{"image.catalogue": CATALOGUE})
    first = _create(sim, "swe/a")  # sizes from the catalogue: the 500 MB base and its own 100 MB
    clock.run()
    assert first.pull_s == pytest.approx(6.0)
    second = _create(sim, "swe/b")  # the node holds the base: only b's own layer moves
    clock.run()
    assert second.pull_s == pytest.approx(1.0)
    declared = _create(sim, "swe/c", 800)  # a declared size: its own layer is what the base leaves (300 MB)
    clock.run()
    assert declared.pull_s == pytest.approx(3.0)
    assert sim.stats()["pulled_mb"] == pytest.approx(500 + 100 + 100 + 300)


def test_concurrent_pulls_share_the_registry_so_two_take_twice_as_long() -> None:
    two_nodes = {"pool.max_nodes": 2, "pool.initial_nodes": 2, "pool.slots_per_node": 1.0}
    sim, clock = _sim(**two_nodes, **{"image.node_bandwidth_mb_s": 1000.0})
    alone = _create(sim, "x", 1000)
    clock.run()
    assert alone.pull_s == pytest.approx(10.0)  # the registry's 100 MB/s, the node could take 1000
    sim, clock = _sim(**two_nodes, **{"image.node_bandwidth_mb_s": 1000.0})
    pair = [_create(sim, "x", 1000), _create(sim, "y", 1000)]  # one on each node: two flows share 100 MB/s
    clock.run()
    assert {sb.node for sb in pair} == {0, 1}
    assert [sb.pull_s for sb in pair] == pytest.approx([20.0, 20.0])


def test_a_node_shares_its_own_bandwidth_and_a_finished_flow_gives_its_share_back() -> None:
    sim, clock = _sim(**{"image.registry_bandwidth_mb_s": float("inf")})
    small, big = _create(sim, "small", 100), _create(sim, "big", 300)
    clock.run()
    # both at 50 MB/s until small is done (2 s, big has 200 MB left), then big alone at 100 MB/s (2 s more)
    assert small.pull_s == pytest.approx(2.0) and big.pull_s == pytest.approx(4.0)


def test_a_warm_cache_pulls_nothing() -> None:
    sim, clock = _sim(**{"pool.initial_nodes_warm": True})
    sb = _create(sim, "img", 8000)
    clock.run()
    assert sb.pull_s == 0.0 and sb.running_at == pytest.approx(0.005)
    assert sim.stats()["pulled_mb"] == 0.0


def test_the_least_recently_used_layers_are_evicted_past_the_cache_size() -> None:
    sim, clock = _sim(**{"image.cache_mb": 1500.0})
    for image in ("a", "b", "a"):  # a then b fill 2000 MB > 1500: a (least recently used, not in use) goes
        sb = _create(sim, image, 1000)
        clock.run()
        sim.terminate(sb.id)
    assert sb.pull_s == pytest.approx(10.0)  # a was pulled again
    assert sim.stats()["pulled_mb"] == pytest.approx(3000.0)
    sim, clock = _sim()  # without a cache limit the second a is served from the node
    for image in ("a", "b", "a"):
        sb = _create(sim, image, 1000)
        clock.run()
        sim.terminate(sb.id)
    assert sb.pull_s == 0.0


def test_an_image_of_unknown_size_keeps_the_profiles_drawn_pull() -> None:
    sim, clock = _sim(**{"image.pull_median_s": 7.0})
    sb = _create(sim, "unsized")
    clock.run()
    assert sb.pull_s == pytest.approx(7.0) and sim.stats()["pulled_mb"] == 0.0
    sim, clock = _sim(**{"image.pull_median_s": 7.0, "image.size_mb": 200.0})  # the profile's default size
    sb = _create(sim, "unsized")
    clock.run()
    assert sb.pull_s == pytest.approx(2.0)


def test_a_bad_catalogue_entry_is_one_profile_error_line() -> None:
    with pytest.raises(ProfileError, match="catalogue entry 'swe/\\*: base'"):
        load_profile("ideal").with_overrides({"image.catalogue": "swe/*: base"})
    profile = load_profile("ideal").with_overrides({"image.catalogue": "a*: x=1; b*: y=2, {image}=3"})
    assert profile.image.catalogue == ("a*: x=1", "b*: y=2, {image}=3")


def test_simulate_burst_gives_each_task_its_image_and_declares_the_size() -> None:
    profile = load_profile("ideal").with_overrides({**SIZED, "image.catalogue": CATALOGUE})
    result = simulate_burst(profile, 4, image="swe/t", image_mb=700, images=2)
    assert all(s.ok for s in result.samples)
    assert result.stats["pulled_mb"] == pytest.approx(500 + 2 * 200)  # base once, each task's own 700 - 500 once


def test_960_cold_starts_of_an_8gb_image_are_pull_bound_for_minutes_and_warm_ones_are_not() -> None:
    """Issue 30's done-when: 960 swe-task-like creates on modal-like, cold cache against warm."""
    profile = load_profile("modal-like").with_overrides(pull_table.BASE_OVERRIDES)
    one, per_task, warm = pull_table.run(profile)
    assert one.ok >= 950 and per_task.ok >= 950 and warm.ok >= 950
    assert one.tti[0] > 60 and one.pull_share > 0.9  # every node pulls 8 GB while 15 share the registry
    assert per_task.tti[0] > 10 * 60 and per_task.pull_share > 0.95  # each task's own layer queues: tens of min
    assert warm.tti[2] < 10 and warm.pull_share == 0.0 and warm.moved_gb == 0.0
    repo = Path(__file__).parents[2]
    readme = (repo / "providers" / "sim" / "README.md").read_text()
    assert pull_table.table([one, per_task, warm]) in readme  # the table the README shows is this one
    plans = (repo / "docs" / "rollout-plans.md").read_text()
    assert pull_table.brief_table([one, per_task, warm]) in plans  # and the short one docs/rollout-plans.md shows
