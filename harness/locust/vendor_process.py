"""The embedded simulated vendor: started for a run on 127.0.0.1 (a free port), stopped with it.

The Prime-like stub by default; for `--local` runs of other providers, the simulated vendor that speaks their
wire protocol (`providers.LOCAL_VENDORS`). It runs in its own plain-asyncio interpreter, not inside the Locust
process: that process is gevent-patched, and the server's CPU would otherwise distort the very latencies it
serves. The child watches its stdin, so it never outlives the harness that started it.

A serve module takes `--profile --seed --host --port --token --exit-on-stdin-eof [--time-scale] [--set K=V]`
and, once listening, prints one JSON line: `url`, `time_scale`, `profile`, and optionally `truth_url` (an
HTTP base serving `/api/v1/_stampede/truth`; defaults to `url`) and `provider_options` (merged into the
provider's options, e.g. credentials the local vendor accepts).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent
import gevent.subprocess

from harness.errors import UsageError

VENDOR_START_TIMEOUT_S = 30.0


@dataclass(slots=True)
class EmbeddedVendor:
    process: gevent.subprocess.Popen
    url: str
    token: str
    profile: str
    time_scale: float
    seed: int
    truth_url: str
    provider_options: dict[str, Any]

    @classmethod
    def start(
        cls,
        module: str,
        profile: str,
        *,
        seed: int,
        time_scale: float | None,
        overrides: dict[str, str] | None = None,
    ) -> EmbeddedVendor:
        token = secrets.token_urlsafe(24)
        # `--opt=value` throughout: a token (or a path) may begin with "-" and must not read as an option.
        argv = [sys.executable, "-m", module, f"--profile={profile}", f"--seed={seed}", "--host=127.0.0.1",
                "--port=0", f"--token={token}", "--exit-on-stdin-eof"]  # fmt: skip
        if time_scale is not None:
            argv.append(f"--time-scale={time_scale!r}")
        for key, value in (overrides or {}).items():
            argv.append(f"--set={key}={value}")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")]
        ).rstrip(os.pathsep)
        process = gevent.subprocess.Popen(
            argv,
            stdin=gevent.subprocess.PIPE,
            stdout=gevent.subprocess.PIPE,
            stderr=gevent.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        try:
            with gevent.Timeout(VENDOR_START_TIMEOUT_S, UsageError(f"{module} did not start in time")):
                line = process.stdout.readline().decode(errors="replace").strip()
                if not line:
                    process.wait()
                    complaint = process.stderr.read().decode(errors="replace").strip().splitlines()
                    raise UsageError(complaint[-1] if complaint else f"{module} exited with {process.returncode}")
                info = json.loads(line)
        except BaseException:
            if process.poll() is None:
                process.kill()
                process.wait()
            raise
        # Keep draining its stderr so a chatty server can never block on a full pipe.
        gevent.spawn(_drain, process.stderr)
        return cls(
            process,
            info["url"],
            token,
            info.get("profile", profile),
            float(info["time_scale"]),
            seed,
            info.get("truth_url") or info["url"],
            dict(info.get("provider_options") or {}),
        )

    def fetch_json(self, path: str, timeout: float = 30.0) -> Any:
        request = urllib.request.Request(f"{self.truth_url}{path}", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def truth(self) -> list[dict[str, Any]]:
        """The simulator's own record of each sandbox (when it was accepted, usable, ended)."""
        data = self.fetch_json("/api/v1/_stampede/truth")
        if isinstance(data, dict):
            data = data.get("sandboxes", [])
        return list(data)

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        try:
            self.process.stdin.close()
        except OSError:
            pass
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except gevent.subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _drain(stream: Any) -> None:
    try:
        while stream.read(65536):
            pass
    except (OSError, ValueError):
        pass


def probe(url: str, token: str | None, timeout: float = 10.0) -> str | None:
    """None when the Prime-like API at `url` answers with this token, else one line saying what is wrong."""
    request = urllib.request.Request(
        f"{url.rstrip('/')}/api/v1/sandbox?page=1&per_page=1",
        headers={"Authorization": f"Bearer {token}"} if token else {},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return None
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return f"{url} refused the token (HTTP {exc.code}); pass --token or set STAMPEDE_TOKEN"
        return f"{url} answered HTTP {exc.code} to a list request"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{url} is unreachable: {reason}"
