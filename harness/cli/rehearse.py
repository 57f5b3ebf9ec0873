"""`stampede rehearse --config rl.toml`: an emulated RL loop through the harness, measured for real.

From an RL configuration (the file `stampede model` reads) it runs the rehearse scenario against any provider:
agentic rollouts (turns, emulated generation time, tool calls) kept going by the generator, and an emulated
trainer in the engine that consumes finished rollouts at its configured rate, governs the generator as its
framework would (async backpressure and staleness; sync steps with oversampling kills) and records when it
waits. Then it exports the run's latency model and feeds it, with the same configuration, to the generator-side
model, and prints measured against predicted: how far `stampede model` is from what happened. A simulated vendor
runs at the time scale throughout (no 1:1 pacing of create bursts, `STAMPEDE_SIM_BURST_PACING=0`): the loop's
rates are wall / time scale, and a paced burst would stretch its boots on that clock.

Wiring only: what to run and the comparison live in `harness.rlmodel.rehearsal`; this parses the arguments,
runs the scenario through `harness.cli.run` and prints.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from harness.locust.settings import add_arguments as add_run_arguments
from providers.sim.core.clock import BURST_PACING_ENV

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "rehearse.py"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="RL configuration (TOML; see examples/rl-*.toml)")
    parser.add_argument("--steps", type=int, default=None, help="trainer steps to measure (default: the config's)")
    parser.add_argument("--warmup-steps", type=int, default=None, help="steps before measuring (default: config)")
    parser.add_argument("--no-compare", action="store_true", help="skip the comparison with `stampede model`")
    parser.add_argument("--stop-timeout", type=float, default=0.0, help=argparse.SUPPRESS)
    add_run_arguments(parser, locust=False)


def _plan_args(args: argparse.Namespace) -> tuple[argparse.Namespace, Any, dict[str, Any]]:
    from harness.rlmodel.rehearsal import plan_rehearsal

    plan = plan_rehearsal(args.config, args.steps, args.warmup_steps)
    values = dict(vars(args))
    values.update(
        scenario=str(SCENARIO),
        users=plan.users,
        spawn_rate=None,
        run_time=None,
        commands="true",
        turns=str(plan.config.turns),
        gen_time=plan.gen_time,
        tool_time=plan.tool_time,
        turn_command=plan.turn_command,
        reward_command=plan.reward_command,
        retries=plan.config.max_retries,
        retry_backoff=plan.config.backoff_s,
        trainer=json.dumps(plan.trainer),
        workers=0,
        master=False,
        worker=False,
        expect_workers=1,
        master_bind_host="127.0.0.1",
        master_host="127.0.0.1",
        master_port=5557,
    )
    return argparse.Namespace(**values), plan.config, plan.trainer


def run(args: argparse.Namespace) -> int:
    from harness.cli.run import run as run_scenario
    from harness.locust.run_folder import new_run_id
    from harness.results.figures.vendor_loop import bound_note
    from harness.rlmodel.rehearsal import comparison_text, predict

    # the loop lives on one clock: a simulated vendor must not play a burst of creates 1:1 (providers.sim.core.clock)
    os.environ[BURST_PACING_ENV] = "0"
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
    print(
        f"rehearsal {run_args.run_id}: {measured['measured_steps']} measured steps (after warm-up), "
        f"rates in samples per vendor second (time scale {measured['time_scale']:g})"
    )
    prediction = None if args.no_compare else predict(run_dir, config)
    predicted = prediction.results if prediction else []
    print(comparison_text(measured, predicted))
    if prediction:
        print(f"model inputs: {prediction.inputs}")
    bound = bound_note(run_dir)
    if bound:  # the model draws each rollout's latency on its own; a stall delayed them all at once
        print(f"{bound}; the measured side carries it, the model's independent draws do not")
    (run_dir / "rehearsal.json").write_text(
        json.dumps(
            {
                "measured": measured,
                "model": [p.to_json() for p in predicted],
                "model_inputs": prediction.inputs if prediction else None,
                "bound": bound or None,  # what bound the measured figures besides the vendor (vendor_loop.bound_note)
            },
            indent=1,
            default=str,
        )
        + "\n"
    )
    return 0
