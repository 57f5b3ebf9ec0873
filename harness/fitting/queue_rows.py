"""What each accepted create found queued ahead of it at the vendor: the rows the serving queue is fitted from.

Read from a run's ops (when the harness sent each call, and when its answer came) and the vendor's truth (when it
accepted a create, started a command, ended a sandbox, turned it RUNNING), both on the machine's wall clock, so only
a simulated (`--local`) vendor's runs give them (harness/fitting/serving.py says what is fitted from them and why).
Apart from serving.py so that `observations.py` can carry the rows without importing the fit that reads them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from providers.sim.core.serving_queue import KINDS


@dataclass(frozen=True, slots=True)
class QueueSample:
    """One accepted create: its wait at the vendor (vendor seconds, sent to accepted) and the requests of each kind
    (`KINDS` order) sent before it and not yet served when it was sent."""

    wait_s: float
    ahead: tuple[int, int, int, int]


def _pending(start: np.ndarray, served: np.ndarray, at: np.ndarray) -> np.ndarray:
    """At each time in `at`: how many of the requests [start, served) were sent and not yet served."""
    keep = np.isfinite(start) & np.isfinite(served) & (served >= start)
    return np.searchsorted(np.sort(start[keep]), at, "left") - np.searchsorted(np.sort(served[keep]), at, "right")


def queue_samples(
    frame: pd.DataFrame, ops: pd.DataFrame, truth: pd.DataFrame, to_vendor: float
) -> dict[str, tuple[QueueSample, ...]]:
    """Per stage, its accepted creates as `QueueSample`s, from a run's rollouts (`frame`: rollout_id, sandbox_id,
    stage), its ops (rollout_id, op, t_start, dur_s, ok) and the vendor's truth (walls, epoch seconds); empty without
    truth (a real vendor: nothing records when it served a request). `to_vendor`: vendor seconds per wall second."""
    if truth.empty or ops.empty or not {"id", "created_wall", "ended_wall", "first_exec_start_wall"} <= set(truth):
        return {}
    own = truth.drop_duplicates("id").set_index("id")
    rollouts = frame.drop_duplicates("rollout_id").set_index("rollout_id")
    ids = rollouts["sandbox_id"].reindex(ops["rollout_id"]).to_numpy(dtype=object)
    stage = rollouts["stage"].astype(str).reindex(ops["rollout_id"]).to_numpy(dtype=object)
    known = np.array([isinstance(v, str) and v in own.index for v in ids], dtype=bool)
    mine = own.reindex(pd.Index(np.where(known, ids, None)))

    def wall(column: str) -> np.ndarray:
        values = mine[column].to_numpy(dtype=float) if column in mine else np.full(len(ops), np.nan)
        return np.where(known, values, np.nan)

    sent = ops["t_start"].to_numpy(dtype=float)
    answered = sent + ops["dur_s"].to_numpy(dtype=float)
    op = ops["op"].astype(str).to_numpy()
    ok = ops["ok"].to_numpy(dtype=bool)
    create = op == "create"
    accepted = create & ok & np.isfinite(wall("created_wall"))
    first_exec = (op == "exec") & ~pd.Series(ops["rollout_id"]).where(op == "exec").duplicated().to_numpy()
    served = {
        # a refused create held the server until it was answered; an accepted one until the vendor took it
        "create": (sent[create], np.where(accepted, wall("created_wall"), answered)[create]),
        "ready": (wall("ready_wall")[op == "wait_ready"], answered[op == "wait_ready"]),
        "exec": (sent[first_exec], wall("first_exec_start_wall")[first_exec]),
        "terminate": (sent[op == "terminate"], wall("ended_wall")[op == "terminate"]),
    }
    at = sent[accepted]
    # sent strictly before it: the create itself is not among them
    counts = np.column_stack([_pending(*served[kind], at) for kind in KINDS]).clip(min=0)
    waits = (wall("created_wall")[accepted] - at) * to_vendor
    out: dict[str, list[QueueSample]] = {}
    for name, wait, row in zip(stage[accepted], waits, counts, strict=True):
        if isinstance(name, str) and math.isfinite(wait):
            out.setdefault(name, []).append(
                QueueSample(float(wait), (int(row[0]), int(row[1]), int(row[2]), int(row[3])))
            )
    return {name: tuple(rows) for name, rows in out.items()}
