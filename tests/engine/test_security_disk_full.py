"""A full disk or a read-only results folder: no row is lost, the run stops and says why (issue 28, rows 2 and 4).

Real small filesystems (tmpfs mounts with a size, or read-only), so root is needed: skipped without it, except
under CI (CI=true), where the skip would hide the case.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness.engine.shards import ShardWriter
from harness.wire.records import OpRecord, RolloutRecord
from tests.support.rollout_rows import finished_rollout

REPO = Path(__file__).resolve().parents[2]
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(
    not ROOT and os.environ.get("CI") != "true", reason="mounting a small filesystem needs root"
)


@contextlib.contextmanager
def small_filesystem(where: Path, size: str, *, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (read-only when asked), unmounted at the end."""
    where.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def rollout(i: int) -> RolloutRecord:
    return finished_rollout(
        i,
        worker="local",
        rollout_id=f"local-{i:07d}",
        inflight_at_submit=1,
        sandbox_id=f"sandbox-{i}-{os.urandom(12).hex()}",  # incompressible enough to fill the disk
        error=os.urandom(40).hex(),
    )


def op(i: int) -> OpRecord:
    return OpRecord(run_id="run", rollout_id=f"local-{i:07d}", op="create", t_start=1.8e9 + i, dur_s=0.1, ok=True)


def rows_on_disk(run_dir: Path, table: str) -> int:
    return sum(pq.read_metadata(path).num_rows for path in (run_dir / table).glob("*.parquet"))


@needs_root
async def test_a_full_disk_keeps_every_row_and_writes_them_once_there_is_room(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "disk", "512k") as disk:
        ballast = disk / "ballast"
        ballast.write_bytes(os.urandom(400 * 1024))  # most of the disk: the first shards fill the rest
        run_dir = disk / "run"
        writer = ShardWriter(run_dir, "local", flush_interval_s=0.05, flush_rows=10**9)
        writer.start()
        added = 0
        for _ in range(8):  # about 100 kB a batch: the disk fills within the first few
            for _ in range(500):
                writer.add_rollout(rollout(added))
                writer.add_op(op(added))
                added += 1
            await asyncio.sleep(0.3)
        assert rows_on_disk(run_dir, "rollouts") < added  # the disk is full: some rows wait in memory
        error = getattr(writer, "error", None)
        ballast.unlink()  # room again: the periodic flush, still alive, writes what waited
        for _ in range(100):
            await asyncio.sleep(0.1)
            if rows_on_disk(run_dir, "rollouts") == added:
                break
        await writer.close()
        assert rows_on_disk(run_dir, "rollouts") == added, "rows were lost to the full disk"
        assert rows_on_disk(run_dir, "ops") == added
        assert writer.counts.rollouts == added
        assert error is not None and "No space left" in error  # what the engine reports while it lasts
        assert not list(run_dir.glob(".*.tmp")), "a failed write left its partial file behind"


@needs_root
async def test_rows_the_run_folder_cannot_take_by_the_end_go_to_the_fallback_folder(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "disk", "256k") as disk:
        (disk / "ballast").write_bytes(os.urandom(250 * 1024))
        run_dir = disk / "run"
        fallback = tmp_path / "fallback"
        writer = ShardWriter(run_dir, "local", flush_interval_s=0.05, fallback_dir=fallback)
        writer.start()
        for i in range(2000):
            writer.add_rollout(rollout(i))
        await writer.close()
        assert writer.first_error is not None and "No space left" in writer.first_error
        assert writer.rescued_to == str(fallback)
        assert rows_on_disk(run_dir, "rollouts") + rows_on_disk(fallback, "rollouts") == 2000


def stampede_run(out: Path, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "harness.cli", "run", "--profile", "ideal", "--out", str(out)]
    command += ["--progress-interval", "0", "--stop-timeout", "0", *extra]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)


@needs_root
@pytest.mark.slow
def test_a_run_whose_disk_fills_stops_says_why_and_keeps_every_row(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "disk", "1m") as disk:
        out = disk / "results"
        result = stampede_run(
            out, "--run-id", "full", "--stages", "40", "--hold", "60", "--commands", "true", "--lifetime", "600"
        )
        run_dir = out / "full"
        manifest = json.loads((run_dir / "run.json").read_text())
        assert result.returncode == 74, result.stderr[-3000:]
        assert manifest["status"] == "aborted: results not writable", manifest["status"]
        assert manifest["exit_code"] == 74
        (engine,) = manifest["engines"]
        assert "No space left" in (engine.get("results_error") or "")
        assert engine["unfinished_tasks"] == 0 and engine["terminate_errors"] == 0 and not engine["sweep_error"]
        assert manifest["wall_s"] < 45, "the run went on after its results stopped being written"
        rescued = Path(engine["rows_rescued_to"]) if engine.get("rows_rescued_to") else None
        on_disk = rows_on_disk(run_dir, "rollouts") + (rows_on_disk(rescued, "rollouts") if rescued else 0)
        compacted = run_dir / "rollouts" / "rollouts.parquet"
        assert on_disk == engine["rows"]["rollouts"] == sum(engine["outcomes"].values()), (on_disk, engine["rows"])
        assert compacted.exists() or on_disk > 0
        assert "results not writable" in result.stderr or "cannot write the results" in result.stderr
    if rescued is not None:
        import shutil

        shutil.rmtree(rescued, ignore_errors=True)


@needs_root
@pytest.mark.slow
def test_a_read_only_results_folder_is_one_line_before_any_sandbox(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "ro", "1m", read_only=True) as read_only:
        result = stampede_run(read_only / "results", "--stages", "2", "--hold", "1", timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("stampede: ") and "not writable" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
