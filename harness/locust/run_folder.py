"""The run folder's own files: run.json (what was run, against what, with which versions, on which host —
enough to reproduce it), the `latest` pointer, and the simulated vendor's truth table."""

from __future__ import annotations

import json
import os
import platform
import re
import secrets
import socket
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.wire.schema_version import SCHEMA_VERSION


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
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "run.json"
    tmp = run_dir / ".run.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)
    return path


def read_manifest(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(run_dir) / "run.json").read_text())
    return data


def point_latest_at(run_dir: Path) -> None:
    """`<out>/latest` -> the newest run, so `stampede summary results/latest` works without copying ids."""
    link = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest.{os.getpid()}"
    try:
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(run_dir.name, target_is_directory=True)
        os.replace(tmp, link)
    except OSError:  # a filesystem without symlinks only loses the convenience
        pass


def truth_schema() -> Any:
    """The simulated vendor's own record of each sandbox (`sim_truth.parquet`): the cross-check of our timing.

    Built on first use: pyarrow is not needed on the way to the first rollout.
    """
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.string()),
            ("status", pa.string()),
            ("error_type", pa.string()),
            ("created_wall", pa.float64()),
            ("ready_wall", pa.float64()),
            ("ended_wall", pa.float64()),
            ("first_exec_done_wall", pa.float64()),
            ("first_exec_start_wall", pa.float64()),
            ("exec_busy_s", pa.float64()),
            # the same instants in vendor seconds: a live simulated vendor plays a burst's sending 1:1, so wall spans
            # times 1 / time scale are not always vendor spans (harness.results.vendor_time)
            ("created_s", pa.float64()),
            ("ready_s", pa.float64()),
            ("ended_s", pa.float64()),
            ("first_exec_start_s", pa.float64()),
            ("first_exec_done_s", pa.float64()),
        ]
    )


def write_vendor_truth(run_dir: Path, run_id: str, sandboxes: list[dict[str, Any]]) -> Path:
    """The simulated vendor's records of this run's sandboxes (found by the run label), as parquet."""
    label = f"stampede-run={run_id}"
    rows = [
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
        }
        for sandbox in sandboxes
        if label in (sandbox.get("labels") or [])
    ]
    path = run_dir / "sim_truth.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows, schema=truth_schema()), path)
    return path
