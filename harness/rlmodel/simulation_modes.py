"""The simulation's two generic modes (harness.rlmodel.simulation's docstring gives their rules): async, a
generator that keeps the slots full against a bounded queue and a trainer that drops samples too old; and sync,
steps that dispatch N rollouts, end generation at k successes, cancel the rest and train. Each runs on the
simulation through `SimulationCore`."""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from typing import Any

import simpy

from harness.rlmodel.simulation_records import Group, Handle, Mode, OnSuccess, SimulationCore, noop


class AsyncMode(Mode):
    """The generator keeps the slots full while fewer than async_level × B·G accepted samples wait; the trainer
    takes B·G samples per step (FIFO, dropping those more than max_off_policy_steps policy versions old), trains,
    and publishes a new version."""

    def __init__(self, sim: SimulationCore) -> None:
        super().__init__(sim)
        self.queue: deque[int] = deque()  # accepted samples' policy versions, oldest first

    def start(self, done: simpy.Event) -> None:
        self.sim.env.process(self._dispatcher())
        self.sim.env.process(self._trainer(done))

    def group_ended(self, group: Group) -> None:
        self.queue.extend(group.samples)
        self.sim.nudge_trainer()

    def _dispatcher(self) -> Generator[simpy.Event, Any, None]:
        sim = self.sim
        cfg = sim.cfg
        cap = cfg.async_level * sim.plan.samples_per_step
        group: Group | None = None
        members = 0
        while True:
            while sim.inflight < sim.plan.concurrency and len(self.queue) < cap:
                if group is None or members == group.size:
                    group = Group(cfg.group_size, sim.uniform() >= cfg.zero_advantage_groups)
                    members = 0
                members += 1
                sim.inflight += 1
                if sim.counting:
                    sim.counts.dispatched += 1
                sim.env.process(sim.rollout(group, noop, Handle()))
            yield sim.sleep_dispatcher()

    def _trainer(self, done: simpy.Event) -> Generator[simpy.Event, Any, None]:
        sim = self.sim
        cfg, plan, env = sim.cfg, sim.plan, sim.env
        samples = plan.samples_per_step
        step = 0
        while True:
            batch = 0
            while batch < samples:
                if not self.queue:
                    yield from sim.idle_until_woken()
                    continue
                version = self.queue.popleft()
                lag = step - version
                if lag > cfg.max_off_policy_steps:
                    if sim.counting:
                        sim.counts.dropped_stale += 1
                    continue
                batch += 1
                if sim.counting:
                    sim.counts.lags[lag] += 1
            sim.wake()
            yield env.timeout(samples / plan.trainer_rate + cfg.weight_sync_s)
            step += 1
            sim.version = step
            if sim.trained(step, done):
                return


class SyncMode(Mode):
    """Each step dispatches N = B·G·oversampling rollouts, ends generation when k = B·G succeeded (or all ended
    without oversampling), cancels the rest, then trains."""

    def start(self, done: simpy.Event) -> None:
        self.sim.env.process(self._trainer(done))

    def _trainer(self, done: simpy.Event) -> Generator[simpy.Event, Any, None]:
        sim = self.sim
        cfg, plan, env = sim.cfg, sim.plan, sim.env
        n, k = plan.dispatched_per_step, plan.finish_target
        sim.counts.generation_sum = 0.0
        sim.counts.trained_sum = 0
        for step in range(sim.warmup + sim.steps):
            state = {"successes": 0, "ended": 0, "trained": 0}
            finished = env.event()

            def on_success(group: Group, version: int, accepted: bool, state: dict = state) -> None:
                if state["successes"] < k:
                    state["successes"] += 1
                    state["trained"] += int(accepted)

            processes = []
            group: Group | None = None
            for index in range(n):
                if index % cfg.group_size == 0:
                    group = Group(cfg.group_size, sim.uniform() >= cfg.zero_advantage_groups)
                    group.on_end = lambda outcome, state=state, finished=finished: _count_end(state, finished, n)
                assert group is not None
                handle = Handle()
                sim.inflight += 1
                process = env.process(self._rollout(group, on_success, state, finished, k, handle))
                processes.append((process, handle))
                if sim.counting:
                    sim.counts.dispatched += 1
            t0 = env.now
            yield finished
            if sim.counting:
                sim.counts.generation_sum += env.now - t0
            for process, handle in processes:
                if process.is_alive and handle.cancellable:
                    process.interrupt()
            if sim.counting:
                sim.counts.trained_sum += state["trained"]
                sim.counts.idle += env.now - t0
            yield env.timeout(state["trained"] / plan.trainer_rate + cfg.weight_sync_s)
            sim.version = step + 1
            sim.step_ends.append(env.now)
            if step + 1 == sim.warmup:
                sim.start_window()
        done.succeed()

    def _rollout(
        self, group: Group, on_success: OnSuccess, state: dict, finished: simpy.Event, k: int, handle: Handle
    ) -> Generator[simpy.Event, Any, None]:
        """A rollout whose k-th success of the step ends the step's generation."""

        def success(g: Group, version: int, accepted: bool) -> None:
            on_success(g, version, accepted)
            if state["successes"] >= k and not finished.triggered:
                finished.succeed()

        yield from self.sim.rollout(group, success, handle)


def _count_end(state: dict, finished: simpy.Event, n: int) -> None:
    state["ended"] += 1
    if state["ended"] >= n and not finished.triggered:
        finished.succeed()
