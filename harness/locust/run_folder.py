"""The run folder's own files: run.json (what was run, against what, with which versions, on which host —
enough to reproduce it), the `latest` pointer, and the simulated vendor's truth table (`truth/truth.parquet`)."""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import secrets
import shutil
import socket
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.results.read.run_pointer import POINTER_NAME
from harness.wire.schema_version import SCHEMA_VERSION

MAX_RUN_ID_CHARS = 64  # a folder name, and a label value on every vendor (Kubernetes-style labels stop at 63)
_SAFE_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_run_id(run_id: str) -> str:
    """A user's --run-id, refused unless it is one safe folder name and label value: letters, digits, `.`, `_`
    and `-`, starting with a letter or digit (so never `..`, a path, a hidden name or shell syntax)."""
    if len(run_id) > MAX_RUN_ID_CHARS:
        raise UsageError(f"--run-id has {len(run_id)} characters, more than {MAX_RUN_ID_CHARS}")
    if not _SAFE_RUN_ID.fullmatch(run_id):
        raise UsageError(
            f"--run-id {run_id!r} may hold only letters, digits, '.', '_' and '-', and starts with a letter or digit"
        )
    return run_id


RESERVE_NAME = ".space-reserve"
RESERVE_BYTES = 256 * 1024
"""Held in the run folder while the run goes: on a disk that fills up, run.json's last writes (how the run ended,
where unwritten rows went) take this room. Released when run.json records an ending."""


def create_run_folder(run_dir: Path) -> None:
    """The run's own folder, made here or refused: one mkdir that fails if it exists, so two runs given one id
    (even started at once) never share it. A folder that cannot be written is one line too, before any sandbox."""
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir()
    except FileExistsError:
        raise UsageError(f"{run_dir} already exists: give another --run-id, or remove that folder") from None
    except OSError as exc:
        raise UsageError(f"results folder {run_dir.parent} is not writable: {exc.strerror or exc}") from None
    try:
        with open(run_dir / RESERVE_NAME, "wb") as reserve:
            reserve.write(b"\0" * RESERVE_BYTES)
    except OSError as exc:
        (run_dir / RESERVE_NAME).unlink(missing_ok=True)
        raise UsageError(f"results folder {run_dir.parent} is not writable: {exc.strerror or exc}") from None


def check_results_writable(out: Path) -> None:
    """Before a run starts anything: `--out` can be made and written (one line otherwise, no sandbox created)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".stampede-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"results folder {out} is not writable: {exc.strerror or exc}") from None


def release_reserve(run_dir: Path) -> None:
    (run_dir / RESERVE_NAME).unlink(missing_ok=True)


def new_run_id(scenario: str, provider: str) -> str:
    """Sortable by time, readable, unique, and safe as a folder name and a label value."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    provider = provider.rpartition(":")[2] or provider  # module:Class -> Class
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{scenario}-{provider}").strip("-").lower()
    return f"{stamp}-{slug}-{secrets.token_hex(2)}"


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def host_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
    }
    try:
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except Exception:  # psutil is a dependency, but host info must never break a run
        pass
    return info


def iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


def base_manifest(run_id: str, scenario: str, scenario_path: str | None) -> dict[str, Any]:
    now = time.time()
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "scenario": scenario,
        "scenario_path": scenario_path,
        "started_at": iso(now),
        "t_start": now,
        "ended_at": None,
        "t_end": None,
        "status": "running",
        "host": host_info(),
        "versions": {
            "stampede": _version("stampede"),
            "locust": _version("locust"),
            "aiohttp": _version("aiohttp"),
            "pyarrow": _version("pyarrow"),
        },
    }


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> Path:
    """run.json, replaced whole. On a full disk the run folder's reserve makes the room; once run.json records an
    ending the reserve is released."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "run.json"
    tmp = run_dir / ".run.json.tmp"
    text = json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n"
    try:
        tmp.write_text(text)
    except OSError:
        tmp.unlink(missing_ok=True)
        if not (run_dir / RESERVE_NAME).exists():
            raise
        release_reserve(run_dir)  # a full disk: the room kept for this
        tmp.write_text(text)
    os.replace(tmp, path)
    if manifest.get("status") not in (None, "running"):
        release_reserve(run_dir)
    return path


def read_manifest(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(run_dir) / "run.json").read_text())
    return data


def point_latest_at(run_dir: Path) -> None:
    """`<out>/latest`, a one-line text file naming the newest run's folder, so `stampede summary results/latest`
    works without copying ids (harness.results.read.run_pointer reads it). Not a symlink: a recursive glob over
    `results/` would count the newest run twice. An old `latest` symlink is replaced."""
    pointer = run_dir.parent / POINTER_NAME
    tmp = run_dir.parent / f".{POINTER_NAME}.{os.getpid()}"
    try:
        tmp.write_text(run_dir.name + "\n")
        os.replace(tmp, pointer)
    except OSError:  # e.g. a folder named `latest` is in the way: only the convenience is lost
        tmp.unlink(missing_ok=True)


def read_latest(out: Path) -> str | None:
    """What `<out>/latest` says now (None: no pointer file), so a run that never started can put it back."""
    pointer = out / POINTER_NAME
    if pointer.is_symlink() or not pointer.is_file():
        return None
    try:
        return pointer.read_text()
    except OSError:
        return None


def remove_unstarted_run(run_dir: Path, previous_latest: str | None) -> None:
    """A run refused at its start (its vendor refused the engine): its folder goes, `latest` says what it said."""
    shutil.rmtree(run_dir, ignore_errors=True)
    pointer = run_dir.parent / POINTER_NAME
    try:
        if previous_latest is not None:
            tmp = run_dir.parent / f".{POINTER_NAME}.{os.getpid()}"
            tmp.write_text(previous_latest)
            os.replace(tmp, pointer)
        elif not pointer.is_symlink() and pointer.is_file() and pointer.read_text().strip() == run_dir.name:
            pointer.unlink()
    except OSError:
        pass


def truth_rows(run_id: str, sandboxes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The simulated vendor's records of this run's sandboxes (found by the run label), as the `truth/` table's rows
    (wall instants as float epoch seconds): what the run folder keeps, and what the live view joins meanwhile."""
    label = f"stampede-run={run_id}"
    return [
        {
            "id": sandbox.get("id"),
            "status": sandbox.get("status"),
            "error_type": sandbox.get("error_type"),
            "created_wall": sandbox.get("created_wall"),
            "ready_wall": sandbox.get("running_wall"),
            "ended_wall": sandbox.get("ended_wall"),
            "first_exec_done_wall": sandbox.get("first_exec_done_wall"),
            "first_exec_start_wall": sandbox.get("first_exec_start_wall"),
            "exec_busy_s": sandbox.get("exec_busy_s"),
            "created_s": sandbox.get("created_s"),
            "ready_s": sandbox.get("running_s"),
            "ended_s": sandbox.get("ended_s"),
            "first_exec_start_s": sandbox.get("first_exec_start_s"),
            "first_exec_done_s": sandbox.get("first_exec_done_s"),
            "pull_s": sandbox.get("pull_s"),
        }
        for sandbox in sandboxes
        if label in (sandbox.get("labels") or [])
    ]


def write_vendor_truth(run_dir: Path, run_id: str, sandboxes: list[dict[str, Any]]) -> Path | None:
    """The simulated vendor's records of this run's sandboxes (found by the run label), as `truth/truth.parquet`.

    Its own table folder and schema (harness.wire.records.truth_schema): wall instants as UTC timestamps.
    """
    rows = truth_rows(run_id, sandboxes)
    # pyarrow: imported here, at the end of the run, not on the way to the first rollout
    import pyarrow.parquet as pq

    from harness.wire.records import TRUTH_TABLE, file_table, truth_schema

    table_dir = run_dir / TRUTH_TABLE
    path = table_dir / f"{TRUTH_TABLE}.parquet"
    tmp = run_dir / f".{TRUTH_TABLE}.parquet.tmp"
    try:
        table_dir.mkdir(parents=True, exist_ok=True)
        pq.write_table(file_table(rows, truth_schema()), tmp, compression="zstd")
        os.replace(tmp, path)
    except OSError as exc:  # a full disk: the run's own rows and run.json matter more than this cross-check
        tmp.unlink(missing_ok=True)
        logging.getLogger("stampede").warning("could not write the simulated vendor's records: %s", exc)
        return None
    return path


def write_vendor_loop(run_dir: Path, loops: list[dict[str, Any]]) -> None:
    """How late the simulated vendor's own loop ran, a shard each (providers/sim/core/loop_watch.py), as
    `vendor_loop.json`: read by harness.results.figures.vendor_loop. Nothing when the vendor did not say."""
    if not loops:
        return
    from harness.results.figures.vendor_loop import VENDOR_LOOP_FILE  # pandas: at the end of the run only

    path, tmp = run_dir / VENDOR_LOOP_FILE, run_dir / f".{VENDOR_LOOP_FILE}.tmp"
    try:
        tmp.write_text(json.dumps({"shards": loops}, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError as exc:  # a full disk: the run's own rows matter more than this cross-check
        tmp.unlink(missing_ok=True)
        logging.getLogger("stampede").warning("could not write the simulated vendor's loop figures: %s", exc)


def compact_tables(run_dir: Path) -> None:
    """Once every engine and worker has delivered: each table folder's shards into one file
    (harness.results.read.compaction). Never fails the run: uncompacted shards read just as well."""
    from harness.results.read.compaction import compact_run  # pyarrow: at the end of the run only

    try:
        compact_run(run_dir)
    except Exception as exc:  # a full disk, a permission: the shards stay, and stay readable
        logging.getLogger("stampede").warning("could not compact the run's parquet shards: %s", exc)
