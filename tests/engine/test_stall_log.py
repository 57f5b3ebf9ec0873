"""The stalls a rollout is charged: the array-kept log answers as a walk over every kept stall would."""

from __future__ import annotations

import random

import pytest

from harness.engine.stall_log import StallLog


def _walked(stalls: list[tuple[float, float]], since: float, outside: tuple[float, float] | None) -> float:
    worst = 0.0
    for late_from, late_to in stalls:
        if late_to <= since:
            continue
        start = max(late_from, since)
        length = late_to - start
        if outside is not None:
            length -= max(0.0, min(late_to, outside[1]) - max(start, outside[0]))
        worst = max(worst, length)
    return worst


@pytest.mark.parametrize("appended", [0, 1, 37, 64, 65, 200, 333])
def test_the_worst_stall_since_an_instant_outside_a_window_is_the_walks(appended: int) -> None:
    rng = random.Random(appended)
    log, kept, now = StallLog(kept=64), [], 100.0
    for _ in range(appended):
        now += 0.1 + rng.random() * 0.05
        late = rng.random() * 0.02 + (0.5 * rng.random() if rng.random() < 0.1 else 0.0)
        log.append(now - late, now)
        kept.append((now - late, now))
    kept = kept[-64:]  # the log keeps the newest 64, as a bounded deque would
    assert len(log) == len(kept)
    for _ in range(300):
        since = 100.0 + rng.random() * (now - 100.0 + 1.0)
        w0 = since + rng.random() * 5.0
        window = rng.choice([None, (w0, w0 + rng.random() * 3.0), (since - 1.0, since + 0.3)])
        assert log.worst_since(since, window) == _walked(kept, since, window)


def test_a_stall_cut_by_the_window_and_by_the_start_counts_only_what_lies_outside_both() -> None:
    log = StallLog(kept=8)
    log.append(10.0, 11.0)  # 1 s late
    assert log.worst_since(10.5) == pytest.approx(0.5)  # the half before `since` is not the rollout's
    assert log.worst_since(9.0, (10.2, 10.9)) == pytest.approx(0.3)  # 0.2 before the window and 0.1 after it
    log.append(20.0, 20.4)
    assert log.worst_since(9.0, (9.0, 19.0)) == pytest.approx(0.4)  # the first wholly inside: the second's
    assert log.worst_since(20.4) == 0.0
