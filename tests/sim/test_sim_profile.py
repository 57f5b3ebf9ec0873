"""Profiles as data: every number sourced, one-line errors, overrides; and the two clocks."""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path

import pytest

from providers.sim.core.clock import LoopClock, VirtualClock
from providers.sim.core.profile import PROFILES_DIR, Profile, ProfileError, label_kind, load_profile, profile_names


def test_builtin_profiles() -> None:
    assert profile_names() == [
        "agent-sandbox-like",
        "coreweave-like",
        "daytona-like",
        "e2b-like",
        "ideal",
        "modal-like",
        "modal-like-2026-04",
        "prime-like",
        "runloop-like",
        "vercel-like",
    ]
    for name in profile_names():
        profile = load_profile(name)
        assert isinstance(profile, Profile) and profile.name == name and profile.description
    assert load_profile("modal-like").default_time_scale == 0.1
    assert load_profile("prime-like").default_time_scale == 1.0
    assert load_profile("modal-like").quota.max_active == 1000
    assert load_profile("prime-like").create_rate.per_s * 60 == 15000


@pytest.mark.parametrize("name", ["ideal", "modal-like", "prime-like"])
def test_every_number_has_a_source(name: str) -> None:
    profile = load_profile(name)
    numbers = profile.numeric_fields()
    assert len(numbers) >= 25
    missing = [key for key in numbers if not profile.sources.get(key, "").strip()]
    assert missing == []
    for key, source in profile.sources.items():
        assert source.startswith("assumption:") or any(ch.isdigit() for ch in source) or "/" in source, (
            key,
            source,
        )


@pytest.mark.parametrize("name", profile_names())
def test_every_number_has_a_source_and_a_label(name: str) -> None:
    """What each number is (calibrated, documented, assumed, circular) sits beside where it came from, for every
    value of every built-in profile: `stampede profiles --provenance` and the sim README print them."""
    profile = load_profile(name)
    numbers = profile.numeric_fields()
    assert [k for k in numbers if not profile.sources.get(k, "").strip()] == []
    assert [k for k in numbers if not label_kind(profile.labels.get(k, ""))] == []


@pytest.mark.parametrize("name", profile_names())
def test_a_calibrated_value_names_checks_that_exist_and_a_circular_one_names_its_check(name: str) -> None:
    from providers.sim.core.calibration import load_figures

    checks = {fig.name for fig in load_figures(name)}
    for key, label in load_profile(name).labels.items():
        if label_kind(label) in ("calibrated", "circular"):
            named = set(re.findall(r"[a-z0-9-]+/[a-z0-9_]+", label))
            assert named and named <= checks, (key, label, sorted(named - checks))


def test_a_label_of_an_unknown_kind_is_one_error_line(tmp_path: Path) -> None:
    text = (PROFILES_DIR / "ideal.toml").read_text()
    path = tmp_path / "mine.toml"
    path.write_text(re.sub(r"(?m)^max_active_label = .*$", 'max_active_label = "measured: by me"', text, count=1))
    with pytest.raises(ProfileError) as e:
        load_profile(str(path))
    assert "quota.max_active_label" in _one_line(e) and "calibrated" in _one_line(e)
    assert (
        load_profile("modal-like")
        .with_overrides({"quota.max_active": 100})
        .labels["quota.max_active"]
        .startswith("assumed: set by the user")
    )


def test_load_by_path(tmp_path: Path) -> None:
    copy = tmp_path / "mine.toml"
    copy.write_text((PROFILES_DIR / "ideal.toml").read_text())
    assert load_profile(str(copy)).name == "ideal"
    assert load_profile(copy).name == "ideal"


def _one_line(exc: pytest.ExceptionInfo[ProfileError]) -> str:
    text = str(exc.value)
    assert "\n" not in text and text
    return text


def test_profile_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as e:
        load_profile("nope-like")
    assert "unknown profile 'nope-like'" in _one_line(e) and "modal-like" in str(e.value)
    with pytest.raises(ProfileError) as e:
        load_profile(str(tmp_path / "missing.toml"))
    assert "not found" in _one_line(e)
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [unclosed\n")
    with pytest.raises(ProfileError) as e:
        load_profile(str(bad))
    assert "invalid TOML" in _one_line(e)
    base = (PROFILES_DIR / "ideal.toml").read_text()
    cases = {
        "missing": (base.replace("deadline_s = 3600.0\n", ""), "missing field startup.deadline_s"),
        "ill-typed": (
            base.replace("max_active = inf", 'max_active = "lots"'),
            "quota.max_active: expected a number",
        ),
        "bool": (
            base.replace("initial_nodes_warm = true", "initial_nodes_warm = 1"),
            "expected true or false",
        ),
        "unknown": (base.replace("[quota]\n", "[quota]\nmax_actve = 3\n"), "unknown field quota.max_actve"),
        "range": (
            base.replace("boot_crash_prob = 0.0", "boot_crash_prob = 1.5"),
            "boot_crash_prob must be a probability",
        ),
        "section": (base.replace("[limits]", "[limitz]"), "unknown top-level key 'limitz'"),
    }
    for label, (text, expected) in cases.items():
        path = tmp_path / f"{label}.toml"
        path.write_text(text)
        with pytest.raises(ProfileError) as e:
            load_profile(str(path))
        assert expected in _one_line(e), label


def test_overrides() -> None:
    modal = load_profile("modal-like")
    starter = modal.with_overrides({"quota.max_active": 100})
    assert starter.quota.max_active == 100 and modal.quota.max_active == 1000
    assert starter.sources["quota.max_active"].startswith("override")
    parsed = modal.with_overrides(
        {
            "boot.median_s": "3.5",
            "pool.initial_nodes": "4",
            "pool.initial_nodes_warm": "false",
            "default_time_scale": "0.5",
            "pool.max_queue": "inf",
        }
    )
    assert parsed.boot.median_s == 3.5 and parsed.pool.initial_nodes == 4 and not parsed.pool.initial_nodes_warm
    assert parsed.default_time_scale == 0.5 and math.isinf(parsed.pool.max_queue)
    for bad, expected in [
        ({"quota.max_actve": 1}, "unknown profile key 'quota.max_actve'"),
        ({"quotas.max_active": 1}, "unknown profile section 'quotas'"),
        ({"nope": 1}, "unknown profile key 'nope'"),
        ({"quota.max_active": "many"}, "expected a number"),
        ({"pool.initial_nodes": 1.5}, "expected an integer"),
        ({"errors.boot_crash_prob": 2}, "must be a probability"),
    ]:
        with pytest.raises(ProfileError) as e:
            modal.with_overrides(bad)
        assert expected in _one_line(e)


def test_virtual_clock_orders_timers_and_cancels() -> None:
    clock = VirtualClock()
    seen: list[tuple[float, str]] = []
    clock.call_at(5, lambda: seen.append((clock.now(), "b")))
    clock.call_at(1, lambda: seen.append((clock.now(), "a")))
    clock.call_at(5, lambda: seen.append((clock.now(), "c")))
    dropped = clock.call_at(3, lambda: seen.append((clock.now(), "x")))
    dropped.cancel()
    clock.run_until(4)
    assert seen == [(1, "a")] and clock.now() == 4
    clock.call_at(2, lambda: seen.append((clock.now(), "late")))  # in the past: runs now
    clock.run()
    assert seen == [(1, "a"), (4, "late"), (5, "b"), (5, "c")]
    assert clock.wall(10) - clock.wall(0) == 10
    assert clock.next_time() is None


async def test_loop_clock_scales_vendor_time() -> None:
    clock = LoopClock(time_scale=0.01)
    loop = asyncio.get_running_loop()
    fired = loop.create_future()
    start = clock.now()
    clock.call_at(start + 5, lambda: fired.set_result(clock.now()))  # 5 vendor s = 0.05 s real
    vendor_when = await asyncio.wait_for(fired, 5)
    assert vendor_when >= start + 5 - 1e-6
    before = loop.time()
    await clock.sleep(3)
    assert loop.time() - before >= 0.03 - 1e-3
    assert clock.wall(clock.now()) == pytest.approx(__import__("time").time(), abs=0.5)
    with pytest.raises(ValueError):
        LoopClock(0)


def test_profiles_provenance_lists_every_value_with_its_label() -> None:
    from tests.support.commands import stampede

    done = stampede("profiles", "--provenance", "prime-like")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and not line.startswith("| field")]
    assert len(rows) == len(load_profile("prime-like").numeric_fields())
    lag = next(row for row in rows if row.startswith("| pool.scale_up_lag_s | 120 | circular:"))
    assert "115 s" in lag  # the figure it was set from, which its check compares with
    assert "1 circular" in done.stdout.splitlines()[0]
    bad = stampede("profiles", "--provenance", "nope")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown profile 'nope'" in bad.stderr
