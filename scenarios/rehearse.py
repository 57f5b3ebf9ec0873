"""Rehearse: an emulated RL loop through the harness. N rollouts are kept going (agentic, with emulated
generation time) while an emulated trainer consumes the finished ones at its configured rate, governs the
generator as its framework would (async backpressure and staleness, or synchronous steps), and records when
it waits. Run it with `stampede rehearse --config rl.toml`, which sets everything from the RL config.
"""

from harness.locust.shapes import RehearseShape
from harness.locust.users import RolloutUser


class Rehearse(RehearseShape):
    pass


__all__ = ["Rehearse", "RolloutUser"]
