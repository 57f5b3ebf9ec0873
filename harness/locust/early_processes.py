"""Processes `stampede run` started before Locust's import, each waiting to be taken by what would start it.

The engine and the embedded vendor each take most of a second to import their world, and Locust's own import
(gevent's patching, Flask) takes as long: `harness.cli.head_start` starts both first, on a guess from the command
line, so the three imports overlap. Each waits here under the key of what it was started as (its kind, command
line and environment). What would start one (`EngineClient.spawn`, `EmbeddedVendor.start`) takes it instead when
its own key matches exactly, so a taken process is the very one it would have started; a guess that missed
(options the head start did not read, a master that runs no engine) is killed by `discard`, never used.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]


@dataclass(slots=True)
class Early:
    """A process started ahead of its taker: the `gevent.subprocess.Popen`, and what the taker needs besides."""

    process: Any
    facts: dict[str, str] = field(default_factory=dict)  # e.g. the engine's socket path, the vendor's token
    cleanup: Callable[[], None] | None = None  # what a discarded one leaves behind (the engine's socket folder)


_WAITING: dict[Key, Early] = {}


def key_of(kind: str, argv: Sequence[str], env: Mapping[str, str]) -> Key:
    """What a process was started as: its kind, its command line and its whole environment."""
    return kind, tuple(argv), tuple(sorted(env.items()))


def keep(key: Key, early: Early) -> None:
    """Hold a process for its taker (a second one under the same key replaces nothing: it is discarded)."""
    if key in _WAITING:
        _end(early)
        return
    _WAITING[key] = early


def take(key: Key) -> Early | None:
    """The process started as `key`, still running, or None (none was, or it has already exited: start anew)."""
    early = _WAITING.pop(key, None)
    if early is not None and early.process.poll() is not None:
        _end(early)
        return None
    return early


def waiting() -> int:
    """How many started processes no one has taken yet."""
    return len(_WAITING)


def discard() -> None:
    """Kill every process no one took (nothing was asked of it yet: nothing is lost) and wait for each."""
    while _WAITING:
        _, early = _WAITING.popitem()
        _end(early)


def _end(early: Early) -> None:
    process = early.process
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: whatever it started goes too
        except OSError:
            process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
    if early.cleanup is not None:
        early.cleanup()
