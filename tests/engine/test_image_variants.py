"""A plan's create step may draw one of N images (`image_variants`), as SWE-bench runs one image per task instance:
a cold cache then pulls many images, not one, which is what stretches a 960 burst's startups into minutes.

What a user relies on: each rollout asks the vendor for one variant of the plan's image (its tag kept, a simulated
vendor's catalogue pattern still matching), the draw is the rollout's own (a retried rollout asks for the same
image), and a plan that asks for variants without naming the image is refused in one line.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from harness.engine.rollout import RolloutContext, SandboxRegistry
from harness.engine.script_rollout import run_script_rollout
from harness.errors import UsageError
from harness.wire.plan import RolloutPlan
from harness.wire.records import RolloutIdentity
from harness.wire.script_plan import parse_plan, variant_image
from providers.base import SandboxSpec
from tests.support.steps_provider import StepsProvider

VARIANTS = 8


def plan_of(**create: Any) -> Any:
    steps = [{"kind": "create", **create}, {"kind": "exec", "command": ["true"], "name": "probe"}]
    return parse_plan({"plan": {"name": "t"}, "step": steps}, "t.toml")


def context(rollout_id: str) -> RolloutContext:
    identity = RolloutIdentity(
        run_id="run", worker="w", rollout_id=rollout_id, provider="steps", profile="p", scenario="s",
        stage="01-x", target_users=1, inflight_at_submit=1,
    )  # fmt: skip
    return RolloutContext(identity)


async def images_asked(script: Any, rollout_ids: list[str]) -> list[str | None]:
    provider = StepsProvider({})
    asked: list[str | None] = []
    create = provider.create

    async def record(spec: SandboxSpec) -> Any:
        asked.append(spec.image)
        return await create(spec)

    provider.create = record  # type: ignore[method-assign]
    plan = RolloutPlan(script=script.to_dict(), exec_timeout_s=10)
    registry = SandboxRegistry()
    records = await asyncio.gather(
        *(run_script_rollout(provider, plan, context(r), lambda op: None, registry, script) for r in rollout_ids)
    )
    assert all(record.outcome == "ok" for record in records)
    return asked


async def test_each_rollout_asks_for_one_of_the_plans_image_variants() -> None:
    script = plan_of(image="swebench/sweb.eval.task:v1", image_size_mb=8000, image_variants=VARIANTS)
    ids = [f"r{i}" for i in range(64)]
    asked = await images_asked(script, ids)
    assert all(re.fullmatch(r"swebench/sweb\.eval\.task-000[0-7]:v1", str(image)) for image in asked), asked
    assert 1 < len(set(asked)) <= VARIANTS
    again = await images_asked(script, list(reversed(ids)))
    assert sorted(map(str, again)) == sorted(map(str, asked))  # each rollout's draw is its own, not the order's


async def test_without_variants_every_rollout_asks_for_the_plans_image() -> None:
    asked = await images_asked(plan_of(image="swebench/sweb.eval.task:v1"), ["a", "b", "c"])
    assert asked == ["swebench/sweb.eval.task:v1"] * 3


def test_a_variant_keeps_the_tag_and_a_registry_port() -> None:
    assert variant_image("swebench/task:v1", 7) == "swebench/task-0007:v1"
    assert variant_image("registry.local:5000/task", 12) == "registry.local:5000/task-0012"


def test_variants_without_an_image_are_one_clear_error() -> None:
    with pytest.raises(UsageError, match=r"step 0 \(create\): image_variants: needs image"):
        plan_of(image_size_mb=4096, image_variants=960)
    with pytest.raises(UsageError, match=r"image_variants: 1.5 is not a whole number"):
        plan_of(image="x", image_variants=1.5)
