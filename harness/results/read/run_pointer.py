"""`results/latest`: a one-line text file naming the newest run's folder, and the one place that follows it.

A text file, not a symlink: a recursive reader of `results/` (`glob('results/**/*.parquet')`, duckdb's `**`)
follows a symlink into the newest run and counts it twice. Every command that takes a run folder resolves its
argument here, so `stampede summary results/latest` works as it did; an old `latest` symlink still works (it is
a folder to the filesystem already).
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import UsageError

POINTER_NAME = "latest"
_MAX_POINTER_BYTES = 4096  # a folder name: anything bigger is not a pointer


def resolve_run_dir(path: Path | str) -> Path:
    """The run folder `path` names: itself, or the folder a pointer file names (relative to the pointer's folder).

    Anything else comes back unchanged, for the caller to refuse as "not a run folder"; a pointer naming a folder
    that is gone is a one-line UsageError.
    """
    path = Path(path)
    if path.is_dir() or not path.is_file():
        return path
    target_name = _pointer_target(path)
    if target_name is None:
        return path
    target = path.parent / target_name
    if target.is_dir():
        return target
    if path.name == POINTER_NAME:
        raise UsageError(f"{path} names {target_name}, which is not a folder beside it (deleted or moved?)")
    return path  # some other small text file: the caller refuses it as "not a directory"


def _pointer_target(path: Path) -> str | None:
    """The folder name a pointer file holds, or None when the file is not a pointer (large, binary, empty)."""
    try:
        if path.stat().st_size > _MAX_POINTER_BYTES:
            return None
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    lines = text.strip().splitlines()
    if len(lines) != 1 or "\x00" in lines[0]:
        return None
    name = lines[0].strip()
    return name if name and name not in (".", "..") else None
