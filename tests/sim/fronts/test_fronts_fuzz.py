"""Hostile input at the simulated fronts: what a fuzzer sends gets the documented 4xx, never a 500.

Two parts: the inputs that once answered 500 (issue 17 defect 7: a float that overflows, a non-ASCII bearer
token), each pinned; and schemathesis with every check against the Prime-like stub's own OpenAPI document,
run as a user would (`schemathesis run` against `stampede stub serve`'s child process), with a bounded
example count so it fits CI.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.serve_process import ROOT, finish, ready_line, spawn_serve

TOKEN = "fuzz-token"
CONFIG = ROOT / "tests" / "support" / "schemathesis.toml"
CONFIG_E2B = ROOT / "tests" / "support" / "schemathesis-e2b.toml"
CONFIG_DAYTONA = ROOT / "tests" / "support" / "schemathesis-daytona.toml"
LINKED_E2B = {
    ("GET", "/sandboxes/ID"),
    ("DELETE", "/sandboxes/ID"),
    ("POST", "/sandboxes/ID/timeout"),
    ("POST", "/v2/sandboxes/ID/connect"),
}
EXAMPLES = 15  # per operation and phase: ~1,100 cases, ~10 s alone on this machine (the default, 100: ~1,900)
LINKED = {
    # what the stateful phase must reach through the create response's links, each answered 2xx at least once
    ("GET", r"/api/v1/sandbox/sb\w+"),
    ("DELETE", r"/api/v1/sandbox/sb\w+"),
    ("GET", r"/api/v1/sandbox/sb\w+/error-context"),
    ("GET", r"/api/v1/sandbox/sb\w+/logs"),
    ("POST", r"/api/v1/sandbox/sb\w+/auth"),
    ("POST", r"/gateway/stampede/sb\w+/exec"),
    ("POST", r"/gateway/stampede/sb\w+/command_session\.CommandSession/List"),
}


@pytest.fixture(scope="module")
def stub() -> Iterator[dict[str, Any]]:
    """`stampede stub serve` (its module) on a free port, as a real child process."""
    proc = spawn_serve(
        "providers.sim.prime.serve",
        *("--profile", "ideal", "--time-scale", "0.01", "--seed", "1", "--token", TOKEN, "--exit-on-stdin-eof"),
    )
    try:
        yield ready_line(proc)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        finish(proc)


def _request(
    stub: dict[str, Any], method: str, path: str, body: Any = None, auth: bytes | None = None
) -> tuple[int, Any]:
    """One raw HTTP/1.1 request (raw so a header can carry bytes no client library would send)."""
    host, port = stub["url"].removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.putrequest(method, path)
        conn.putheader("Authorization", auth if auth is not None else f"Bearer {TOKEN}".encode())
        data = b"" if body is None else json.dumps(body).encode()
        if body is not None:
            conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(data)))
        conn.endheaders(data)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, json.loads(raw) if raw else None
    finally:
        conn.close()


@pytest.mark.parametrize("field", ["memory_gb", "cpu_cores", "disk_size_gb"])
def test_an_overflowing_size_is_a_422_not_a_500(stub: dict[str, Any], field: str) -> None:
    body = {"name": "f", "docker_image": "python:3.12-slim", field: 5.6e307}
    status, answer = _request(stub, "POST", "/api/v1/sandbox", body)
    assert status == 422, answer
    assert answer["detail"][0]["loc"] == ["body", field]


@pytest.mark.parametrize("field", ["timeout_minutes", "idle_timeout_minutes"])
def test_a_huge_integer_is_a_422_not_a_500(stub: dict[str, Any], field: str) -> None:
    body = {"name": "f", "docker_image": "python:3.12-slim", field: 10**400}
    status, answer = _request(stub, "POST", "/api/v1/sandbox", body)
    assert status == 422, answer
    assert answer["detail"][0]["loc"] == ["body", field]


def test_a_non_ascii_bearer_token_is_a_401_not_a_500(stub: dict[str, Any]) -> None:
    status, answer = _request(stub, "GET", "/api/v1/sandbox", auth="Bearer tökén".encode())
    assert (status, answer) == (401, {"detail": "Invalid API key"})
    status, answer = _request(stub, "GET", "/api/v1/sandbox", auth=b"Bearer \xff\xfe")  # not even UTF-8
    assert (status, answer) == (401, {"detail": "Invalid API key"})


def test_a_non_ascii_gateway_token_is_a_401_not_a_500(stub: dict[str, Any]) -> None:
    status, created = _request(stub, "POST", "/api/v1/sandbox", {"name": "g", "docker_image": "python:3.12-slim"})
    assert status == 201, created
    gateway = created["gatewayAuth"]
    path = f"/gateway/{gateway['user_ns']}/{gateway['job_id']}/exec"
    status, answer = _request(stub, "POST", path, {"command": "true"}, auth="Bearer ünïcode".encode())
    assert (status, answer) == (401, {"detail": "Invalid or expired gateway token"})


def _schemathesis(url: str, config: Path, tmp_path: Path) -> tuple[dict[str, Any], list[tuple[str, str, int]]]:
    """Run schemathesis on a front's /openapi.json as a user would; its JSON summary and every (method, url,
    status) it saw. Asserts the run found nothing, tested every operation and passed every phase."""
    report, har = tmp_path / "report.json", tmp_path / "requests.har"
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "run",
        url + "/openapi.json",
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        "1",
        "--workers",
        "1",
        "--report",
        "json,har",
        "--report-json-path",
        str(report),
        "--report-har-path",
        str(har),
    ]
    env = {**os.environ, "STAMPEDE_FUZZ_URL": url, "STAMPEDE_FUZZ_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)  # its cache too
    summary = json.loads(report.read_text())
    cases = summary["test_cases"]
    took = summary["running_time"]
    print(f"schemathesis {url}: {cases['generated']} cases, {cases['unique_failures']} failures in {took:.1f} s")
    assert run.returncode == 0 and summary["failures"] == [] and cases["unique_failures"] == 0, run.stdout[-6000:]
    assert summary["operations"]["tested"] == summary["operations"]["total"]
    assert all(phase["status"] == "success" for name, phase in summary["phases"].items() if name != "examples")
    answered = [
        (entry["request"]["method"], entry["request"]["url"], entry["response"]["status"])
        for entry in json.loads(har.read_text())["log"]["entries"]
    ]
    return summary, answered


def _reached(answered: list[tuple[str, str, int]], linked: set[tuple[str, str]]) -> None:
    for method, pattern in linked:
        hits = [status for m, url, status in answered if m == method and re.fullmatch(r"http://[^/]+" + pattern, url)]
        assert any(200 <= status < 300 for status in hits), (method, pattern, hits[:20])


def test_schemathesis_finds_nothing_with_every_check(stub: dict[str, Any], tmp_path: Path) -> None:
    """schemathesis 4 (every check is on unless tests/support/schemathesis.toml says why not) over the stub's
    /openapi.json: coverage, fuzzing and stateful phases, 0 failures, and the links reach the by-id operations
    and the gateway with a sandbox that exists."""
    summary, answered = _schemathesis(stub["url"], CONFIG, tmp_path)
    assert summary["operations"]["total"] >= 16
    _reached(answered, LINKED)


def _fuzz_served(
    module: str, url_key: str, config: Path, tmp_path: Path
) -> tuple[dict[str, Any], list[tuple[str, str, int]]]:
    """Schemathesis against a front started as its own `serve` process (ideal profile, fast clock)."""
    proc = spawn_serve(
        module,
        *("--profile", "ideal", "--time-scale", "0.01", "--seed", "1", "--token", TOKEN, "--port", "0"),
        "--exit-on-stdin-eof",
    )
    try:
        return _schemathesis(ready_line(proc)[url_key], config, tmp_path)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        finish(proc)


def test_schemathesis_finds_nothing_on_the_local_e2b(tmp_path: Path) -> None:
    """The same over the local E2B's control plane (its REST API; envd's Connect service is not described)."""
    summary, answered = _fuzz_served("providers.sim.e2b.serve", "url", CONFIG_E2B, tmp_path)
    assert summary["operations"]["total"] >= 8
    _reached(answered, {(m, p.replace("ID", r"sb\w+")) for m, p in LINKED_E2B})


def test_schemathesis_finds_nothing_on_the_local_daytona(tmp_path: Path) -> None:
    """The same over the local Daytona's REST control plane (the toolbox and Socket.IO events are not described)."""
    summary, answered = _fuzz_served("providers.sim.daytona.serve", "truth_url", CONFIG_DAYTONA, tmp_path)
    assert summary["operations"]["total"] >= 11
    one = r"/api/sandbox/sb\w+"
    _reached(answered, {("GET", one), ("DELETE", one), ("POST", one + "/start"), ("GET", one + "/toolbox-proxy-url")})


async def test_the_local_daytona_document_describes_every_rest_route() -> None:
    import aiohttp

    from providers.sim.daytona.server import DaytonaSettings, start_daytona

    daytona = await start_daytona(DaytonaSettings(profile="daytona-like", seed=1, time_scale=0.01, token=TOKEN))
    try:
        async with aiohttp.ClientSession() as http, http.get(daytona.url + "/openapi.json") as resp:
            doc = await resp.json()
        served = {
            (route.method.lower(), route.resource.canonical)
            for route in daytona.app.router.routes()
            if route.method not in ("HEAD", "*")  # a catch-all answers what is not served: not an operation
            and route.resource is not None
            and not route.resource.canonical.startswith(("/toolbox", "/api/socket.io"))
        }
        described = {(method, path) for path, ops in doc["paths"].items() for method in ops}
        assert served == described
    finally:
        await daytona.close()


async def test_the_document_states_the_maxima_of_the_profile_served() -> None:
    """A schema-valid create is never a 422: the maxima follow the profile's [limits] (modal-like: 64 vCPU, 24 h)."""
    import aiohttp

    from providers.sim.prime.api import StubSettings, start_stub

    stub = await start_stub(StubSettings(profile="modal-like", seed=1, time_scale=0.001, token=TOKEN))
    try:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession() as http:
            async with http.get(stub.url + "/openapi.json") as resp:
                fields = (await resp.json())["components"]["schemas"]["CreateSandboxRequest"]["properties"]
            assert fields["cpu_cores"]["maximum"] == 64 and fields["timeout_minutes"]["anyOf"] == [
                {"minimum": 1, "maximum": 1440}
            ]
            body = {"name": "m", "docker_image": "python:3.12-slim", "timeout_minutes": 1440}
            for cpu, status in ((fields["cpu_cores"]["maximum"], 201), (fields["cpu_cores"]["maximum"] + 1, 422)):
                async with http.post(stub.api_url + "/sandbox", json={**body, "cpu_cores": cpu}, headers=auth) as resp:
                    assert resp.status == status, await resp.text()
    finally:
        await stub.close()


def test_the_local_daytona_answers_a_non_ascii_api_key_with_401() -> None:
    """The same defect on the local Daytona's front (its middleware compared str tokens too)."""
    proc = spawn_serve("providers.sim.daytona.serve", "--port", "0", "--exit-on-stdin-eof")
    try:
        ready = ready_line(proc)
        host, port = ready["truth_url"].removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.putrequest("GET", "/api/sandbox")
        conn.putheader("Authorization", "Bearer tökén".encode())
        conn.endheaders()
        assert conn.getresponse().status == 401
        conn.close()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        finish(proc)


def _status_with_header(url: str, path: str, name: str, value: bytes) -> int:
    host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.putrequest("GET", path)
        conn.putheader(name, value)
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("module", "url_key", "path", "header"),
    [
        ("providers.sim.e2b.serve", "url", "/v2/sandboxes", "X-API-KEY"),  # .encode() refused escaped bytes
        ("providers.sim.e2b.serve", "url", "/api/v1/_stampede/truth", "Authorization"),
        ("providers.sim.modal.serve", "truth_url", "/api/v1/_stampede/truth", "Authorization"),
    ],
)
def test_the_other_fronts_answer_a_non_ascii_or_non_utf8_key_with_401(
    module: str, url_key: str, path: str, header: str
) -> None:
    proc = spawn_serve(module, "--port", "0", "--exit-on-stdin-eof")
    try:
        url = ready_line(proc)[url_key]
        for raw in ("tökén".encode(), b"\xff\xfe"):
            value = b"Bearer " + raw if header == "Authorization" else raw
            assert _status_with_header(url, path, header, value) == 401, (path, raw)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        finish(proc)


async def test_the_local_e2b_document_describes_every_control_plane_route() -> None:
    import aiohttp

    from providers.sim.e2b.server import E2BSettings, start_e2b

    e2b = await start_e2b(E2BSettings(profile="e2b-like", seed=1, time_scale=0.01, token=TOKEN))
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(e2b.url + "/openapi.json") as resp:
                doc = await resp.json()
            huge = {"templateID": "base", "timeout": 10**400}  # once a 500: float() of it overflowed
            async with http.post(e2b.url + "/v2/sandboxes", json=huge, headers={"X-API-KEY": TOKEN}) as resp:
                assert resp.status == 400, await resp.text()
        served = {
            (route.method.lower(), route.resource.canonical)
            for route in e2b.app.router.routes()
            if route.method != "HEAD" and route.resource is not None
        }
        envd = {  # envd's, behind the sandbox proxy
            ("get", "/health"),
            ("post", "/process.Process/{method}"),
            ("post", "/filesystem.Filesystem/{method}"),
            ("get", "/files"),
            ("post", "/files"),
        }
        described = {(method, path) for path, ops in doc["paths"].items() for method in ops}
        assert served - envd == described
        create = doc["components"]["schemas"]["NewSandbox"]["properties"]["timeout"]
        assert create["maximum"] == 86400  # e2b-like: sandboxes live up to 24 h
    finally:
        await e2b.close()


@pytest.mark.parametrize(
    "body",
    [{"ttlMinutes": 10**400}, {"buildInfo": {"dockerfileContent": "FROM python:3.12"}, "cpu": 10**400}],
)
def test_the_local_daytona_answers_a_huge_integer_with_400(body: dict[str, Any]) -> None:
    """Once a 500: `ttlMinutes * 60.0` and `float(cpu)` overflowed."""
    proc = spawn_serve("providers.sim.daytona.serve", "--port", "0", "--exit-on-stdin-eof")
    try:
        ready = ready_line(proc)
        host, port = ready["truth_url"].removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        data = json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {ready['token']}", "Content-Type": "application/json"}
        conn.request("POST", "/api/sandbox", body=data, headers=headers)
        assert conn.getresponse().status == 400
        conn.close()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        finish(proc)
