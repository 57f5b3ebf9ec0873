"""The emulated trainer of `stampede rehearse`: what reaches its queue, and when."""

from __future__ import annotations

import asyncio

from harness.engine.trainer import TrainerEmulator, TrainerSettings


def test_a_groups_samples_reach_the_trainer_together_when_its_last_member_ended(tmp_path):
    """GRPO-style frameworks score a group as a whole: one straggler holds back its siblings' samples (and so
    adds to their staleness), and a member that failed still ends the group."""

    async def scenario() -> None:
        trainer = TrainerEmulator(TrainerSettings(mode="async", batch=4, group_size=2, async_level=0), tmp_path, "w")
        tickets = [await trainer.admit() for _ in range(4)]
        assert [t.group for t in tickets] == [0, 0, 1, 1]
        trainer.finished(tickets[0], "ok")
        assert len(trainer.queue) == 0  # its sibling is still running
        trainer.finished(tickets[1], "ok")
        assert len(trainer.queue) == 2
        trainer.finished(tickets[3], "failed")
        trainer.finished(tickets[2], "ok")
        assert len(trainer.queue) == 3 and trainer.counts["failed"] == 1
        assert not trainer.group_ended and not trainer.group_samples  # nothing left behind

    asyncio.run(scenario())


def test_prime_rl_keeps_its_groups_in_flight_and_gates_batches_on_the_loaded_policy(tmp_path):
    """prime-rl's Scheduler: oversampling x batch / G groups in flight, a group replaced only when consumed into a
    batch; batch n waits for the policy of step n - max_async_level; at a weight update a group past
    max_off_policy_steps is cancelled (the engine is told which) and its rollouts may start again at once."""

    async def scenario() -> None:
        killed: list[int] = []
        settings = TrainerSettings(mode="prime-rl", batch=2, group_size=2, oversampling=2.0, max_async_level=1,
                                   max_off_policy_steps=1, samples_per_s=1e6, steps=50, warmup_steps=0)  # fmt: skip
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
            if trainer.version >= 1:
                break
        # weight updates: groups 1 and 2 (in flight since policy 0) have survived one; a second cancels both
        assert trainer.loaded == 1 and trainer.live_groups == {1: 1, 2: 1}
        permits = trainer.permits
        trainer._load(2)
        assert killed == [1, 2] and trainer.cancelled_groups == {1, 2} and trainer.counts["stale"] == 2
        assert trainer.permits == permits + 4  # their replacements may start at once
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
        assert refill.step == 0 and trainer.slime_allowed[0] == 8
        second = [refill] + [await trainer.admit() for _ in range(3)]
        trainer.finished(first[2], "ok")
        trainer.finished(first[3], "ok")  # group 1 kept
        trainer.finished(second[0], "ok")
        trainer.finished(second[1], "ok")  # group 2 kept: B groups, so the step's rollouts still running are killed
        assert killed == [0] and trainer._batch_ready() and len(trainer.queue) == 4
        trainer.finished(second[2], "ok", killed=True)
        trainer.finished(second[3], "ok", killed=True)
        assert len(trainer.queue) == 4 and trainer.counts["killed"] == 2  # nothing of a killed group is kept

    asyncio.run(scenario())
