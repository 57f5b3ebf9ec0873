"""A rehearsal against the model: what the emulated RL loop should run, and how far the model is from it.

`stampede rehearse` runs an RL configuration (the file `stampede model` reads) through the harness: agentic
rollouts whose generation, tool and reward times the engine draws, and an emulated trainer. This module says
what that run is (`plan_rehearsal`: in-flight rollouts, the trainer's settings, the engine's draws in the run's
`kind:params` syntax), and compares it with the model: the run's own latency model exported, then the closed
forms and the simulation on it with the same configuration (`predict`, `comparison_text`). The command line
(`harness.cli.rehearse`) only wires this to `stampede run` and prints.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.rlmodel.config import TOOL_FROM_LATENCY_MODEL, RLConfig, load_config
from harness.rlmodel.duration_dists import to_wire
from harness.rlmodel.result import ModelResult

COMPARED = (
    ("generator_samples_per_s", "generator samples/s", "{:.4g}"),
    ("trainer_samples_per_s", "trainer samples/s", "{:.4g}"),
    ("trainer_idle_ratio", "trainer idle ratio", "{:.1%}"),
    ("step_time_s", "step time (s)", "{:.4g}"),
    ("mean_staleness_steps", "mean staleness (steps)", "{:.3g}"),
)


@dataclass(frozen=True, slots=True)
class RehearsalPlan:
    config: RLConfig
    users: int  # rollouts kept in flight
    trainer: dict[str, Any]  # the emulated trainer's settings (the engine reads them as JSON)
    gen_time: str  # per turn, in `stampede run --gen-time` syntax
    tool_time: str | None  # per turn; None: the exported exec distribution stands for the tool calls
    turn_command: str
    reward_command: str | None


def plan_rehearsal(config_path: str | Path, steps: int | None = None, warmup_steps: int | None = None) -> RehearsalPlan:
    """What a rehearsal of this configuration runs; `steps` / `warmup_steps` override the config's."""
    try:
        config = load_config(config_path)
        raw = tomllib.loads(Path(config_path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{config_path}: {exc}") from None
    rollout = raw.get("rollout", {})
    batch = config.prompts * config.group_size
    dispatch = max(batch, math.ceil(batch * config.oversampling))
    users = dispatch if config.mode == "sync" else config.concurrency or dispatch
    for cap in (config.concurrency_cap, config.max_concurrent_sequences):
        if cap:
            users = min(users, cap)
    steps = steps if steps is not None else config.steps
    warmup = warmup_steps if warmup_steps is not None else config.warmup_steps
    if steps < 1 or warmup < 0:
        raise UsageError("--steps must be at least 1 and --warmup-steps at least 0")
    trainer = {
        "mode": config.mode,
        "batch": batch,
        "group_size": config.group_size,
        "samples_per_s": config.trainer_samples_per_s,
        "weight_sync_s": config.weight_sync_s,
        "async_level": config.async_level,
        "max_off_policy_steps": config.max_off_policy_steps,
        "oversampling": config.oversampling,
        "kill_unfinished": config.kill_unfinished,
        "zero_advantage_groups": config.zero_advantage_groups,
        "filtered_samples": config.filtered_samples,
        "steps": steps,
        "warmup_steps": warmup,
        "seed": config.seed,
    }
    tool = rollout.get("tool_s", TOOL_FROM_LATENCY_MODEL)
    from_latency_model = tool == TOOL_FROM_LATENCY_MODEL
    reward = rollout.get("reward_s", 0)
    return RehearsalPlan(
        config=config,
        users=users,
        trainer=trainer,
        gen_time=str(to_wire(rollout.get("generation_s", 0), "[rollout] generation_s")),
        tool_time=None if from_latency_model else str(to_wire(tool, "[rollout] tool_s")),
        turn_command="true" if from_latency_model else "sleep {tool_s}",
        reward_command=f"sleep {float(reward):g}" if reward and not from_latency_model else None,
    )


def predict(run_dir: Path, config: RLConfig) -> list[ModelResult]:
    """`stampede export` of this very run, then `stampede model` with the same configuration (both engines)."""
    from harness.results.latency_export import build_latency_model, write_latency_model
    from harness.rlmodel.closed_form import solve
    from harness.rlmodel.duration_dists import ConstantDist
    from harness.rlmodel.inputs import build_plan
    from harness.rlmodel.latency_input import load_latency_model
    from harness.rlmodel.simulation import simulate

    path = run_dir / "latency_model.json"
    write_latency_model(build_latency_model([run_dir]), path)
    if config.tool is None:
        # the exported exec distribution already holds every command the rollouts ran
        config = dataclasses.replace(config, reward=ConstantDist(0.0))
    plan = build_plan(config, load_latency_model(path).choose(None))
    return [solve(plan), simulate(plan)]


def comparison_text(measured: dict[str, Any], predicted: list[Any]) -> str:
    """Measured against each engine's prediction, with the relative error of each prediction."""
    header = ["", "rehearsal (measured)", *(f"model ({p.engine})" for p in predicted)]
    rows = [header]
    for key, label, pattern in COMPARED:
        value = measured.get(key)
        row = [label, pattern.format(value) if value is not None else "-"]
        for result in predicted:
            other = getattr(result, key, None)
            cell = pattern.format(other) if other is not None else "-"
            if value and other is not None and key != "mean_staleness_steps":
                cell += f" ({(other - value) / value:+.1%})"
            row.append(cell)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows)


__all__ = ["COMPARED", "RehearsalPlan", "comparison_text", "plan_rehearsal", "predict"]
