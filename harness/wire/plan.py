"""The rollout plan: what every rollout of a run does. Built on the Locust side from the settings, sent to the
engine as JSON in the `configure` message, run there by `harness.engine.rollout`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from foundation.sandbox_client import client_named
from harness.errors import UsageError
from harness.wire.durations import Distribution
from providers.base import DEFAULT_LIFETIME_S, RETRY_BACKOFF_S

DEFAULT_COMMANDS: tuple[tuple[str, ...], ...] = (("true",), ("echo", "stampede"), ("sleep", "2"))
"""A minimal rollout: a readiness probe (ends TTI), one tool call with output, one that holds the sandbox."""

DEFAULT_TURN_COMMAND: tuple[str, ...] = ("sh", "-c", "echo turn {turn}")


def parse_commands(text: str) -> tuple[tuple[str, ...], ...]:
    """`"true; echo hi; sleep 2"` -> argv tuples. A quoted `;` stays inside its word."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";")
    lexer.whitespace_split = True
    commands: list[tuple[str, ...]] = []
    current: list[str] = []
    try:
        for token in lexer:
            if token and set(token) == {";"}:
                if current:
                    commands.append(tuple(current))
                current = []
            else:
                current.append(token)
    except ValueError as exc:
        raise UsageError(f"cannot parse commands {text!r}: {exc}") from None
    if current:
        commands.append(tuple(current))
    if not commands:
        raise UsageError("a rollout needs at least one command (the first one ends TTI)")
    return tuple(commands)


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    """What every rollout of a run does. Travels as JSON from the Locust side to the engine."""

    commands: tuple[tuple[str, ...], ...] = DEFAULT_COMMANDS
    create_timeout_s: float = 300.0
    ready_timeout_s: float = 600.0
    exec_timeout_s: float = 120.0
    terminate_timeout_s: float = 60.0
    image: str | None = None
    cpu: float = 1.0
    memory_mb: int = 1024
    lifetime_s: float = DEFAULT_LIFETIME_S
    network: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    # Agentic episodes: after `commands` (the setup; the first command ends TTI), `turns` rounds of
    # "the model generates for a while, then calls a tool", then a final reward command.
    turns: int = 0
    turns_max: int | None = None  # turns drawn uniformly from turns..turns_max
    turn_command: tuple[str, ...] = DEFAULT_TURN_COMMAND  # "{turn}" is replaced by the turn number
    gen_time: str = "const:0"  # a harness.wire.durations spec, in vendor seconds
    tool_time: str | None = None  # "{tool_s}" in the turn command becomes a draw of this (vendor seconds)
    reward_command: tuple[str, ...] | None = None
    rollout_timeout_s: float | None = None  # one deadline for the whole rollout
    retries: int = 0  # init failures (create/ready) are retried this many times, each attempt its own row
    retry_backoff_s: float = RETRY_BACKOFF_S
    # the RL framework's sandbox client the engine plays around the provider (foundation/sandbox_client.py): its
    # startup deadline, STARTING semaphore, install step, init budget and leaks; "none": the vendor seen directly
    client: str = "none"
    time_scale: float = 1.0  # generation time plays at the simulated vendor's time scale
    seed: int = 0
    # `--plan`: a script of steps (harness.wire.script_plan.ScriptPlan.to_dict) that replaces commands and turns;
    # None: the commands/turns rollout above, as before plans existed
    script: Mapping[str, Any] | None = None
    # burst-hold (issue #32's protocol): after its commands the sandbox is held, no call in flight, until this many
    # wall seconds after the rollout's submit, then its first command runs again (still alive?) before the
    # terminate; the burst submits every rollout at once, so every hold ends together. None: no hold
    hold_s: float | None = None

    def __post_init__(self) -> None:
        if not self.commands:
            raise UsageError("a rollout needs at least one command (the first one ends TTI)")
        for name in ("create_timeout_s", "ready_timeout_s", "exec_timeout_s", "terminate_timeout_s", "lifetime_s"):
            if getattr(self, name) <= 0:
                raise UsageError(f"{name} must be positive")
        if self.turns < 0 or (self.turns_max is not None and self.turns_max < self.turns):
            raise UsageError("turns must be >= 0 (and turns_max >= turns)")
        if self.retries < 0 or self.retry_backoff_s < 0:
            raise UsageError("retries and retry backoff must be >= 0")
        if self.rollout_timeout_s is not None and self.rollout_timeout_s <= 0:
            raise UsageError("rollout_timeout_s must be positive")
        if not self.time_scale > 0:
            raise UsageError("time_scale must be positive")
        if self.hold_s is not None and not self.hold_s > 0:
            raise UsageError("hold_s must be positive")
        client_named(self.client)
        Distribution.parse(self.gen_time)
        if self.tool_time is not None:
            Distribution.parse(self.tool_time)

    @property
    def generation(self) -> Distribution:
        return Distribution.parse(self.gen_time)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["commands"] = [list(argv) for argv in self.commands]
        data["turn_command"] = list(self.turn_command)
        data["reward_command"] = list(self.reward_command) if self.reward_command else None
        data["labels"] = dict(self.labels)
        data["script"] = dict(self.script) if self.script is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RolloutPlan:
        values = dict(data)
        if "commands" in values:
            values["commands"] = tuple(tuple(str(word) for word in argv) for argv in values["commands"])
        for key in ("turn_command", "reward_command"):
            if values.get(key) is not None:
                values[key] = tuple(str(word) for word in values[key])
        return cls(**values)


def commands_to_text(commands: Sequence[Sequence[str]]) -> str:
    return "; ".join(shlex.join(argv) for argv in commands)
