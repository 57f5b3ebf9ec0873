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
    if config.mode == "slime":  # one round in flight; refills wait for a free one (as the model's slots do)
        users = config.concurrency or config.slime_round_groups * config.group_size
    if config.mode == "prime-rl":  # its groups in flight, each of G rollouts; `concurrency` caps them
        in_flight = config.prime_rl_groups * config.group_size
        users = min(in_flight, config.concurrency or in_flight)
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
        "max_async_level": config.max_async_level,
        "strict_async_level": config.strict_async_level,
        "staleness_threshold": config.staleness_threshold,
        "trigger_parameter_sync_step": config.trigger_parameter_sync_step,
        "partial_rollout": config.partial_rollout,
        "max_lag": config.max_lag,
        "ring_buffer_size": config.ring_buffer_size,
        "max_groups": max(users // config.group_size, 1),
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


@dataclass(frozen=True, slots=True)
class Prediction:
    results: list[ModelResult]  # closed form, simulation
    inputs: str  # what the model was fed, for the reader


def predict(run_dir: Path, config: RLConfig) -> Prediction:
    """`stampede export` of this very run (written beside it), then `stampede model` with the same configuration
    (both engines), fed the run on its own loop clock.

    The rehearsal's loop runs at the time scale in full: a harness millisecond (a poll window, a round trip, a
    late wake-up of a busy engine) holds it up `1 / time_scale` times as long in the rates it reports, unlike in
    the exported vendor seconds. So the model gets the latency model with every duration wall / time scale, and
    the generation moved by what the rollouts held beyond their phases and their draws; otherwise it predicts a
    faster loop than the harness could run, by as much as the machine is busy. Only rollouts that ended within the measured steps
    count, as in the measured rates: the warm-up's opening burst of creates is slower than the steady loop."""
    import pandas as pd

    from harness.results.export.latency_export import build_latency_model, write_latency_model
    from harness.results.read.dataset import load_rollout_frame, read_run_info
    from harness.rlmodel.closed_form import solve
    from harness.rlmodel.duration_dists import ConstantDist, ShiftedDist
    from harness.rlmodel.inputs import build_plan
    from harness.rlmodel.latency_input import latency_model_from_document
    from harness.rlmodel.simulation import simulate

    write_latency_model(build_latency_model([run_dir]), run_dir / "latency_model.json")
    steps = pd.read_parquet(run_dir / "trainer")
    steps = steps[steps["measured"]]
    window = (float(steps["t_wait_start"].min()), float(steps["t_end"].max()))
    loop_model = latency_model_from_document(
        build_latency_model([run_dir], clock="loop", ended_within=window), f"{run_dir} (loop clock, measured steps)"
    )
    if config.tool is None:
        # the exported exec distribution already holds every command the rollouts ran
        config = dataclasses.replace(config, reward=ConstantDist(0.0))
    scale = read_run_info(run_dir).to_vendor_seconds()
    columns = ("outcome", "turns", "gen_s", "t_submit", "create_s", "ready_s", "exec_s", "terminate_s", "total_s")
    rows = load_rollout_frame(run_dir, columns)
    ended = rows["t_submit"] + rows["total_s"]
    done = rows[(rows["outcome"] == "ok") & (rows["turns"] > 0) & (ended >= window[0]) & (ended < window[1])]
    inputs = (
        f"the latency model of the rollouts that ended in the measured steps, on the loop's clock (every "
        f"duration wall / time scale {1 / scale:g})"
    )
    if len(done):
        # what a rollout held its slot for beyond its phases and its drawn generation: the loop's oversleep
        phases = done[["create_s", "ready_s", "exec_s", "terminate_s"]].fillna(0.0).sum(axis=1)
        late = float((done["total_s"] - phases - done["gen_s"].fillna(0.0)).sum()) * scale / float(done["turns"].sum())
        configured = config.generation.mean()
        config = dataclasses.replace(config, generation=ShiftedDist(config.generation, late, "as the loop slept it"))
        inputs += (
            f", and the generation as the loop slept it: {late * 1000:+.0f} ms per turn beyond its draws "
            f"({late / configured:+.1%} of the configured {configured:.3g} s; a busy engine wakes late)"
        )
    plan = build_plan(config, loop_model.choose(None))
    return Prediction([solve(plan), simulate(plan)], inputs)


def _error(key: str, predicted: float, measured: float) -> str:
    """The prediction's error, relative (%) where the measured value is not zero, and absolute where relative
    alone misleads: percentage points for a ratio, steps for staleness."""
    # a ratio measured near zero (a trainer-bound loop's idle) has no useful relative error: points only
    relative = measured and not (key == "trainer_idle_ratio" and abs(measured) < 0.01)
    parts = [f"{(predicted - measured) / measured:+.1%}"] if relative else []
    if key == "trainer_idle_ratio":
        parts.append(f"{(predicted - measured) * 100:+.1f} pt")
    elif key == "mean_staleness_steps":
        parts.append(f"{predicted - measured:+.2f} steps")
    return ", ".join(parts)


def comparison_text(measured: dict[str, Any], predicted: list[Any]) -> str:
    """Measured against each engine's prediction, with each prediction's error (relative; and in points or steps
    for the idle ratio and staleness)."""
    header = ["", "rehearsal (measured)", *(f"model ({p.engine})" for p in predicted)]
    rows = [header]
    for key, label, pattern in COMPARED:
        value = measured.get(key)
        row = [label, pattern.format(value) if value is not None else "-"]
        for result in predicted:
            other = getattr(result, key, None)
            cell = pattern.format(other) if other is not None else "-"
            if other is not None and value is not None:
                cell += f" ({_error(key, other, value)})"
            row.append(cell)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    for result in predicted:
        if not getattr(result, "holds", True):
            lines.append(f"the {result.engine} does not hold here: {'; '.join(result.notes)}")
    return "\n".join(lines)


__all__ = ["COMPARED", "Prediction", "RehearsalPlan", "comparison_text", "plan_rehearsal", "predict"]
