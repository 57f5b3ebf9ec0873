"""The part one Locust process plays in a run, read from Locust's runner and environment.

- local runner: runs users and an engine, owns the run folder;
- master: owns the run folder, runs no users and so no engine, hears from its workers;
- worker: runs users and an engine (after any fork: `init` fires in the child), takes each run from its master,
  ships its records to it (`harness.locust.worker_link`).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from harness.locust.shapes import StampedeShape


class ProcessRole:
    """Read lazily: `stampede run` creates the runner before `init`, Locust's own main after it."""

    def __init__(self, environment: Environment) -> None:
        self._environment = environment

    @property
    def runner(self) -> Any:
        return self._environment.runner

    @property
    def is_master(self) -> bool:
        return isinstance(self.runner, MasterRunner)

    @property
    def is_worker(self) -> bool:
        return isinstance(self.runner, WorkerRunner)

    @property
    def owns_run_folder(self) -> bool:
        return not self.is_worker

    @property
    def runs_users(self) -> bool:
        return not self.is_master

    @property
    def worker_name(self) -> str:
        """The name an engine's rows carry: `local`, or a worker's index and host."""
        if self.is_worker:
            return f"w{getattr(self.runner, 'worker_index', 0)}-{socket.gethostname()}"
        return "local"

    @property
    def scenario(self) -> str:
        return Path(self._environment.locustfile or "scenario").stem

    @property
    def shape(self) -> StampedeShape | None:
        """The scenario's shape, when it is one of stampede's."""
        shape = self._environment.shape_class
        return shape if isinstance(shape, StampedeShape) else None
