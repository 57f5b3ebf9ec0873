"""The simulation's records: buffered random draws, time integrals, and what a rollout, a group and a slime step
carry while they run; and `SimulationCore`, the interface a mode's generator and trainer run on
(harness.rlmodel.simulation implements it; simulation_modes and simulation_frameworks use only it)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import simpy

from harness.rlmodel.config import RLConfig
from harness.rlmodel.duration_dists import Dist
from harness.rlmodel.inputs import Plan

BLOCK = 4096


class Draws:
    """Buffered inverse-transform draws from one distribution (numpy in blocks, not one call per value)."""

    def __init__(self, dist: Dist, rng: np.random.Generator, columns: int = 1) -> None:
        self.dist, self.rng, self.columns = dist, rng, columns
        self.buffer: np.ndarray = np.empty(0)
        self.index = 0

    def __call__(self) -> float:
        if self.index >= self.buffer.size:
            draws = np.maximum(self.dist.ppf(self.rng.random((BLOCK, self.columns))), 0.0)
            self.buffer = draws.sum(axis=1)
            self.index = 0
        value = float(self.buffer[self.index])
        self.index += 1
        return value


class Area:
    """Time integral of a counter (sandboxes alive, slots held)."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env, self.value, self.area, self.t = env, 0, 0.0, 0.0

    def add(self, delta: int) -> None:
        now = self.env.now
        self.area += self.value * (now - self.t)
        self.t, self.value = now, self.value + delta

    def at_now(self) -> float:
        return self.area + self.value * (self.env.now - self.t)


@dataclass(slots=True)
class Handle:
    cancellable: bool = True  # False once its sample is delivered (or lost): an oversampling kill skips it
    sandbox: bool = False  # a create has been sent (sandbox-seconds count from here)


@dataclass(slots=True)
class Group:
    size: int
    accepted: bool
    ended: int = 0
    samples: list[int] = field(default_factory=list)  # policy version at dispatch, per accepted sample
    on_end: Any = None  # sync: told every outcome of its members
    version: int | None = None  # prime-rl: the policy loaded when the group was dispatched
    off_policy: int = 0  # prime-rl: weight updates survived in flight
    members: list[tuple[simpy.Process, Handle]] = field(default_factory=list)  # to cancel an over-age group
    cancelled: bool = False
    fork_done: float | None = None  # v2 fork starts: when the group's one fork call returns (its first member draws it)


@dataclass(slots=True)
class Counts:
    """What the measurement window counts (nothing is added before it opens)."""

    dispatched_ended: int = 0
    lost_init: int = 0
    lost_exec: int = 0
    successes: int = 0
    produced_accepted: int = 0
    delivery_sum: float = 0.0
    killed: int = 0
    dispatched: int = 0
    creates: int = 0
    # the trainer's side
    lags: Counter[int] = field(default_factory=Counter)  # trained samples by policy versions behind
    dropped_stale: int = 0  # accepted samples dropped as too old (async, PipelineRL's ring buffer)
    cancelled_stale: int = 0  # rollouts cancelled in flight past max_off_policy_steps (prime-rl)
    trained_sum: int = 0  # samples trained (every mode but async, which trains B·G per step)
    idle: float = 0.0  # seconds the trainer waited for the generator
    generation_sum: float = 0.0  # stepped modes: seconds from a step's dispatch to its end of generation


MAX_SLIME_ROUNDS = 1000  # a step whose groups are all filtered would refill forever: the time limit ends it


@dataclass(slots=True)
class SlimeStep:
    finished: simpy.Event
    kept: int = 0
    submitted: int = 0
    filtered: int = 0
    trained: int = 0
    rounds: int = 0
    processes: list[tuple[simpy.Process, Handle]] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the kept groups' samples' policy versions
    open: bool = False  # generation started (a partial rollout's carried group may end before)


@dataclass(frozen=True, slots=True)
class Uniform:
    label: str = "uniform"

    def ppf(self, u: np.ndarray) -> np.ndarray:
        return u

    def mean(self) -> float:
        return 0.5

    def cdf(self, t: np.ndarray) -> np.ndarray:
        return np.clip(t, 0, 1)

    def upper(self, eps: float = 0.0) -> float:
        return 1.0


OnSuccess = Callable[[Group, int, bool], None]  # told of a delivered sample: its group, version, whether accepted


def noop(group: Group, version: int, accepted: bool) -> None:
    return None


class SimulationCore(Protocol):
    """What a mode's generator and trainer may use of the simulation: its clock, inputs and random draws, the
    policy version, the measurement window, the pauses of in-flight generation, and the rollout process. The
    mode keeps its own queues; the simulation tells it when a group's last member ends (`Mode.group_ended`)."""

    env: simpy.Environment
    cfg: RLConfig
    plan: Plan
    rng: np.random.Generator
    uniform: Draws  # U(0, 1), from the one seeded stream every draw shares
    warmup: int  # trainer steps before the window opens
    steps: int  # trainer steps measured
    version: int  # the policy the generator has loaded
    inflight: int  # rollouts dispatched and not yet released
    counting: bool  # the measurement window is open
    counts: Counts
    step_ends: list[float]  # when each trainer step ended, warm-up included
    pauses: list[tuple[float, float]]  # (start, end) of each pause of in-flight generation, in time order
    pause_ends: simpy.Event  # slime: a pause whose end was not known (end = inf) ends

    def rollout(self, group: Group, on_success: OnSuccess, handle: Handle) -> Generator[simpy.Event, Any, None]:
        """One rollout from its slot request to its release (the caller counts it in `inflight` first)."""
        ...

    def launch(self, group: Group) -> list[tuple[simpy.Process, Handle]]:
        """Every member of a group dispatched at once: their processes."""
        ...

    def wake(self) -> None:
        """Wake the generator's dispatch loop."""
        ...

    def sleep_dispatcher(self) -> simpy.Event:
        """The event the dispatch loop waits on until `wake`."""
        ...

    def nudge_trainer(self) -> None:
        """Wake the trainer if it waits in `idle_until_woken`."""
        ...

    def idle_until_woken(self) -> Generator[simpy.Event, Any, None]:
        """The trainer waits for the generator; inside the window the wait is its idle time."""
        ...

    def trained(self, steps: int, done: simpy.Event) -> bool:
        """A continuous trainer finished its `steps`-th step; True once the last is done."""
        ...

    def start_window(self) -> None:
        """Open the measurement window now."""
        ...


class Mode:
    """A generator and trainer pair, run on the simulation's core: async and sync (simulation_modes), and the RL
    frameworks' own (simulation_frameworks)."""

    def __init__(self, sim: SimulationCore) -> None:
        self.sim = sim

    def start(self, done: simpy.Event) -> None:
        """Start the generator and trainer processes; the trainer succeeds `done` after its last step."""
        raise NotImplementedError

    def group_ended(self, group: Group) -> None:
        """The last member of `group` ended (after the group's own `on_end`)."""

    def notes(self, complete: bool) -> list[str]:
        """What the result should say about this mode's run beyond the numbers."""
        return []
