"""uni-agent: verl's SWE agent loop as its PR #47 describes it: 128+ rollouts in flight, sandboxes asked for at
about 1-2 a second, each held for an episode, through the client's own STARTING semaphore.

    stampede run --scenario uni_agent --client swe-rex-uni-agent --profile modal-like --users 960 \\
        --turns 10 --gen-time lognormal:50,0.5 --hold 1800

A closed loop (each user starts its next rollout when its episode ends) reached at 1.5 users a second (uni-agent
PR #47: "~1-2 creates/s"; `-r` sets another) and held at `--users` (default 960, the SemiAnalysis width) for
`--hold` seconds (default 1800). Pair it with `--client`, which plays the framework's deadline, semaphore, retries
and leaks around the vendor, and with agentic turns, so each sandbox is held as long as an episode is; the burst
scenario is the other reading of "960": all at once. The offline counterpart is
`providers.sim.core.experiments.simulate_closed_loop` (`python -m providers.sim.core.mechanisms_table`).
"""

from typing import Any

from harness.locust.shapes import SteadyShape
from harness.locust.users import RolloutUser

CREATES_PER_S = 1.5  # uni-agent PR #47: "~1-2 creates/s" at 128+ in flight
USERS = 960  # SemiAnalysis 2026-06-16 (via jianyuh): the width of the reported init failures


class UniAgent(SteadyShape):
    def spawn_rate(self, default: float = CREATES_PER_S) -> float:
        return super().spawn_rate(default)

    def levels(self) -> tuple[int, ...]:
        return (self.settings().users or USERS,)

    def peak_users(self, settings: Any) -> int | None:
        return settings.users or USERS

    def label(self) -> str:
        return "uni-agent"

    def default_hold(self) -> float:
        return 1800.0

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "shape": "uni-agent", "spawn_rate": self.spawn_rate()}


__all__ = ["RolloutUser", "UniAgent"]
