"""`stampede rehearse --config rl.toml`: an emulated RL loop through the harness, measured for real.

From an RL configuration (the file `stampede model` reads) it runs the rehearse scenario against any provider:
agentic rollouts (turns, emulated generation time, tool calls) kept going by the generator, and an emulated
trainer in the engine that consumes finished rollouts at its configured rate, governs the generator as its
framework would (async backpressure and staleness; sync steps with oversampling kills) and records when it
waits. Then it exports the run's latency model and feeds it, with the same configuration, to the generator-side
model, and prints measured against predicted: how far `stampede model` is from what happened.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import tomllib
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.locust.settings import add_arguments as add_run_arguments
from harness.wire.durations import Distribution

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "rehearse.py"
COMPARED = (
    ("generator_samples_per_s", "generator samples/s", "{:.4g}"),
    ("trainer_samples_per_s", "trainer samples/s", "{:.4g}"),
    ("trainer_idle_ratio", "trainer idle ratio", "{:.1%}"),
    ("step_time_s", "step time (s)", "{:.4g}"),
    ("mean_staleness_steps", "mean staleness (steps)", "{:.3g}"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="RL configuration (TOML; see examples/rl-*.toml)")
    parser.add_argument("--steps", type=int, default=None, help="trainer steps to measure (default: the config's)")
    parser.add_argument("--warmup-steps", type=int, default=None, help="steps before measuring (default: config)")
    parser.add_argument("--no-compare", action="store_true", help="skip the comparison with `stampede model`")
    parser.add_argument("--stop-timeout", type=float, default=0.0, help=argparse.SUPPRESS)
    add_run_arguments(parser, locust=False)


def _spec(raw: Any, where: str) -> str:
    """A config distribution in the `--gen-time` syntax the engine draws from."""
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return f"const:{raw}"
    if isinstance(raw, str):
        text = raw
    elif isinstance(raw, dict):
        kind = raw.get("dist")
        params = {
            "constant": ("const", ("value",)),
            "lognormal": ("lognormal", ("median", "sigma")),
            "uniform": ("uniform", ("low", "high")),
            "exponential": ("exp", ("mean",)),
        }.get(str(kind))
        if params is None:
            raise UsageError(
                f"{where}: a rehearsal draws constant, lognormal, uniform or exponential times (got {kind!r})"
            )
        text = f"{params[0]}:{','.join(str(raw[key]) for key in params[1])}"
    else:
        raise UsageError(f"{where}: expected seconds or a distribution")
    try:
        return str(Distribution.parse(text))
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None


def _plan_args(args: argparse.Namespace) -> tuple[argparse.Namespace, Any, dict[str, Any]]:
    from harness.rlmodel.config import TOOL_FROM_LATENCY_MODEL, load_config

    try:
        config = load_config(args.config)
        raw = tomllib.loads(Path(args.config).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{args.config}: {exc}") from None
    rollout = raw.get("rollout", {})
    batch = config.prompts * config.group_size
    dispatch = max(batch, math.ceil(batch * config.oversampling))
    if config.mode == "sync":
        users = dispatch
    else:
        users = config.concurrency or dispatch
    for cap in (config.concurrency_cap, config.max_concurrent_sequences):
        if cap:
            users = min(users, cap)
    tool = rollout.get("tool_s", TOOL_FROM_LATENCY_MODEL)
    steps = args.steps if args.steps is not None else config.steps
    warmup = args.warmup_steps if args.warmup_steps is not None else config.warmup_steps
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
    values = dict(vars(args))
    values.update(
        scenario=str(SCENARIO),
        users=users,
        spawn_rate=None,
        run_time=None,
        commands="true",
        turns=str(config.turns),
        gen_time=_spec(rollout.get("generation_s", 0), "[rollout] generation_s"),
        tool_time=None if tool == TOOL_FROM_LATENCY_MODEL else _spec(tool, "[rollout] tool_s"),
        turn_command="true" if tool == TOOL_FROM_LATENCY_MODEL else "sleep {tool_s}",
        reward_command=None,
        retries=config.max_retries,
        retry_backoff=config.backoff_s,
        trainer=json.dumps(trainer),
        workers=0,
        master=False,
        worker=False,
        expect_workers=1,
        master_bind_host="*",
        master_host="127.0.0.1",
        master_port=5557,
    )
    reward = rollout.get("reward_s", 0)
    if reward and tool != TOOL_FROM_LATENCY_MODEL:
        values["reward_command"] = f"sleep {float(reward):g}"
    return argparse.Namespace(**values), config, trainer


def run(args: argparse.Namespace) -> int:
    from harness.cli.run import run as run_scenario
    from harness.locust.run_folder import new_run_id

    run_args, config, _ = _plan_args(args)
    run_args.run_id = args.run_id or new_run_id("rehearse", args.provider)
    code = run_scenario(run_args)
    run_dir = Path(args.out) / run_args.run_id
    measured_files = sorted(run_dir.glob("rehearsal-*.json"))
    if code != 0 or not measured_files:
        return code or 1
    measured = json.loads(measured_files[0].read_text())
    if "generator_samples_per_s" not in measured:
        print(f"stampede rehearse: the trainer finished {measured.get('steps_done', 0)} step(s), none measured")
        return 1
    print()
    print(f"rehearsal {run_args.run_id}: {measured['measured_steps']} measured steps (after warm-up), "
          f"rates in samples per vendor second (time scale {measured['time_scale']:g})")  # fmt: skip
    predicted = [] if args.no_compare else _predict(run_dir, config)
    print(comparison_text(measured, predicted))
    (run_dir / "rehearsal.json").write_text(
        json.dumps({"measured": measured, "model": [p.to_json() for p in predicted]}, indent=1, default=str) + "\n"
    )
    return 0


def _predict(run_dir: Path, config: Any) -> list[Any]:
    """`stampede export` of this very run, then `stampede model` with the same configuration."""
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
