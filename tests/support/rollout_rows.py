"""A finished rollout's record with plausible values, for tests that write or read rows without running a vendor."""

from __future__ import annotations

from typing import Any

from harness.wire.records import RolloutRecord


def finished_rollout(i: int, **overrides: Any) -> RolloutRecord:
    """Rollout `i` of worker w0, ok, every phase timed (TTI 0.3 s), submitted at 1.8e9 + i; any field overridden."""
    fields: dict[str, Any] = {
        "run_id": "run",
        "worker": "w0",
        "rollout_id": f"w0-{i:07d}",
        "provider": "stub",
        "profile": "ideal",
        "scenario": "ramp",
        "stage": "01-ramp",
        "target_users": 10,
        "inflight_at_submit": i + 1,
        "t_submit": 1.8e9 + i,
        "create_s": 0.1,
        "ready_s": 0.2,
        "tti_s": 0.3,
        "exec_count": 1,
        "exec_s": 0.05,
        "terminate_s": 0.01,
        "total_s": 0.4,
        "sandbox_id": f"sb{i}",
    }
    return RolloutRecord(**(fields | overrides))
