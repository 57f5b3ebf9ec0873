"""`stampede model --latency latency_model.json --config rl.toml [--sweep KIND]`: wiring."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from harness.errors import UsageError, one_line_errors


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--latency", required=True, metavar="JSON", help="a latency model from `stampede export`")
    parser.add_argument("--config", required=True, metavar="TOML", help="the RL configuration (see examples/rl-*.toml)")
    parser.add_argument(
        "--vendor",
        default=None,
        metavar="PROVIDER/PROFILE",
        help="which vendor of the latency model (default: [sandbox] vendor, or the only one)",
    )
    parser.add_argument(
        "--sweep",
        choices=("concurrency", "oversampling", "staleness_threshold"),
        default=None,
        help="run the model over a range and recommend a setting (staleness_threshold: verl mode)",
    )
    parser.add_argument(
        "--values", default=None, metavar="A,B,...", help="sweep values (default: a range around the config's)"
    )
    parser.add_argument(
        "--engine",
        choices=("both", "closed", "simulation"),
        default="both",
        help="closed forms, the SimPy simulation, or both side by side (default)",
    )
    parser.add_argument("--steps", type=int, default=None, help="simulated trainer steps (default: [simulation] steps)")
    parser.add_argument(
        "-o",
        "--out",
        default=None,
        metavar="DIR",
        help="write model.json (and sweep.png) here (default: ./stampede-model when sweeping)",
    )


def _values(text: str | None, kind: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--values must be comma-separated numbers, got {text!r}") from None
    if kind == "staleness_threshold":  # 0 is verl's synchronous end of the range
        if not values or any(v < 0 or v != v for v in values):
            raise UsageError("--values must be numbers of at least 0 for --sweep staleness_threshold")
    elif not values or any(v <= 0 for v in values):
        raise UsageError("--values must be positive numbers")
    return values


def _fmt(result: Any, key: str, pattern: str) -> str:
    """Shares as their pattern says (`12.5%`); every other figure in plain units (`68.9k`, never `6.886e+04`)."""
    from harness.results.render.plain_units import plain

    value = getattr(result, key)
    try:
        return pattern.format(value) if "%" in pattern else plain(value)
    except (ValueError, TypeError):
        return str(value)


def comparison_text(closed: Any, simulated: Any) -> str:
    from harness.results.render.report_tables import Table
    from harness.rlmodel.result import HEADLINE

    results = [r for r in (closed, simulated) if r is not None]
    header = [
        "quantity",
        *(
            "closed form" + ("" if r.holds else " (approx.)") if r.engine == "closed form" else "simulation"
            for r in results
        ),
    ]
    if len(results) == 2:
        header.append("diff")
    rows = []
    for key, label, pattern in HEADLINE:
        row = [label, *(_fmt(r, key, pattern) for r in results)]
        if len(results) == 2:
            a, b = getattr(results[0], key), getattr(results[1], key)
            finite = all(x == x and abs(x) != float("inf") for x in (a, b))
            if not finite:
                row.append("-")
            elif "%" in pattern:  # shares: the difference in percentage points
                row.append(f"{100 * (b - a):+.1f} pt" if max(abs(a), abs(b)) >= 5e-4 else "-")
            else:
                row.append(f"{100 * (b - a) / a:+.1f}%" if abs(a) > 1e-9 else "-")
        rows.append(row)
    return Table("", header, rows, left=frozenset({0})).to_text()


IDLE_METHOD = (
    "idle caused by sandboxes: trainer idle per step as modelled minus idle per step with an ideal sandbox (zero "
    "startup, teardown and init failures; same work, exec failures and vendor limits), same engine"
)


def dollars_text(costs: Sequence[Any]) -> str:
    from harness.results.render.plain_units import plain, usd
    from harness.results.render.report_tables import Table
    from harness.rlmodel.cost import DOLLAR_ROWS

    header = ["USD", *(c.engine for c in costs)]
    rows = []
    for key, label in DOLLAR_ROWS:
        values = [getattr(c, key) for c in costs]
        money = "$" in label  # one row is idle seconds, not dollars
        rows.append([label, *(usd(v) if money else plain(v) if v is not None else "unknown" for v in values)])
    return Table("", header, rows, left=frozenset({0})).to_text()


@one_line_errors
def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from harness.rlmodel.closed_form import solve
    from harness.rlmodel.config import load_config
    from harness.rlmodel.cost import dollars, priced, pricing
    from harness.rlmodel.inputs import build_plan
    from harness.rlmodel.latency_input import load_latency_model
    from harness.rlmodel.simulation import simulate
    from harness.rlmodel.sweep import default_values, run_sweep, sweep_plot, sweep_table

    if args.steps is not None and args.steps < 1:
        raise UsageError("--steps must be at least 1")
    values = _values(args.values, args.sweep)
    if values is not None and args.sweep is None:
        raise UsageError("--values needs --sweep (concurrency, oversampling or staleness_threshold)")
    config = load_config(args.config)
    if args.sweep == "staleness_threshold" and config.mode != "verl":
        raise UsageError(f"--sweep staleness_threshold is verl's knob; {args.config} runs mode = {config.mode!r}")
    vendor = load_latency_model(args.latency).choose(args.vendor or config.vendor)
    plan = build_plan(config, vendor)
    out = Path(args.out) if args.out else (Path("stampede-model") if args.sweep else None)
    print(
        f"config {args.config}: B={config.prompts} × G={config.group_size} = {plan.samples_per_step} samples per step, "
        f"{config.mode}, trainer {plan.trainer_rate:.4g} samples/s"
    )
    print(f"vendor {vendor.name}: {plan.sandbox.describe()}")
    for limit in plan.limits:
        print(f"vendor limit: {limit.describe()}")
    for note in plan.start_notes:
        print(note)
    pricing_ = pricing(config, vendor.provider, vendor.profile)
    for line in pricing_.lines():
        print(line)
    print(
        f"effective concurrency {plan.concurrency} (limited by {plan.concurrency_limited_by})"
        + (
            f"; {plan.dispatched_per_step} dispatched per step, generation ends at {plan.finish_target} successes"
            if config.mode == "sync"
            else ""
        )
        + (
            f"; prime-rl: {plan.concurrency_target // config.group_size} groups of {config.group_size} in flight, "
            f"max_async_level {config.max_async_level}{' (strict)' if config.strict_async_level else ''}, "
            f"max_off_policy_steps {config.max_off_policy_steps}"
            if config.mode == "prime-rl"
            else ""
        )
    )
    document: dict[str, Any] = {
        "config": args.config,
        "latency_model": args.latency,
        "vendor": vendor.name,
        "limits": [dataclasses.asdict(limit) for limit in plan.limits],
        "infrastructure_tax": plan.tax.to_dict() if plan.tax is not None else None,
        "pricing": {
            "price": dataclasses.asdict(pricing_.price) if pricing_.price else None,
            "basis": pricing_.basis,
            "sandbox_usd_per_s": pricing_.sandbox_per_s,
            "trainer_gpu_usd_per_s": pricing_.gpu_per_s,
            "notes": list(pricing_.notes),
        },
    }
    if args.sweep is None:
        closed = solve(plan) if args.engine in ("both", "closed") else None
        simulated = simulate(plan, steps=args.steps) if args.engine in ("both", "simulation") else None
        print()
        print(comparison_text(closed, simulated))
        for result in (closed, simulated):
            if result is not None and result.notes:
                print(f"{result.engine}: " + "; ".join(result.notes))
        if plan.tax is not None:
            from harness.results.figures.step_figures import format_tax

            print(format_tax(plan.tax, f"infrastructure tax of this shape ({config.turns} tool calls per trajectory)"))
        if simulated is not None and simulated.staleness_distribution and config.mode != "sync":
            dist = ", ".join(f"{lag}: {100 * share:.1f}%" for lag, share in simulated.staleness_distribution.items())
            print(f"staleness (policy versions behind, share of trained samples): {dist}")
        costs = [
            priced(plan, r, pricing_, solve if r is closed else (lambda p: simulate(p, steps=args.steps)))
            for r in (closed, simulated)
            if r is not None
        ]
        print()
        print(dollars_text(costs))
        print(IDLE_METHOD)
        document["results"] = [r.to_json() for r in (closed, simulated) if r is not None]
        document["dollars"] = [c.to_json() for c in costs]
    else:
        sweep = run_sweep(
            args.sweep,
            config,
            vendor,
            values or default_values(args.sweep, config),
            args.engine,
            args.steps,
            pricing_=pricing_,
        )
        print()
        print(sweep_table(sweep).to_text())
        print()
        print(sweep.recommendation)
        document["sweep"] = {
            "kind": sweep.kind,
            "points": [
                {
                    "value": p.value,
                    "results": [r.to_json() for r in (p.closed, p.simulated) if r is not None],
                    "dollars": [dollars(r, pricing_).to_json() for r in (p.closed, p.simulated) if r is not None],
                }
                for p in sweep.points
            ],
            "recommendation": sweep.recommendation,
        }
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / "model.json").write_text(json.dumps(document, indent=1, default=str) + "\n")
            if args.sweep is not None:
                (out / "sweep.png").write_bytes(sweep_plot(sweep))
        except OSError as exc:
            raise UsageError(f"cannot write to {out}: {exc}") from None
        print(f"written: {out / 'model.json'}" + (f", {out / 'sweep.png'}" if args.sweep else ""))
    return 0


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"stampede: error: {message} (see {self.prog} --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _OneLineParser(
        prog="stampede model",
        description="Generator throughput and trainer idle from a latency model and an RL config.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
