"""The summary's line on the simulated vendor's own loop, read from `vendor_loop.json` (a shard each)."""

from __future__ import annotations

import json

from harness.locust.vendor_process import ShardedVendor
from harness.results.figures.vendor_loop import VENDOR_LOOP_FILE, bound_note, load_vendor_loops, vendor_loop_lines


def shard(lag_max_ms: float, probes: int = 50) -> dict[str, float]:
    return {"probes": probes, "interval_ms": 100.0, "lag_p99_ms": lag_max_ms / 2, "lag_max_ms": lag_max_ms}


def test_each_shard_gets_a_line_and_only_a_stalled_one_is_marked(tmp_path):
    (tmp_path / VENDOR_LOOP_FILE).write_text(json.dumps({"shards": [shard(12.0), shard(480.0)]}))
    quiet, stalled = vendor_loop_lines(tmp_path, time_scale=0.1)
    assert quiet.startswith("simulated vendor's own loop (shard 0) (50 probes every 100 ms)")
    assert quiet.endswith("max 12 ms (0.12 vendor s): not stalled")
    assert "(shard 1)" in stalled and "max 480 ms (4.80 vendor s): (!) it stalled past 250 ms" in stalled
    assert [loop.bound for loop in load_vendor_loops(tmp_path)] == [False, True]


def test_one_process_at_real_time_names_no_shard_and_no_vendor_seconds(tmp_path):
    (tmp_path / VENDOR_LOOP_FILE).write_text(json.dumps({"shards": [shard(3.0)]}))
    (line,) = vendor_loop_lines(tmp_path, time_scale=1.0)
    assert line == "simulated vendor's own loop (50 probes every 100 ms): lag p99 2 ms, max 3 ms: not stalled"


def test_a_run_without_the_file_or_with_a_damaged_one_gets_no_line(tmp_path):
    assert vendor_loop_lines(tmp_path, 1.0) == []
    (tmp_path / VENDOR_LOOP_FILE).write_text('{"shards": [{"probes": 3}]')
    assert vendor_loop_lines(tmp_path, 1.0) == []
    (tmp_path / VENDOR_LOOP_FILE).write_text('{"shards": [{"probes": "x"}]}')
    assert vendor_loop_lines(tmp_path, 1.0) == []


def test_a_run_whose_simulated_vendor_stalled_gets_a_bound_note(tmp_path):
    """A trial's runs table and a rehearsal's comparison read every figure as the vendor's: a run the machine's
    load bound says so."""
    assert bound_note(str(tmp_path)) == ""  # no engine_health/, no vendor_loop.json: nothing to say
    loop = {"probes": 40, "interval_ms": 100.0, "lag_p99_ms": 90.0}
    (tmp_path / "vendor_loop.json").write_text(json.dumps({"shards": [{**loop, "lag_max_ms": 120.0}]}))
    assert bound_note(str(tmp_path)) == ""
    (tmp_path / "vendor_loop.json").write_text(json.dumps({"shards": [{**loop, "lag_max_ms": 612.0}]}))
    assert bound_note(str(tmp_path)).startswith("(!) the simulated vendor's own loop stalled (lag max 612 ms)")


def test_a_shard_is_named_by_its_own_index_not_its_place_in_the_file(tmp_path):
    (tmp_path / VENDOR_LOOP_FILE).write_text(
        json.dumps({"shards": [{**shard(3.0), "shard": 0}, {**shard(9.0), "shard": 2}]})
    )
    assert [loop.shard for loop in load_vendor_loops(tmp_path)] == [0, 2]  # shard 1 did not say


def test_a_sharded_vendor_tags_each_loop_with_its_shard():
    class Shard:
        def __init__(self, loops: list[dict[str, float]]) -> None:
            self.loops = loops

        def truth(self) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
            return [], self.loops

    vendor = ShardedVendor([Shard([shard(3.0)]), Shard([]), Shard([shard(9.0)])])  # type: ignore[list-item]
    _, loops = vendor.truth()
    assert [loop["shard"] for loop in loops] == [0, 2]
