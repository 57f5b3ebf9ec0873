"""Where the seconds of a small `stampede run` go: the whole command, from typing it to the shell prompt.

The command measured is a burst of 100 on the ideal profile (`stampede run --profile ideal --scenario burst
--users 100`), whose work itself (first submit to the last rollout's end, read from its rows) is about 2.2 s:
each rollout runs the default plan's commands. Everything else is the harness's fixed cost, which the target
bounds at 1.5 s. Each process of the run appends its named instants to the file `STAMPEDE_PHASE_LOG` names
(`foundation/phase_marks.py`); the table splits the wall time between consecutive instants (median of the
rounds), so the phases add up to the whole command.

`--against DIR` runs the same command from another checkout too (e.g. `git archive REV | tar -x -C DIR`), interleaved
round by round, and prints both side by side: a checkout without the marks gives its whole, work and fixed cost.

    python bench/bench_startup.py                      # 3 rounds, ~30 s
    python bench/bench_startup.py --rounds 5 --against /tmp/stampede-before

Everything runs on 127.0.0.1 and ends by itself.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from foundation.phase_marks import VARIABLE  # noqa: E402  (the checkout this file is in, whatever is installed)

COMMAND = ["run", "--profile", "ideal", "--scenario", "burst", "--progress-interval", "0"]
TARGET_BEYOND_WORK_S = 1.5

# (the instant a phase ends, what the phase is): consecutive instants of the command's own process and its engine's
PHASES: tuple[tuple[str, str], ...] = (
    ("command: interpreter up", "interpreter start"),
    ("command: gevent patched", "gevent's patching (then the engine and vendor start: head start)"),
    ("command: locust imported", "Locust's import (the rest of it)"),
    ("command: its module imported", "stampede run's own imports"),
    ("command: options checked", "options, provider and profile checked"),
    ("command: locust runner made", "scenario loaded, Locust runner made"),
    ("command: vendor and engine started", "until the vendor and engine are up (readers import meanwhile)"),
    ("engine configured", "run folder, run.json, engine configured"),
    ("shape: step 1 released", "users spawned, at the gate, released"),
    ("work: last rollout ended", "the work: first submit to the last rollout's end"),
    ("shape: last step ended", "the step's end seen by the shape"),
    ("end: test stopped", "Locust stops the users"),
    ("end: Locust's reports written", "Locust's CSV and HTML reports written (now while the engine drains)"),
    ("end: engine drained", "engine drained (sandboxes swept, shards flushed)"),
    ("end: vendor truth saved", "vendor's record fetched and written"),
    ("end: tables compacted", "tables compacted"),
    ("end: summary printed", "rows read, summary.json, summary printed"),
    ("command: processes stopped", "engine and vendor processes gone"),
    ("command: exited", "interpreter exit"),
)
WORK_STARTS = "engine process: first rollout"


@dataclass
class Round:
    wall_s: float
    work_s: float
    phases: dict[str, float] = field(default_factory=dict)  # a phase's end instant: its seconds
    cpu_s: float = float("nan")  # user + system CPU of the command and every process it started and waited for

    @property
    def beyond_work_s(self) -> float:
        return self.wall_s - self.work_s


def one_run(checkout: Path, users: int) -> Round:
    """One `stampede run` of the burst from `checkout`, timed from just before its process starts to its exit."""
    out = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    marks = out / "phases.log"
    env = {**os.environ, VARIABLE: str(marks), "PYTHONPATH": str(checkout)}
    argv = [sys.executable, "-m", "harness.cli", *COMMAND, "--users", str(users), "--out", str(out / "results")]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    result = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=300)
    ended = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    if result.returncode != 0:
        raise RuntimeError(f"stampede run failed ({result.returncode}): {result.stderr[-800:]}")
    first, last = work_span(out / "results")
    instants = read_marks(marks)
    if not instants:  # a checkout without the marks: its whole, work and fixed cost only
        return Round(ended - started, last - first, cpu_s=cpu_s)
    instants["work: last rollout ended"] = last
    instants["command: exited"] = ended
    phases: dict[str, float] = {}
    previous = started
    # in the order they happened (a checkout may order two phases otherwise): each from the instant before it
    for name in sorted((name for name, _ in PHASES if name in instants), key=instants.__getitem__):
        phases[name] = instants[name] - previous
        previous = instants[name]
    if WORK_STARTS in instants and "shape: step 1 released" in phases:  # the engine's first submit, not the shape's
        first = instants[WORK_STARTS]
    return Round(ended - started, last - first, phases, cpu_s)


def read_marks(path: Path) -> dict[str, float]:
    """Each named instant's first time (epoch seconds)."""
    instants: dict[str, float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            stamp, _, name = line.split(" ", 2)
            instants.setdefault(name, float(stamp))
    return instants


def work_span(results: Path) -> tuple[float, float]:
    """The first submit and the last rollout's end, epoch seconds, from the run's rows."""
    from harness.results.read.dataset import load_rollouts  # t_submit as float epoch seconds, either layout

    (run_dir,) = [path for path in results.iterdir() if path.is_dir() and not path.is_symlink()]
    rows = load_rollouts(run_dir)
    return float(rows["t_submit"].min()), float((rows["t_submit"] + rows["total_s"]).max())


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--against", type=Path, help="another checkout, run interleaved as 'before'")
    args = parser.parse_args()
    after: list[Round] = []
    before: list[Round] = []
    load_before = os.getloadavg()[0]
    for _ in range(max(1, args.rounds)):
        if args.against is not None:
            before.append(one_run(args.against.resolve(), args.users))
        after.append(one_run(REPO, args.users))
    columns = [("before", before), ("after", after)] if before else [("this checkout", after)]
    header = f"{'phase':<66}" + "".join(f"{name:>15}" for name, _ in columns)
    print(
        f"stampede {' '.join(COMMAND)} --users {args.users}: median of {len(after)} round(s), seconds "
        f"(load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, {os.cpu_count()} cores)"
    )
    print(header)
    print("-" * len(header))
    for name, label in PHASES:
        cells = [median([r.phases[name] for r in rounds if name in r.phases]) for _, rounds in columns]
        if all(cell != cell for cell in cells):  # every column lacks this instant
            continue
        print(f"{label:<66}" + "".join(f"{cell:>15.2f}" if cell == cell else f"{'-':>15}" for cell in cells))
    print("-" * len(header))
    for label, read in (
        ("the whole command (wall)", lambda r: r.wall_s),
        ("the work itself", lambda r: r.work_s),
        ("beyond the work: the harness's fixed cost", lambda r: r.beyond_work_s),
        ("CPU seconds, every process of the command", lambda r: r.cpu_s),
    ):
        print(f"{label:<66}" + "".join(f"{median([read(r) for r in rounds]):>15.2f}" for _, rounds in columns))
    for name, rounds in columns:
        print(f"{name}: beyond the work, round by round: {' '.join(f'{r.beyond_work_s:.2f}' for r in rounds)}")
    beyond = median([r.beyond_work_s for r in after])
    verdict = "met" if beyond <= TARGET_BEYOND_WORK_S else "NOT met"
    print(f"target: at most {TARGET_BEYOND_WORK_S} s beyond the work: {verdict} ({beyond:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
