"""The open model's schedule runs on monotonic time: a wall-clock (NTP) step neither stops arrivals nor fires
every missed start at once, and intended start times are still epoch seconds (UTC).

The system clock is not touched: a real Python process replaces `time.time` with a clock the test steps by an
hour either way, and drives the arrival shape through its stages as Locust's ticks would.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

DRIVE_THE_ARRIVAL_SHAPE = """
import json, time, types
from harness.locust.run_state import RunState
from harness.locust.settings import RunSettings
from harness.locust.shapes import SCHEDULER_LEAD_S, ArrivalShape

environment = types.SimpleNamespace()
RunState(RunSettings(rates=(2.0, 4.0), hold_s=10.0)).attach(environment)
shape = ArrivalShape()
shape.runner = types.SimpleNamespace(environment=environment)
wall, mono = [1_800_000_000.0], [5_000.0]
time.time = lambda: wall[0]
time.monotonic = lambda: mono[0]
seen = {}
shape.tick()
seen["t_start"] = shape.stage.t_start
seen["expected_t_start"] = 1_800_000_000.0 + SCHEDULER_LEAD_S
wall[0] += 3600.0  # the wall clock steps an hour forward
mono[0] += 2.0
shape.tick()
seen["after_step_forward"] = shape.stage.index
wall[0] -= 7200.0  # and two hours back
mono[0] += 10.0  # past the hold (10 s) and the lead (1 s) on the monotonic clock
shape.tick()
seen["after_step_back_and_hold"] = shape.stage.index
print(json.dumps(seen))
"""


def test_an_arrival_stage_holds_for_its_monotonic_seconds_whatever_the_wall_clock_does() -> None:
    result = subprocess.run(
        [sys.executable, "-c", DRIVE_THE_ARRIVAL_SHAPE], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["t_start"] == seen["expected_t_start"]  # intended start times: epoch seconds from the wall clock
    assert seen["after_step_forward"] == 1  # a step forward did not end the stage early (2 s of its 10 s hold)
    assert seen["after_step_back_and_hold"] == 2  # a step back did not stall it: 12 monotonic seconds ended it


def test_no_schedule_deadline_reads_the_wall_clock() -> None:
    """Every deadline of the open model's dispatchers and shapes comes from the anchored schedule clock."""
    for module in ("harness/locust/users.py", "harness/locust/shapes.py"):
        tree = ast.parse((REPO / module).read_text())
        wall_reads = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "time" and getattr(node.value, "id", None) == "time"
        ]
        assert wall_reads == [], f"{module} reads time.time() at lines {wall_reads}"
