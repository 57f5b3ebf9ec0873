"""Baseline (b): a plain Locust `FastHttpUser` making the lifecycle's calls, one lifecycle at a time per user.

    BENCH_URL=... BENCH_TOKEN=... BENCH_OUT=result.json \
        locust -f bench/baselines/locust_fasthttp.py --headless -u 64 -r 1000 -t 20s

Writes {"ends": [epoch seconds of each lifecycle's end], "errors": n} to $BENCH_OUT when Locust quits.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path

import gevent
from locust import FastHttpUser, constant, events, task

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lifecycle_http import create_body, exec_body, gateway_url, look_delays

ENDS: list[float] = []
ERRORS = [0]
COUNTER = itertools.count()


class LifecycleUser(FastHttpUser):
    host = os.environ.get("BENCH_URL", "http://127.0.0.1")
    wait_time = constant(0)

    def on_start(self) -> None:
        self.api_headers = {"Authorization": f"Bearer {os.environ.get('BENCH_TOKEN', '')}"}

    @task
    def lifecycle(self) -> None:
        try:
            created = self.client.post(
                "/api/v1/sandbox", json=create_body(next(COUNTER)), headers=self.api_headers, name="create"
            ).json()
            sandbox_id = created["id"]
            for delay in look_delays():
                gevent.sleep(delay)
                body = self.client.post(
                    "/api/v1/sandbox/status:batchGet",
                    json={"sandbox_ids": [sandbox_id]},
                    headers=self.api_headers,
                    name="ready",
                ).json()
                if body["statuses"] and body["statuses"][0]["status"] == "RUNNING":
                    break
            auth = created["gatewayAuth"]
            self.client.post(
                gateway_url(auth),
                json=exec_body(sandbox_id),
                headers={"Authorization": f"Bearer {auth['token']}"},
                name="exec",
            ).json()
            self.client.delete(f"/api/v1/sandbox/{sandbox_id}", headers=self.api_headers, name="terminate")
            ENDS.append(time.time())
        except Exception:
            ERRORS[0] += 1


@events.quitting.add_listener
def _write(**_: object) -> None:
    out = os.environ.get("BENCH_OUT")
    if out:
        Path(out).write_text(json.dumps({"ends": ENDS, "errors": ERRORS[0]}))
