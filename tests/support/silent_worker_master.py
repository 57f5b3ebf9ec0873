"""A Locust master whose only worker never sends a heartbeat, in a process of its own (Locust patches the standard
library with gevent's as it is imported, which a pytest process cannot have): prints whether its runner ended.

    python -m tests.support.silent_worker_master quits|stays
"""

from __future__ import annotations

import sys

from locust import User, constant, task
from locust.env import Environment
from locust.runners import STATE_RUNNING, WorkerNode

from harness.cli.run import quit_when_stopped


class _Idle(User):
    wait_time = constant(1)

    @task
    def idle(self) -> None:
        """Never runs: the silent worker never asks for users."""


def main(listen: bool) -> str:
    environment = Environment(user_classes=[_Idle], stop_timeout=0)
    runner = environment.create_master_runner("127.0.0.1", 0)
    try:
        if listen:
            quit_when_stopped(environment, runner)
        runner.clients["w1"] = WorkerNode("w1", heartbeat_liveness=0)  # never heard from again
        runner.update_state(STATE_RUNNING)
        # ~2 s later Locust's heartbeat check: "The last worker went missing, stopping test." -> stop(), no quit()
        return "ended" if runner.greenlet.join(timeout=10) else "still running"
    finally:
        runner.greenlet.kill(block=False)
        runner.server.close(linger=0)


if __name__ == "__main__":
    print(main(sys.argv[1] == "quits"), flush=True)
