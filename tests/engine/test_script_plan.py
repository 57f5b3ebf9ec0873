"""Rollout plans as users write them: the shipped ones load, a mistake is one line naming the file, step and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.wire.plan import RolloutPlan
from harness.wire.script_plan import PLANS_DIR, ScriptPlan, load_plan
from providers.base import Capability


@pytest.mark.parametrize("name", ["swe-task", "grpo-fork", "grpo-fresh", "tool-latency"])
def test_shipped_plans_load_and_travel_to_the_engine_unchanged(name):
    plan = load_plan(name)
    assert plan.name == name and plan.steps[0].kind == "create"
    carried = RolloutPlan.from_dict(RolloutPlan(script=plan.to_dict()).to_dict())
    assert ScriptPlan.from_dict(carried.script or {}) == plan
    header = (PLANS_DIR / f"{name}.toml").read_text().splitlines()[0]
    assert header.startswith(f"# {name}:")  # each says what it models


def test_shipped_plans_need_what_they_model():
    assert set(load_plan("swe-task").required()) == {Capability.UPLOAD, Capability.DOWNLOAD}
    assert set(load_plan("grpo-fork").required()) == {Capability.UPLOAD, Capability.SNAPSHOT, Capability.FORK}
    assert load_plan("tool-latency").required() == {}
    swe = load_plan("swe-task")
    assert swe.steps[0].image_size_mb is not None and swe.steps[0].image_size_mb >= 1024  # a multi-GB image
    assert load_plan("grpo-fork").steps[load_plan("grpo-fork").fork_index or 0].copies == 8


def test_grpo_fresh_is_grpo_fork_without_the_fork():
    """The fork-vs-fresh comparison holds only while both plans do the same work: each fresh rollout redoes the
    preparation a group does once, then the same episode."""
    fork, fresh = load_plan("grpo-fork"), load_plan("grpo-fresh")
    assert fresh.fork_index is None and set(fresh.required()) == {Capability.UPLOAD}
    assert tuple(step for step in fork.steps if step.kind != "fork") == fresh.steps


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mine.toml"
    path.write_text(text)
    return str(path)


CREATE = '[[step]]\nkind = "create"\n'


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (CREATE + '[[step]]\nkind = "exec"\ncommand = ["true"]\nrepeat = "normal:3"\n', "step 1 (exec): repeat:"),
        (
            CREATE + '[[step]]\nkind = "upload"\ndest = "/w"\nfiles = "const:3"\nsize = 4\n',
            "step 1 (upload): unknown key 'size'",
        ),
        (CREATE + '[[step]]\nkind = "fork"\n', "step 1 (fork): copies: missing"),
        (CREATE + '[[step]]\nkind = "fork"\ncopies = 2.5\n', "step 1 (fork): copies: 2.5 is not a whole number"),
        (CREATE + '[[step]]\nkind = "exec"\n', "step 1 (exec): command: missing"),
        (CREATE + '[[step]]\nkind = "exec"\ncommand = ["x"]\nstream = "yes"\n', "step 1 (exec): stream:"),
        (CREATE + '[[step]]\nkind = "teleport"\n', "step 1: kind: 'teleport' is not one of"),
        ('[[step]]\nkind = "exec"\ncommand = ["true"]\n', "step 0 (exec): kind: the first step must be create"),
        (CREATE + '[[step]]\nkind = "terminate"\n[[step]]\nkind = "exec"\ncommand = ["x"]\n', "must be the last"),
        (
            CREATE + '[[step]]\nkind = "create"\nimage_size_mb = -3\n',
            "step 1 (create): image_size_mb: must be positive",
        ),
        (CREATE + '[[step]]\nkind = "upload"\n', "step 1 (upload): dest: give dest"),
        ("[plan]\nname = 3\n[[step]\n", "not TOML"),
        ('[plan]\nname = "x"\n', "no steps"),
    ],
)
def test_a_mistake_is_one_usage_error_naming_file_step_and_key(tmp_path, body, needle):
    path = write(tmp_path, body)
    with pytest.raises(UsageError) as caught:
        load_plan(path)
    message = str(caught.value)
    assert "\n" not in message and path in message and needle in message, message


def test_unknown_plan_names_the_shipped_ones():
    with pytest.raises(UsageError, match="shipped: grpo-fork, grpo-fresh, swe-task, tool-latency"):
        load_plan("swe-taks")


def test_capability_refusal_names_what_is_missing_and_what_is_offered():
    plan = load_plan("swe-task")
    with pytest.raises(UsageError) as caught:
        plan.check_capabilities("stub", frozenset({Capability.UPLOAD}))
    assert str(caught.value) == "provider stub cannot run plan swe-task: no download (offered: upload)"
    plan.check_capabilities("x", frozenset({Capability.UPLOAD, Capability.DOWNLOAD}))  # enough: no error
