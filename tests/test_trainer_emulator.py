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
