"""A burst moves on events, not on Locust's one-second tick: its gate opens the moment the last user reaches it,
and the tick that waits for a step's end returns as soon as the step's last row arrives.

A real Python process drives the burst shape and the run state with real greenlets, as Locust and the users
would (no Locust runner: its ticks are the calls below), so nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

DRIVE_THE_BURST = """
import json, types
import gevent, gevent.pool
from harness.locust.run_state import RunState
from harness.locust.settings import RunSettings
from harness.locust.shapes import BurstShape

class Burst(BurstShape):
    pass

environment = types.SimpleNamespace()
state = RunState(RunSettings(users=3, burst_steps=2))
state.attach(environment)
shape = Burst()
shape.runner = types.SimpleNamespace(environment=environment, greenlet=gevent.pool.Group(), user_count=0)
seen = {"first_tick": list(shape.tick())}  # Locust spawns the users on this answer
shape.runner.user_count = 3
users = [gevent.spawn(state.wait_at_gate, 0) for _ in range(2)]
gevent.sleep(0)
seen["stage_with_two_at_the_gate"] = shape.stage.name
users.append(gevent.spawn(state.wait_at_gate, 0))
gevent.joinall(users, timeout=30)
seen["steps_the_users_got"] = [user.value for user in users]
seen["stage_once_all_were_there"] = shape.stage.name

def step_ends(stage):
    ticking = gevent.spawn(shape.tick)  # no row yet: the tick waits inside itself
    gevent.sleep(0)
    waited = not ticking.ready()
    for _ in range(3):
        state.note_row(stage)
    return waited, ticking.get(timeout=30)

waited, answer = step_ends("01-burst3")
seen["first_step"] = {"waited": waited, "answer": list(answer), "stage": shape.stage.name}
waited, answer = step_ends("02-burst3")
seen["last_step"] = {"waited": waited, "answer": answer, "gate_closed": state.gate_closed}
print(json.dumps(seen))
"""


def test_a_burst_opens_its_gate_and_ends_its_steps_as_they_happen() -> None:
    result = subprocess.run(
        [sys.executable, "-c", DRIVE_THE_BURST], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["first_tick"][0] == 3  # the burst's users, spawned before any is released
    assert seen["stage_with_two_at_the_gate"] == ""  # not released while a user is still on its way
    assert seen["steps_the_users_got"] == [1, 1, 1]  # released by the last arrival: no further tick came
    assert seen["stage_once_all_were_there"] == "01-burst3"
    # the tick waiting for the step's end answered when its last row arrived, with the next step released
    assert seen["first_step"] == {"waited": True, "answer": [3, 3.0], "stage": "02-burst3"}
    # the last step's end ends the shape (Locust stops the test) and lets waiting users leave
    assert seen["last_step"] == {"waited": True, "answer": None, "gate_closed": True}
