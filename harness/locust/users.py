"""Locust users that run rollouts in the engine and report them to Locust phase by phase.

Importing this module into a locustfile registers stampede's arguments and event listeners with Locust.
Locust's own statistics are a live view only (it rounds samples of 10 s and more to whole seconds); the
engine's parquet records are the source of truth.

- `RolloutUser`: closed model. One rollout at a time, back to back, as an RL generator keeps N in flight.
- `OpenModelUser`: open model. A dispatcher (one per engine) that starts rollouts on a schedule of intended
  start times (fixed interval or Poisson), whatever the vendor does; a start that finds the in-flight cap
  reached is dropped and counted, so a slow vendor cannot hide behind fewer requests.
"""

from __future__ import annotations

import random
from typing import Any

import gevent
import gevent.pool
from locust import User, constant, task
from locust.exception import StopUser
from locust.user.users import LOCUST_STATE_STOPPING

from harness.locust.engine_client import EngineError
from harness.locust.run_state import Stage
from harness.locust.schedule_clock import schedule_now
from harness.locust.session import StampedeSession, session_of  # importing it registers stampede with Locust
from harness.wire.messages import ERROR_DONE, RolloutRequest
from harness.wire.records import OUTCOME_CANCELLED

PHASE_FIELDS: tuple[tuple[str, str], ...] = (
    ("create", "create_s"),
    ("ready", "ready_s"),
    ("exec", "exec_s"),
    ("terminate", "terminate_s"),
    ("tti", "tti_s"),
    ("rollout", "total_s"),
)


CANCELLED = "cancelled"  # the request type of a rollout cut off by the shape, a stop or the run's end


class RolloutFailed(Exception):
    """How a failed rollout shows in Locust's failure table: kind and phase first."""


def report(user: User, record: dict[str, Any]) -> None:
    """Fire one Locust request event per phase (request type = phase), failures on the phase that failed.

    A cancelled rollout (Locust stopped its user, or the run ended under it) is neither a finished rollout
    nor a failure: its phases that completed count as usual, and the rollout itself as request type
    `cancelled`, so a stop that cut off many rollouts shows in the UI instead of vanishing.

    Runs once per rollout in the Locust process: the session, the name and the failure are looked up or made
    once per row, not once per event (and a failure only for a failed row).
    """
    session = session_of(user.environment)
    name = session.settings.provider if session is not None else "-"
    failed = record.get("outcome") == "failed"
    failed_phase = record.get("failure_phase") if failed else None
    failure = (
        RolloutFailed(f"{record.get('failure_kind')} in {failed_phase}: {record.get('error') or ''}")
        if failed
        else None
    )
    cancelled = record.get("outcome") == OUTCOME_CANCELLED
    for phase, field in PHASE_FIELDS:
        value = record.get(field)
        if cancelled and phase == "rollout":
            _fire(user, name, CANCELLED, value or 0.0, None)
        elif phase == failed_phase:
            _fire(user, name, phase, record.get("total_s") or 0.0, failure)
        elif value is not None:
            _fire(user, name, phase, value, None, length=record.get("exec_count", 0) if phase == "exec" else 0)
    if failed:
        _fire(user, name, "rollout", record.get("total_s") or 0.0, failure)
    if session is not None:
        session.note_row(record)


def fire(user: User, phase: str, seconds: float, exception: Exception | None, length: int = 0) -> None:
    session = session_of(user.environment)
    _fire(user, session.settings.provider if session is not None else "-", phase, seconds, exception, length)


def _fire(user: User, name: str, phase: str, seconds: float, exception: Exception | None, length: int = 0) -> None:
    user.environment.events.request.fire(
        request_type=phase,
        name=name,
        response_time=seconds * 1000.0,
        response_length=length,
        response=None,
        context={},
        exception=exception,
    )


class RolloutUser(User):
    """One rollout at a time, back to back: the closed model.

    Unless the shape gates each step (a burst), the user leases: the engine runs its rollouts back to back
    and streams each row here, so no socket round trip sits between one rollout and the next (at 64 in flight
    that gap was ~20 ms a rollout: the harness's own queue, not the vendor's).
    """

    wait_time = constant(0)

    @task
    def rollout(self) -> None:
        session = session_of(self.environment)
        if session is None or not session.wait_until_ready():
            raise StopUser()  # stampede could not start in this process; that was already reported
        shape = session.shape
        if shape is None or not shape.gated:
            self._lease(session)
            return
        stage = session.before_rollout(self)
        if stage is None:
            raise StopUser()  # the shape is done with this user
        target = stage.target_users or int(getattr(self.environment.runner, "target_user_count", 0) or 0)
        engine = session.engine
        assert engine is not None  # wait_until_ready: configured
        try:
            record = engine.run_rollout(
                RolloutRequest(stage.name, target, t_intended=schedule_now()), on_cancelled=self._report_cancelled
            )
        except EngineError as exc:
            if exc.kind == ERROR_DONE:
                raise StopUser() from None  # a rehearsal's trainer has all its steps
            fire(self, "rollout", 0.0, RolloutFailed(f"harness: {exc}"))
            return
        report(self, record)

    def _lease(self, session: StampedeSession) -> None:
        assert session.engine is not None
        if not getattr(self, "_spaced", False):
            self._spaced = True  # Locust released this user in a batch of a second's worth: take an even slot
            session.start_spacer.wait_turn(session.state.stage.start_rate)
        try:
            stopping = lambda: self._state == LOCUST_STATE_STOPPING  # noqa: E731
            for record in session.engine.lease(session.lease_request(), stopping, self._report_cancelled):
                report(self, record)
        except EngineError as exc:
            if exc.kind == ERROR_DONE:
                raise StopUser() from None  # a rehearsal's trainer has all its steps
            fire(self, "rollout", 0.0, RolloutFailed(f"harness: {exc}"))
            gevent.sleep(0.5)  # the engine refused (not configured yet, or gone): do not spin

    def _report_cancelled(self, record: dict[str, Any]) -> None:
        """The row of a rollout cancelled when Locust killed this user: it still shows in Locust's stats."""
        report(self, record)


class OpenModelUser(User):
    """A schedule dispatcher: one per engine, each taking every n-th slot of the stage's schedule."""

    wait_time = constant(0)

    @task
    def dispatch(self) -> None:
        session = session_of(self.environment)
        if session is None or not session.wait_until_ready():
            raise StopUser()
        inflight = gevent.pool.Group()
        try:
            while self._state != LOCUST_STATE_STOPPING:
                stage = session.state.stage
                if stage.rate is None:
                    gevent.sleep(0.05)
                    continue
                self._run_schedule(session, stage, inflight)
            inflight.join()  # a graceful stop lets started rollouts finish (within Locust's stop timeout)
        finally:
            inflight.kill(block=True)  # killed: each waiting greenlet cancels its rollout in the engine
        raise StopUser()

    def _index(self) -> int:
        return int(getattr(self.environment.runner, "worker_index", 0) or 0)

    def _run_schedule(self, session: StampedeSession, stage: Stage, inflight: gevent.pool.Group) -> None:
        dispatchers = max(1, stage.dispatchers)
        index = self._index() % dispatchers
        rng = random.Random(f"{session.settings.seed}:{stage.name}:{index}")
        cap = max(1, session.settings.max_inflight // dispatchers)
        rate = float(stage.rate or 1.0)
        slot, t_next = index, stage.t_start
        if stage.poisson:
            t_next += rng.expovariate(rate / dispatchers)
        else:
            t_next += slot / rate
        while session.state.stage is stage and self._state != LOCUST_STATE_STOPPING:
            if stage.count is not None and slot >= stage.count:
                gevent.sleep(0.1)  # this dispatcher's share is done; wait for the shape to move on
                continue
            delay = t_next - schedule_now()
            if delay > 0:
                gevent.sleep(min(delay, 0.25))
                continue
            if len(inflight) >= cap:
                session.state.dropped[stage.name] += 1
            else:
                inflight.spawn(self._one, session, stage, t_next)
            slot += dispatchers
            t_next += rng.expovariate(rate / dispatchers) if stage.poisson else dispatchers / rate

    def _one(self, session: StampedeSession, stage: Stage, t_intended: float) -> None:
        engine = session.engine
        assert engine is not None  # the dispatcher waited until ready
        try:
            record = engine.run_rollout(
                RolloutRequest(stage.name, stage.target_users, t_intended=t_intended),
                on_cancelled=lambda cancelled: report(self, cancelled),
            )
        except EngineError as exc:
            fire(self, "rollout", 0.0, RolloutFailed(f"harness: {exc}"))
            return
        report(self, record)
