"""The web UI of `locust -f scenarios/<x>.py` cannot be used to take the vendor token (issue 28, row 1).

Real Locust processes with their web UI, and real loopback HTTP servers standing in for the vendor that record
every request's Authorization header: the command line's endpoint, and another one a stranger's form names.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.ports import reserved_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
TOKEN = "sk-live-command-line-token-4242"
HTTP_TIMEOUT_S = 30.0


class RecordingVendor:
    """A loopback HTTP server that answers every request 503 and records its Authorization header."""

    def __init__(self) -> None:
        self.authorizations: list[str | None] = []
        recorded = self.authorizations

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                recorded.append(self.headers.get("Authorization"))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                body = json.dumps({"detail": "unavailable"}).encode()
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _answer

            def log_message(self, *_: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def vendors() -> Iterator[tuple[RecordingVendor, RecordingVendor]]:
    """The command line's vendor and a stranger's server."""
    ours, theirs = RecordingVendor(), RecordingVendor()
    try:
        yield ours, theirs
    finally:
        ours.close()
        theirs.close()


@contextlib.contextmanager
def locust_web(out: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """`locust -f scenarios/ramp.py ARGS` with its web UI; interrupted (then killed) at the end."""
    out.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}.log"
    command = [sys.executable, "-m", "locust", "-f", "scenarios/ramp.py", *args, "--out", str(out)]
    command += ["--progress-interval", "0"]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def log_of(out: Path) -> str:
    return (out.parent / f"{out.name}.log").read_text()


def get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def post(url: str, form: dict[str, str]) -> dict[str, object]:
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
        return dict(json.loads(answer.read().decode()))


def wait_for_page(process: subprocess.Popen[bytes], url: str, out: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            get(url)
            return
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, log_of(out)[-3000:]
            time.sleep(0.25)


def listening_addresses(pid: int, port: int) -> set[str]:
    return {
        conn.laddr.ip
        for conn in psutil.Process(pid).net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port
    }


def test_the_web_ui_listens_on_loopback_unless_told_otherwise(tmp_path: Path) -> None:
    port = reserved_port()
    out = tmp_path / "out"
    with locust_web(out, "--web-port", str(port)) as process:
        wait_for_page(process, f"http://127.0.0.1:{port}/", out)
        assert listening_addresses(process.pid, port) == {"127.0.0.1"}


def test_a_web_ui_on_every_interface_without_credentials_is_refused_in_one_line(tmp_path: Path) -> None:
    port = reserved_port()
    out = tmp_path / "out"
    with locust_web(out, "--web-host", "0.0.0.0", "--web-port", str(port)) as process:
        try:
            code = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the web UI is served on every interface with no login:\n{log_of(out)[-2000:]}")
    assert code == 2
    log = log_of(out)
    lines = [line for line in log.splitlines() if line.startswith("stampede")]
    assert len(lines) == 1 and "0.0.0.0" in lines[0], log
    assert "STAMPEDE_WEB_CREDENTIALS" in lines[0] and "--web-login" in lines[0]
    assert "Traceback" not in log and "Shape test starting" not in log


def test_with_credentials_every_interface_warns_and_every_request_needs_them(tmp_path: Path) -> None:
    port = reserved_port()
    out = tmp_path / "out"
    env = {"STAMPEDE_WEB_CREDENTIALS": "ops:correct horse"}
    with locust_web(out, "--web-host", "0.0.0.0", "--web-port", str(port), env=env) as process:
        base = f"http://127.0.0.1:{port}"
        wait_for_page(process, base + "/", out)
        assert get(base + "/")[0] == 401
        assert get(base + "/", ("ops", "wrong"))[0] == 401
        request = urllib.request.Request(base + "/swarm", data=b"user_count=0&spawn_rate=0", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S)
        assert refused.value.code == 401
        status, page = get(base + "/", ("ops", "correct horse"))
        assert status == 200 and "templateArgs" in page
    log = log_of(out)
    assert "stampede: the web UI listens on 0.0.0.0" in log
    assert "correct horse" not in log


def form(page: str) -> dict[str, str]:
    """Every field the browser posts, as the page fills them in (users and ramp-up hidden: "0")."""
    start = page.index("window.templateArgs = ") + len("window.templateArgs = ")
    args, _ = json.JSONDecoder().raw_decode(page[start:])
    fields = {"user_count": "0", "spawn_rate": "0", "host": "", "run_time": "", "profile": ""}
    for name, option in args["extra_options"].items():
        value = option["default_value"]
        fields[name] = (
            ("true" if value else "false") if isinstance(value, bool) else ("" if value is None else str(value))
        )
    return fields


def runs(out: Path) -> list[Path]:
    return sorted(path for path in out.iterdir() if path.is_dir())


def test_the_form_never_sends_the_command_lines_token_to_another_host(
    tmp_path: Path, vendors: tuple[RecordingVendor, RecordingVendor]
) -> None:
    ours, theirs = vendors
    port = reserved_port()
    out = tmp_path / "out"
    args = ["--web-host", "127.0.0.1", "--web-port", str(port), "--provider", "stub", "--base-url", ours.url]
    args += ["--token", TOKEN, "--stages", "1", "--hold", "1", "--create-timeout", "2"]
    with locust_web(out, *args) as process:
        base = f"http://127.0.0.1:{port}"
        wait_for_page(process, base + "/", out)
        status, page = get(base + "/")
        assert status == 200 and TOKEN not in page  # the page does not hand the token to whoever opens it

        # a stranger's POST: the form as the page gives it, the endpoint theirs, no token of their own
        stranger = {**form(page), "base_url": theirs.url}
        stranger.pop("token", None)
        before = set(runs(out))
        post(base + "/swarm", stranger)
        deadline = time.monotonic() + 30
        while "base URL" not in get(base + "/logs")[1] and not theirs.authorizations:
            assert time.monotonic() < deadline, log_of(out)[-3000:]
            time.sleep(0.25)
        assert not any(TOKEN in (auth or "") for auth in theirs.authorizations), "the token went to their host"
        assert theirs.authorizations == [] and set(runs(out)) == before  # the test was refused before it began
        assert "refused" in get(base + "/logs")[1]

        # the same change with credentials of its own: those go to the new host, never the command line's
        while json.loads(get(base + "/stats/requests")[1])["state"] != "stopped":
            assert time.monotonic() < deadline, "the refused test did not stop"
            time.sleep(0.25)
        post(base + "/swarm", {**form(page), "base_url": theirs.url, "token": "their-own-token"})
        while not theirs.authorizations:  # its preflight, at least (answered 503: the test goes no further)
            assert time.monotonic() < deadline + 60, f"never reached the new host:\n{log_of(out)[-3000:]}"
            time.sleep(0.25)
    assert set(theirs.authorizations) == {"Bearer their-own-token"}
    assert TOKEN not in log_of(out)
