"""The wire between a Locust process (gevent) and its rollout engine (asyncio): JSON lines on a Unix socket.

Both sides import only this module of each other's, so neither drags the other's runtime in.
Requests carry an `id`; the engine answers each with the same `id`. Ops:
`configure` -> `configured`, `rollout` -> `result`, `cancel` (no answer: the `result` arrives cancelled),
`stats` -> `stats`, `drain` -> `drained`, `shutdown` (the engine exits after draining).
"""

from __future__ import annotations

import json
from typing import Any

from harness.wire.json_lines import loads_line, one_shot_encoder

MAX_LINE_BYTES = 16 * 1024 * 1024
READY_LINE = "STAMPEDE-ENGINE-READY"
SOCKET_DIR_PREFIX = "stampede-engine-"  # the folder made for one engine's socket; the engine removes it on exit


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)  # json.dumps with these options builds one a call
_ENCODE = one_shot_encoder(_ENCODER)


def encode(message: dict[str, Any]) -> bytes:
    return _ENCODE(message).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    message = loads_line(line)  # json.loads(line), a third cheaper a row (harness.wire.json_lines)
    if not isinstance(message, dict) or "op" not in message:
        raise ValueError("engine message must be an object with an 'op'")
    return message
