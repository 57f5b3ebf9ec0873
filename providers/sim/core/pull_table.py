"""960 swe-task-like starts with a cold image cache against a warm one: the TTI table and the pull's share of it.

`python -m providers.sim.core.pull_table` prints the table issue 30 asks for (markdown; `--profile`, `--n`,
`--image-mb`, `--seed`, `--set KEY=VALUE` to move a profile value, `--start-collapse` to keep the profile's boot
power law, `--brief` its short form alone). The workload is `simulate_burst` on a virtual clock: `n` creates at
once, each declaring its image's size as a rollout plan does (the `stampede-image-mb` label), waiting until RUNNING,
one command, terminate. Three rows: every rollout on one image with the nodes' caches cold; one image per task
(SWE-bench's per-instance images, which share the catalogue's base layers) cold; and the warm cache (every initial
node holds every image). The vendor is modal-like with its boot power law switched off (`boot.congestion_exponent =
0`, as `mechanisms_table.py` does), so the rows differ only in their pulls: with it on (`--start-collapse`) a
pulling sandbox does not count toward it, but one image's pulls end together and then 960 boots start at once past
the knee, so cold and warm both show the calibrated 960 collapse (TTI p50 ~20 min) and the pulls' share of TTI falls
to ~1%. TTI = create -> first command done; pull = placed -> image pulled; pull share = the rollouts' pull seconds
over their TTI seconds; quantiles nearest-rank, untrimmed.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from foundation.quantiles import nearest_rank
from providers.sim.core.experiments import BurstResult, simulate_burst
from providers.sim.core.profile import Profile, ProfileError, load_profile
from providers.sim.core.records import CreateRequest

N = 960
IMAGE_MB = 8000.0  # issue 30's swe-task: "a multi-GB image"
IMAGE = "swebench/sweb.eval.x86_64.task"  # matches modal-like's catalogue (SWE-bench's shared base layers)
BASE_PROFILE = "modal-like"
BASE_OVERRIDES: dict[str, object] = {"boot.congestion_exponent": 0.0}
LIFETIME_S = 86400.0  # Modal's longest sandbox lifetime: no rollout is reaped while it waits for its pull


@dataclass(frozen=True, slots=True)
class Row:
    """One cache setting's outcome over `n` rollouts."""

    name: str
    ok: int
    n: int
    tti: tuple[float, float, float]  # p50, p90, p99 (vendor seconds)
    pull: tuple[float, float, float]
    pull_share: float  # pull seconds over TTI seconds, over the rollouts that got a sandbox
    moved_gb: float


def row(name: str, result: BurstResult, moved_mb: float) -> Row:
    ok = [s for s in result.samples if s.ok and s.tti_s is not None]
    ttis = sorted(s.tti_s for s in ok if s.tti_s is not None)
    pulls = sorted(s.pull_s for s in ok)
    total = sum(ttis)
    return Row(
        name,
        len(ok),
        result.n,
        tuple(nearest_rank(ttis, q) for q in (0.5, 0.9, 0.99)),  # type: ignore[arg-type]
        tuple(nearest_rank(pulls, q) for q in (0.5, 0.9, 0.99)),  # type: ignore[arg-type]
        sum(pulls) / total if total > 0 else math.nan,
        moved_mb / 1000.0,
    )


def run(profile: Profile, n: int = N, image_mb: float = IMAGE_MB, seed: int = 0, tasks: int | None = None) -> list[Row]:
    """The three rows: one image cold, one image per task cold (`tasks` images, default `n`), warm."""
    request = CreateRequest(image=IMAGE, labels=("stampede-sim-pulls",), lifetime_s=LIFETIME_S)
    cases = (
        ("cold cache, one image", True, 1),
        (f"cold cache, one image per task ({tasks or n})", True, tasks or n),
        ("warm cache", False, 1),
    )
    rows = []
    for name, cold, images in cases:
        result = simulate_burst(
            profile, n, seed=seed, request=request, image_mb=image_mb, images=images, cold_cache=cold
        )
        rows.append(row(name, result, float(result.stats["pulled_mb"])))
    return rows


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| cache | ok | TTI p50 | TTI p90 | TTI p99 | pull p50 | pull p99 | pull share of TTI | pulled |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t50, t90, t99 = (_dur(x) for x in r.tti)
        p50, _, p99 = (_dur(x) for x in r.pull)
        share = "-" if math.isnan(r.pull_share) else f"{r.pull_share:.0%}"
        lines.append(
            f"| {r.name} | {r.ok}/{r.n} | {t50} | {t90} | {t99} | {p50} | {p99} | {share} | {r.moved_gb:,.0f} GB |"
        )
    return "\n".join(lines)


def brief_table(rows: Sequence[Row]) -> str:
    """The table's short form (`--brief`: cache, ok, TTI p50 and p99, the pull's share), as docs/rollout-plans.md
    shows it; tests/sim/test_sim_image_pulls.py checks that page holds this one."""
    lines = ["| cache | ok | TTI p50 | TTI p99 | pull share of TTI |", "|---|---|---|---|---|"]
    for r in rows:
        name = re.sub(r" \(\d+\)$", "", r.name).replace(" cache", "")  # "cold cache, one image per task (960)"
        share = "-" if math.isnan(r.pull_share) else f"{r.pull_share:.0%}"
        lines.append(f"| {name} | {r.ok}/{r.n} | {_dur(r.tti[0])} | {_dur(r.tti[2])} | {share} |")
    return "\n".join(lines)


def _dur(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m providers.sim.core.pull_table", description=__doc__)
    parser.add_argument("--profile", default=BASE_PROFILE, help=f"profile name or file (default {BASE_PROFILE})")
    parser.add_argument("--n", type=int, default=N, help=f"rollouts created at once (default {N})")
    parser.add_argument("--image-mb", type=float, default=IMAGE_MB, help=f"the image's size (default {IMAGE_MB:g})")
    parser.add_argument("--tasks", type=int, default=None, help="distinct images in the per-task row (default n)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="move a profile value")
    parser.add_argument(
        "--start-collapse", action="store_true", help="keep the profile's boot power law (boot.congestion_exponent)"
    )
    parser.add_argument(
        "--brief", action="store_true", help="the short table (cache, ok, TTI p50 and p99, pull share) alone"
    )
    args = parser.parse_args(argv)
    if args.n < 1 or not args.image_mb >= 0 or (args.tasks is not None and args.tasks < 1):
        parser.error("--n and --tasks must be >= 1, --image-mb >= 0")
    overrides: dict[str, object] = {} if args.start_collapse else dict(BASE_OVERRIDES)
    for text in args.set:
        key, eq, value = text.partition("=")
        if not eq:
            parser.error(f"--set {text!r}: expected KEY=VALUE")
        overrides[key] = value
    try:
        profile = load_profile(args.profile).with_overrides(overrides)
    except ProfileError as exc:
        parser.error(str(exc))
    rows = run(profile, args.n, args.image_mb, args.seed, args.tasks)
    if args.brief:
        print(brief_table(rows))
        return 0
    print(describe(profile, args.n, args.image_mb, overrides))
    print()
    print(table(rows))
    return 0


def describe(profile: Profile, n: int, image_mb: float, overrides: Mapping[str, object]) -> str:
    spec = profile.image
    moved = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "none"
    return (
        f"{n} creates at once of a {image_mb:g} MB image on {profile.name} (overrides: {moved}); "
        f"{profile.pool.initial_nodes} initial nodes x {profile.pool.slots_per_node:g} slots; pulls at "
        f"{spec.node_bandwidth_mb_s:g} MB/s a node, {spec.registry_bandwidth_mb_s:g} MB/s the registry; "
        f"catalogue {'; '.join(spec.catalogue) or 'none'}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
