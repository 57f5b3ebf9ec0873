"""A closed-loop user's rows (the lease's live rows) feed the progress line's TTI in vendor seconds."""

from __future__ import annotations

from harness.locust.live.live_vendor_seconds import ROW_FIELDS, LiveVendorSeconds
from harness.wire.records import RolloutIdentity, live_row


def test_a_leased_rollouts_live_row_is_kept_for_the_vendor_seconds_of_the_progress_line() -> None:
    """Without the sandbox id a row cannot be joined to the vendor's record: the live figure fell back to wall time
    divided by the time scale for every steady and ramp run (their users take leased rows)."""
    record = RolloutIdentity(
        run_id="r",
        worker="w",
        rollout_id="w-1",
        provider="stub",
        profile="ideal",
        scenario="steady",
        stage="01-steady",
        target_users=4,
        inflight_at_submit=1,
    ).record(1_800_000_000.0)
    record.sandbox_id, record.create_s, record.ready_s, record.tti_s, record.total_s = "sb-1", 0.01, 0.02, 0.04, 0.05
    live = LiveVendorSeconds("r", 0.1, lambda: [])
    live.add("01-steady", live_row(record))
    kept = live._rows["01-steady"]
    assert len(kept) == 1 and all(
        kept[0][name] is not None for name in ROW_FIELDS if name not in ("exec_s", "terminate_s")
    )
