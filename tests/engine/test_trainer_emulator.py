"""The emulated trainer of `stampede rehearse`: what reaches its queue, and when."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from harness.engine.trainer import TrainerEmulator, TrainerSettings


def _fast(mode: str, **knobs: Any) -> TrainerSettings:
    """A trainer of groups of two, batches of two, that trains at once (no warm-up, a million samples a second) for
    50 steps; each test sets what its framework's behaviour turns on."""
    defaults: dict[str, Any] = {"batch": 2, "group_size": 2, "samples_per_s": 1e6, "steps": 50, "warmup_steps": 0}
    return TrainerSettings(mode=mode, **{**defaults, **knobs})


def test_a_groups_samples_reach_the_trainer_together_when_its_last_member_ended(tmp_path):
    """GRPO-style frameworks score a group as a whole: one straggler holds back its siblings' samples (and so
    adds to their staleness), and a member that failed still ends the group."""

    async def scenario() -> None:
        trainer = TrainerEmulator(TrainerSettings(mode="async", batch=4, group_size=2, async_level=0), tmp_path, "w")
        tickets = [await trainer.admit() for _ in range(4)]
        assert [t.group for t in tickets] == [0, 0, 1, 1]
        trainer.finished(tickets[0], "ok")
        assert len(trainer.state.queue) == 0  # its sibling is still running
        trainer.finished(tickets[1], "ok")
        assert len(trainer.state.queue) == 2
        trainer.finished(tickets[3], "failed")
        trainer.finished(tickets[2], "ok")
        assert len(trainer.state.queue) == 3 and trainer.counts["failed"] == 1
        assert not trainer.policy.groups.ended and not trainer.policy.groups.samples  # nothing left behind

    asyncio.run(scenario())


def test_prime_rl_keeps_its_groups_in_flight_and_gates_batches_on_the_loaded_policy(tmp_path):
    """prime-rl's Scheduler: oversampling x batch / G groups in flight, a group replaced only when consumed into a
    batch; batch n waits for the policy of step n - max_async_level; at a weight update a group past
    max_off_policy_steps is cancelled (the engine is told which) and its rollouts may start again at once."""

    async def scenario() -> None:
        killed: list[int] = []
        settings = _fast("prime-rl", oversampling=2.0, max_async_level=1, max_off_policy_steps=1)
        trainer = TrainerEmulator(settings, tmp_path, "w", kill=killed.append)
        trainer.start()
        tickets = [await trainer.admit() for _ in range(4)]  # two groups of two: all the permits there are
        waiting = asyncio.ensure_future(trainer.admit())
        await asyncio.sleep(0.01)
        assert not waiting.done() and [t.group for t in tickets] == [0, 0, 1, 1]
        trainer.finished(tickets[0], "ok")
        trainer.finished(tickets[1], "ok")  # group 0 ends: consumed into batch 0, its two rollouts may start
        replacement = await asyncio.wait_for(waiting, 5)
        assert replacement.group == 2 and replacement.version == 0
        for _ in range(100):  # the trainer trains batch 0 (instantly) and publishes step 1
            await asyncio.sleep(0.001)
            if trainer.state.version >= 1:
                break
        # weight updates: groups 1 and 2 (in flight since policy 0) have survived one; a second cancels both
        assert trainer.policy.loaded == 1 and trainer.policy.live_groups == {1: 1, 2: 1}
        permits = trainer.policy.permits
        trainer.policy.load(2)
        assert killed == [1, 2] and trainer.policy.cancelled_groups == {1, 2} and trainer.counts["stale"] == 2
        assert trainer.policy.permits == permits + 4  # their replacements may start at once
        await trainer.close()

    asyncio.run(scenario())


def test_slime_refills_a_round_for_filtered_groups_and_kills_the_rest_at_b_kept(tmp_path):
    """slime's step: ceil(oversampling x B) groups; a group with no accepted sample does not count toward B, and
    when fewer than B remain another round may start; at B kept groups the step's other rollouts are killed."""

    async def scenario() -> None:
        killed: list[int] = []
        settings = TrainerSettings(mode="slime", batch=4, group_size=2, oversampling=1.0, samples_per_s=1e6)
        trainer = TrainerEmulator(settings, tmp_path, "w", kill=killed.append)
        first = [await trainer.admit() for _ in range(4)]  # a round: B = 2 groups of 2
        blocked = asyncio.ensure_future(trainer.admit())
        await asyncio.sleep(0.01)
        assert not blocked.done()
        trainer.finished(first[0], "failed")
        trainer.finished(first[1], "failed")  # group 0 has no sample: filtered, fewer than B remain: a refill
        refill = await asyncio.wait_for(blocked, 5)
        assert refill.step == 0 and trainer.policy.allowed[0] == 8
        second = [refill] + [await trainer.admit() for _ in range(3)]
        trainer.finished(first[2], "ok")
        trainer.finished(first[3], "ok")  # group 1 kept
        trainer.finished(second[0], "ok")
        trainer.finished(second[1], "ok")  # group 2 kept: B groups, so the step's rollouts still running are killed
        assert killed == [0] and trainer.policy.batch_ready() and len(trainer.state.queue) == 4
        trainer.finished(second[2], "ok", killed=True)
        trainer.finished(second[3], "ok", killed=True)
        assert len(trainer.state.queue) == 4 and trainer.counts["killed"] == 2  # nothing of a killed group is kept

    asyncio.run(scenario())


async def _until(condition, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.001)):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")


def test_verl_spends_its_dispatch_budget_per_sync_and_stands_generation_still_during_one(tmp_path):
    """verl's rollouter: at most int(B x (1 + staleness_threshold) x T) groups dispatched per policy version; the
    trainer takes B groups per step and syncs every T steps, when in-flight generation stands still (partial
    rollout), new groups carry the new version, and the budget restarts from the groups in flight and queued."""

    async def scenario() -> None:
        settings = _fast(
            "verl",
            staleness_threshold=0.5,
            partial_rollout=True,
            trigger_parameter_sync_step=2,
            weight_sync_s=0.2,
            max_groups=4,
        )
        assert settings.verl_budget == 3  # int(1 x 1.5 x 2)
        trainer = TrainerEmulator(settings, tmp_path, "w")
        assert trainer.pauses_inference
        trainer.start()
        tickets = [await trainer.admit() for _ in range(6)]  # three groups: the whole budget
        blocked = asyncio.ensure_future(trainer.admit())
        await asyncio.sleep(0.01)
        assert not blocked.done() and {t.version for t in tickets} == {0}
        for ticket in tickets[:4]:  # groups 0 and 1 end: steps 0 and 1 train, then the sync (0.2 s) begins
            trainer.finished(ticket, "ok")
        await _until(lambda: trainer.policy.syncing)
        paused, resume = trainer.inference_pauses(trainer.state.pauses[0][0], trainer.state.pauses[0][0] + 0.1)
        assert paused >= 0.099 and resume is not None  # a rollout generating now stands still until `resume`
        assert not blocked.done()  # nothing is dispatched during a sync
        replacement = await asyncio.wait_for(blocked, 5)
        assert replacement.version == 2 and trainer.policy.loaded == 2  # the policy of the step the sync carried
        assert trainer.policy.spent == 1 + 1  # group 2 still in flight when the budget restarted, and this one
        await trainer.close()

    asyncio.run(scenario())


def test_verl_without_partial_rollout_drains_the_generator_before_a_sync(tmp_path):
    """partial_rollout off: the trainer's pause() waits until no group is in flight, and that wait is idle time."""

    async def scenario() -> None:
        settings = _fast(
            "verl", staleness_threshold=1.0, partial_rollout=False, trigger_parameter_sync_step=1, max_groups=2, steps=1
        )
        trainer = TrainerEmulator(settings, tmp_path, "w")
        assert not trainer.pauses_inference
        trainer.start()
        tickets = [await trainer.admit() for _ in range(4)]
        trainer.finished(tickets[0], "ok")
        trainer.finished(tickets[1], "ok")  # group 0 ends: step 0 trains; group 1 is still in flight
        await _until(lambda: trainer.policy.syncing)
        await asyncio.sleep(0.15)
        assert not trainer.steps  # the sync waits for group 1
        trainer.finished(tickets[2], "ok")
        trainer.finished(tickets[3], "ok")
        await _until(lambda: bool(trainer.steps))
        assert trainer.steps[0]["wait_s"] >= 0.15 and trainer.policy.loaded == 1
        await trainer.close()

    asyncio.run(scenario())


def test_pipelinerl_submits_within_max_lag_and_drops_the_oldest_ready_samples_without_it(tmp_path):
    """PipelineRL's actor submits at most ceil(max_lag / G) + (updates + 1) x B groups; without max_lag the actor
    never waits, and ready samples beyond the ring buffer go oldest first while the trainer trains."""

    async def scenario() -> None:
        lagged = _fast("pipelinerl", max_lag=2, max_groups=10)
        trainer = TrainerEmulator(lagged, tmp_path, "w")
        tickets = [await trainer.admit() for _ in range(4)]  # ceil(2 / 2) + 1 = 2 groups
        blocked = asyncio.ensure_future(trainer.admit())
        await asyncio.sleep(0.01)
        assert not blocked.done()
        trainer.start()
        trainer.finished(tickets[0], "ok")
        trainer.finished(tickets[1], "ok")  # a batch: step 0 trains, the update raises the budget by B = 1 group
        granted = await asyncio.wait_for(blocked, 5)
        assert granted.version == 1 and trainer.state.version == 1
        await trainer.close()

        free = _fast("pipelinerl", ring_buffer_size=3, max_groups=10)
        trainer = TrainerEmulator(free, tmp_path, "w2")
        tickets = [await trainer.admit() for _ in range(8)]  # no budget: four groups at once
        for ticket in tickets:
            trainer.finished(ticket, "ok")
        ready = trainer.state.queue
        assert len(ready) == 3 and trainer.counts["stale"] == 5  # no trainer running: the buffer overflows
        assert [t for t, _ in ready] == sorted(t for t, _ in ready)  # the newest kept
        await trainer.close()

    asyncio.run(scenario())


def test_generation_stands_still_while_a_weight_update_pauses_inference(tmp_path):
    """The engine's generation sleep asks the emulated trainer for pauses that overlapped it and sleeps them too:
    0.1 s of thinking with a 0.2 s broadcast starting 0.05 s in holds the sandbox 0.3 s, and says so."""
    from types import SimpleNamespace

    from harness.engine.rollout import _Rollout

    async def scenario() -> None:
        settings = TrainerSettings(mode="pipelinerl", batch=2, group_size=2, weight_sync_s=1.0)
        trainer = TrainerEmulator(settings, tmp_path, "w")
        assert trainer.pauses_inference
        rollout = object.__new__(_Rollout)
        rollout.ctx = SimpleNamespace(inference_pauses=trainer.inference_pauses)
        t0 = time.time()
        trainer.state.pauses.append((t0 + 0.05, t0 + 0.25))
        held = await rollout.think(0.1)
        assert time.time() - t0 >= 0.3 - 1e-3 and abs(held - 0.3) < 0.01

    asyncio.run(scenario())


def test_slime_partial_rollout_carries_unfinished_groups_into_the_next_step(tmp_path):
    """slime's --partial-rollout: at B kept groups nothing is killed; the unfinished groups move to the next step and
    count in its round (fewer fresh rollouts start), their generation stands still until that step opens, and
    their samples train a policy behind."""

    async def scenario() -> None:
        killed: list[int] = []
        settings = _fast("slime", batch=4, oversampling=1.5, partial_rollout=True, steps=5)
        trainer = TrainerEmulator(settings, tmp_path, "w", kill=killed.append)
        tickets = [await trainer.admit() for _ in range(6)]  # a round: ceil(1.5 x 2) = 3 groups of 2
        for ticket in tickets[:4]:
            trainer.finished(ticket, "ok")  # groups 0 and 1 kept: B = 2
        assert killed == [] and tickets[4].step == tickets[5].step == 1  # group 2 carried, not killed
        assert trainer.state.pauses[-1][1] == math.inf  # the carried generation stands still, its end unknown
        assert trainer.inference_pauses(time.time(), time.time())[1] is not None
        trainer.start()
        await _until(lambda: trainer.policy.step_open == 1)
        assert trainer.state.pauses[-1][1] < math.inf  # the step opened: the carried rollouts go on
        fresh = [await trainer.admit() for _ in range(4)]  # 3 groups in the round, 1 of them carried
        blocked = asyncio.ensure_future(trainer.admit())
        await asyncio.sleep(0.01)
        assert not blocked.done() and all(t.step == 1 for t in fresh)
        for ticket in (tickets[4], tickets[5], *fresh[:2]):
            trainer.finished(ticket, "ok")
        await _until(lambda: len(trainer.steps) == 2)
        assert trainer.steps[1]["mean_lag"] == 0.5  # half its samples (the carried group's) a policy behind
        blocked.cancel()
        await trainer.close()

    asyncio.run(scenario())
