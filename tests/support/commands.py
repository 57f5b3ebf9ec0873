"""`stampede …` as a user runs it: a fresh interpreter from the repository's root, output captured as text.

The timeout is a hang guard, never a performance bound: a command that has not ended by then failed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def stampede(
    *args: str, timeout: float = 300, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
        check=False,
    )


def stampede_started(
    *args: str, quiet: bool = False, new_session: bool = False, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """`stampede …` left running, to watch, signal or kill: output piped as text (`quiet`: discarded); `new_session`
    puts it and its children in a process group of their own (a test then kills them all at once)."""
    output = subprocess.DEVNULL if quiet else subprocess.PIPE
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", *args],
        stdout=output,
        stderr=output,
        text=True,
        cwd=REPO,
        env=env,
        start_new_session=new_session,
    )
