"""Leased users' first rollouts are spaced evenly at the start rate, whatever batches Locust releases them in."""

from __future__ import annotations

import pytest

from harness.locust.start_spacing import StartSpacer


def test_a_batch_released_at_once_is_spread_one_slot_apart() -> None:
    spacer = StartSpacer()
    delays = [spacer.slot(100.0, now=10.0) for _ in range(5)]  # Locust's batch: five users in the same instant
    assert delays == pytest.approx([0.0, 0.01, 0.02, 0.03, 0.04])


def test_a_start_after_the_last_slot_waits_for_nothing() -> None:
    spacer = StartSpacer()
    assert spacer.slot(10.0, now=0.0) == 0.0
    assert spacer.slot(10.0, now=5.0) == 0.0  # long after the last slot: no queue is kept from the past
    assert spacer.slot(10.0, now=5.05) == pytest.approx(0.05)


def test_the_next_batch_continues_where_the_last_left_off() -> None:
    """Locust's next second's batch arrives while this one is still being spaced: slots stay one apart."""
    spacer = StartSpacer()
    first = [spacer.slot(4.0, now=0.0) for _ in range(4)]
    second = [spacer.slot(4.0, now=0.9) for _ in range(2)]
    assert first == pytest.approx([0.0, 0.25, 0.5, 0.75])
    assert second == pytest.approx([0.1, 0.35])


def test_no_rate_means_no_spacing() -> None:
    spacer = StartSpacer()
    assert [spacer.slot(0.0, now=1.0) for _ in range(3)] == [0.0, 0.0, 0.0]
