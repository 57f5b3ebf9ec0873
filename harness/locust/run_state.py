"""The state one run shares inside a Locust process: the stage, the burst gate, the live view, dropped starts.

A leaf of the Locust side: shapes move the stage and open the gate, users read them, the master/worker links
carry them between processes, and the session creates one per process and attaches it to Locust's
`Environment`. None of those import each other to get at it, so no import runs in a circle.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gevent.event

from harness.errors import UsageError
from harness.locust.live.live_view import LiveView
from harness.locust.settings import RunSettings

MSG_STAGE = "stampede_stage"
MSG_GATE = "stampede_gate"

_ATTRIBUTE = "stampede_run_state"


@dataclass(frozen=True, slots=True)
class Stage:
    """One stage of a shape; open-model stages also carry their schedule."""

    index: int
    name: str
    target_users: int
    rate: float | None = None  # open model: intended starts per second
    count: int | None = None  # open model: stop after this many intended starts
    poisson: bool = False
    t_start: float = 0.0  # epoch seconds the schedule counts from
    dispatchers: int = 1
    # closed model: users a second each Locust process spaces its users' first rollouts at (the spawn rate over
    # the processes that share it; 0: not spaced), harness.locust.start_spacing
    start_rate: float = 0.0

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Stage:
        return cls(**data)


IDLE_STAGE = Stage(0, "", 0)

Broadcast = Callable[[str, dict[str, Any]], None]


class RunState:
    """One per Locust process; `run_state_of(environment)` finds it."""

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        self.run_id: str | None = None
        self.run_dir: Path | None = None
        self.ended = False
        self.live = LiveView()
        self.dropped: Counter[str] = Counter()  # open model: starts dropped at the in-flight cap, per stage
        self._stage: Stage = IDLE_STAGE
        self.stage_listeners: list[Callable[[Stage], None]] = []  # the engine client: leased rollouts' stage
        self.gate_step = 0
        self.gate_closed = False
        self._gate = gevent.event.Event()
        self.at_gate = 0  # this process's users waiting at the gate now
        self.rows_seen: Counter[str] = Counter()  # rows this process's users received this run, per stage
        self._changed = gevent.event.Event()  # a user reached the gate, a row arrived, the live view moved
        self.broadcast: Broadcast | None = None  # a master sends stage and gate to its workers through this
        self.test_preparers: list[Callable[[], None]] = []  # the session: the web form's settings, per test
        self.refusal: str | None = None  # why the test about to start cannot run (a bad form value)
        self._prepared = gevent.event.Event()  # clear while prepare_test runs (it may restart the vendor)
        self._prepared.set()

    @property
    def stage(self) -> Stage:
        return self._stage

    @stage.setter
    def stage(self, stage: Stage) -> None:
        changed = stage != self._stage
        self._stage = stage
        if changed:
            for listener in self.stage_listeners:
                listener(stage)

    def attach(self, environment: Any) -> None:
        setattr(environment, _ATTRIBUTE, self)

    def prepare_test(self) -> None:
        """A test is about to start (Locust's `start_shape`, before the shape's first tick): settings edited
        in the web UI take effect now. A bad value is kept in `refusal`, and the shape refuses to start."""
        self.refusal = None
        self._prepared.clear()
        try:
            for prepare in self.test_preparers:
                prepare()
        except UsageError as exc:
            self.refusal = str(exc)
        finally:
            self._prepared.set()

    def ready_for_test(self) -> bool:
        """In the shape's greenlet (Locust starts it before `prepare_test` returns): wait for the test's
        settings; False if they were refused."""
        self._prepared.wait()
        return self.refusal is None

    def new_run(self) -> None:
        """A run begins: fresh live view and drop counts (stage and gate were reset when the last run ended)."""
        self.ended = False
        self.live = LiveView()
        self.dropped = Counter()
        self.rows_seen = Counter()

    def end_run(self) -> Stage:
        """The run ended: back to idle; returns the stage it ended in."""
        final, self.stage = self.stage, IDLE_STAGE
        self.ended = True
        self.gate_step, self.gate_closed = 0, False
        self._gate = gevent.event.Event()  # a closed (set) gate would let the next test's users spin past it
        return final

    # -- stages and the burst gate ---------------------------------------------------------------------
    def enter_stage(self, stage: Stage) -> None:
        """The shape moved on (local/master): every rollout submitted from now on records this stage."""
        self.stage = stage
        if self.broadcast is not None:
            self.broadcast(MSG_STAGE, stage.to_wire())

    def release(self, step: int, *, broadcast: bool = True) -> None:
        """Open the gate for step `step`: every user waiting for it starts its rollout now."""
        self.gate_step = max(self.gate_step, step)
        gate, self._gate = self._gate, gevent.event.Event()
        gate.set()
        if broadcast and self.broadcast is not None:
            self.broadcast(MSG_GATE, {"step": step})

    def close_gate(self, *, broadcast: bool = True) -> None:
        """No more steps: users waiting at the gate leave at once."""
        self.gate_closed = True
        self._gate.set()
        if broadcast and self.broadcast is not None:
            self.broadcast(MSG_GATE, {"closed": True})

    def wait_at_gate(self, done_step: int) -> int | None:
        """A gated user that finished step `done_step`: the next step it may run, or None when there is none."""
        self.at_gate += 1
        self.note_change()
        try:
            while self.gate_step <= done_step:
                if self.gate_closed:
                    return None
                self._gate.wait()
        finally:
            self.at_gate -= 1
        if self.gate_closed and self.gate_step <= done_step:
            return None
        return self.gate_step

    # -- what a shape waits on -------------------------------------------------------------------------
    def note_row(self, stage: str) -> None:
        """A user of this process received a rollout's row (its end, whatever the outcome)."""
        self.rows_seen[stage] += 1
        self.note_change()

    def note_change(self) -> None:
        """Something a shape may be waiting on moved: wake it now, not at Locust's next one-second tick."""
        self._changed.set()

    def wait_for_change(self, timeout_s: float) -> None:
        """Until something a shape waits on moves (a user at the gate, a row, the live view), or `timeout_s`."""
        self._changed.wait(timeout_s)
        self._changed.clear()


def run_state_of(environment: Any) -> RunState | None:
    """The run state the session attached to this Locust environment (None before `init`, or if it failed)."""
    state = getattr(environment, _ATTRIBUTE, None)
    return state if isinstance(state, RunState) else None
