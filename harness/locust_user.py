"""The rollout user: each task is one whole rollout, run in the engine, reported to Locust phase by phase.

Importing this module into a locustfile registers stampede's arguments and event listeners with Locust.
Locust's own statistics are a live view only (it rounds samples of 10 s and more to whole seconds); the
engine's parquet records are the source of truth.
"""

from __future__ import annotations

import time
from typing import Any

from locust import User, constant, task
from locust.exception import StopUser

from harness import locust_session  # noqa: F401  (registers stampede's Locust listeners and arguments)
from harness.engine_client import EngineError
from harness.shapes import IDLE_STAGE

PHASE_FIELDS: tuple[tuple[str, str], ...] = (
    ("create", "create_s"),
    ("ready", "ready_s"),
    ("exec", "exec_s"),
    ("terminate", "terminate_s"),
    ("tti", "tti_s"),
    ("rollout", "total_s"),
)


class RolloutFailed(Exception):
    """How a failed rollout shows in Locust's failure table: kind and phase first."""


class RolloutUser(User):
    """One rollout at a time, back to back: the closed model, as an RL generator keeps N rollouts in flight."""

    wait_time = constant(0)

    @task
    def rollout(self) -> None:
        session = getattr(self.environment, "stampede", None)
        if session is None or session.engine is None:
            raise StopUser()  # stampede could not start in this process; that was already reported
        shape = session.shape
        stage = shape.before_rollout(self) if shape is not None else IDLE_STAGE
        if stage is None:
            raise StopUser()  # the shape is done with this user
        target = stage.target_users or int(getattr(self.environment.runner, "target_user_count", 0) or 0)
        try:
            record = session.engine.run_rollout(stage=stage.name, target_users=target, t_intended=time.time())
        except EngineError as exc:
            self._fire("rollout", 0.0, RolloutFailed(f"harness: {exc}"))
            return
        if shape is not None:
            shape.after_rollout(self, stage, record)
        self.report(record)

    def report(self, record: dict[str, Any]) -> None:
        failed_phase = record.get("failure_phase") if record.get("outcome") == "failed" else None
        failure = RolloutFailed(f"{record.get('failure_kind')} in {failed_phase}: {record.get('error') or ''}")
        for phase, field in PHASE_FIELDS:
            value = record.get(field)
            if phase == failed_phase:
                self._fire(phase, record.get("total_s") or 0.0, failure)
            elif value is not None:
                self._fire(phase, value, None, length=record.get("exec_count", 0) if phase == "exec" else 0)
        if record.get("outcome") == "failed":
            self._fire("rollout", record.get("total_s") or 0.0, failure)

    def _fire(self, phase: str, seconds: float, exception: Exception | None, length: int = 0) -> None:
        self.environment.events.request.fire(
            request_type=phase,
            name=self.environment.stampede.settings.provider if getattr(self.environment, "stampede", None) else "-",
            response_time=seconds * 1000.0,
            response_length=length,
            response=None,
            context={},
            exception=exception,
        )
