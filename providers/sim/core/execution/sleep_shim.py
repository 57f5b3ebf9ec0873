"""The time-scaled `sleep` first on PATH inside a sandbox: `sleep N` (coreutils' syntax: numbers with s/m/h/d
suffixes, several arguments summed) lasts N vendor seconds, N x time_scale real seconds; `/usr/bin/sleep` by its
full path stays real time."""

from __future__ import annotations

from pathlib import Path

SHIM_DIR = "/opt/stampede/bin"
"""Where the time-scaled `sleep` lives inside a sandbox (first on PATH)."""


_SLEEP_SHIM = """#!/bin/sh
# stampede: `sleep N` lasts N vendor seconds, N x {scale} real seconds (coreutils' syntax: s/m/h/d, summed)
t=$(/usr/bin/awk -v scale={scale} 'BEGIN {{
  s = 0
  if (ARGC < 2) exit 1
  for (i = 1; i < ARGC; i++) {{
    a = ARGV[i]; m = 1; u = substr(a, length(a))
    if (u == "s") a = substr(a, 1, length(a) - 1)
    else if (u == "m") {{ m = 60; a = substr(a, 1, length(a) - 1) }}
    else if (u == "h") {{ m = 3600; a = substr(a, 1, length(a) - 1) }}
    else if (u == "d") {{ m = 86400; a = substr(a, 1, length(a) - 1) }}
    if (a !~ /^([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?$/) exit 1
    s += a * m
  }}
  printf "%.6f", s * scale
}}' "$@") || exec /usr/bin/sleep "$@"
exec /usr/bin/sleep "$t"
"""


def sleep_shim(scale: float) -> str:
    """The `sleep` shim's text for a time scale (what `/opt/stampede/bin/sleep` holds)."""
    return _SLEEP_SHIM.format(scale=repr(float(scale)))


def make_shim_dir(base: Path, scale: float) -> Path:
    folder = base / f"scale-{scale!r}"
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "sleep"
    shim.write_text(sleep_shim(scale))
    shim.chmod(0o755)
    folder.chmod(0o755)
    return folder
