"""The simulated Connect fronts and Daytona's toolbox under fuzzed calls: Prime's gateway
(`command_session.CommandSession`), E2B's envd (`process.Process`, `filesystem.Filesystem`) and the toolbox REST
routes, each served by its own `serve` process on loopback with one running sandbox to aim at.

Every procedure of each service descriptor (the SDKs' own protobufs) gets, for unary ones, bodies in the Connect
JSON and binary encodings (messages drawn from the request type's descriptor by tests/support/proto_fuzz.py,
JSON objects with the message's field names and values of any type, bytes that are no message), with fuzzed
Connect headers (timeout, protocol version, compression); server-streaming ones get enveloped bodies, valid or
with broken framing (truncated, oversized, lying lengths, unknown flags, two messages, garbage). Each answer must
come within a bound, never be HTTP 500 nor a Connect `internal`/`unknown` other than a protocol error, be
well-formed (a stream ends with its end-of-stream envelope), echo no token, and a well-formed call must still
succeed afterwards. At the end no server wrote a traceback.
"""

from __future__ import annotations

import gzip
import http.client
import json
import re
import struct
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pool, json_format, timestamp_pb2
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.descriptor_pb2 import FileDescriptorProto
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from providers.sim.core.serving.serve_cli import TOKEN_ENV
from providers.sim.prime.command_session import load_messages
from tests.support.proto_fuzz import JSON_VALUES, broken_envelopes, envelope, json_objects, messages, not_a_message
from tests.support.serve_process import ready_line, spawn_serve_logged, stop_serve

SECRET = "fuzz-connect-secret-51f0"
BOUND_S = 15.0  # an answer not complete by then hung (generous on a busy 2-core machine)
CODES = {
    "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists",
    "permission_denied", "resource_exhausted", "failed_precondition", "aborted", "out_of_range", "unimplemented",
    "internal", "unavailable", "data_loss", "unauthenticated",
}  # fmt: skip
SAFE_ROOT = "/home/user/fuzz"  # every path a mutating filesystem call may name lies below it
_PREFIX = struct.Struct(">BI")


def _e2b_services() -> list[Any]:
    """envd's services from the e2b package's own descriptors (it ships them for its own protobuf runtime)."""
    from e2b.envd.filesystem import filesystem_pb
    from e2b.envd.process import process_pb

    pool = descriptor_pool.DescriptorPool()
    pool.Add(FileDescriptorProto.FromString(timestamp_pb2.DESCRIPTOR.serialized_pb))
    for module in (process_pb, filesystem_pb):
        pool.Add(FileDescriptorProto.FromString(module.desc().proto.to_binary()))
    return [pool.FindServiceByName("process.Process"), pool.FindServiceByName("filesystem.Filesystem")]


PRIME_SERVICE = load_messages().DESCRIPTOR.services_by_name["CommandSession"]
E2B_SERVICES = _e2b_services()
PROCEDURES = [("prime", m) for m in PRIME_SERVICE.methods] + [("e2b", m) for s in E2B_SERVICES for m in s.methods]
UNARY = [(front, m) for front, m in PROCEDURES if not m.server_streaming and not m.client_streaming]
STREAMING = [(front, m) for front, m in PROCEDURES if m.server_streaming or m.client_streaming]


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Front:
    """One served vendor: where its Connect procedures live, what a call must carry, what it must never echo."""

    name: str
    url: str
    base: str  # the path before `<service>/<method>`
    headers: dict[str, str]
    secrets: list[str]
    known: dict[str, list[str]] = field(default_factory=dict)
    codecs: tuple[str, ...] = ("proto", "json")
    health: Callable[[Front], None] | None = None

    def post(self, path: str, body: bytes, headers: dict[str, str], method: str = "POST") -> Answer:
        host, port = self.url.removeprefix("http://").split("/")[0].rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=BOUND_S)
        try:
            conn.request(method, path, body=body, headers={**headers, "Content-Length": str(len(body))})
            resp = conn.getresponse()
            return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()


def _request(front: Front, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    data = b"" if body is None else json.dumps(body).encode()
    path = url.removeprefix("http://").split("/", 1)[1]
    answer = front.post("/" + path, data, {"Content-Type": "application/json", **(headers or {})}, method)
    assert answer.status < 300, (url, answer)
    return json.loads(answer.body) if answer.body else None


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.fixture(scope="module")
def fronts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Front]]:
    folder = tmp_path_factory.mktemp("connect-fuzz")
    procs: dict[str, Any] = {}
    logs: dict[str, Path] = {}
    args = ("--profile", "ideal", "--time-scale", "0.01", "--seed", "1", "--port", "0", "--exit-on-stdin-eof")
    args += ("--commands", "modelled")  # fuzzed commands never reach a real shell
    try:
        for name in ("prime", "e2b", "daytona"):
            logs[name] = folder / f"{name}.stderr"
            with logs[name].open("wb") as stderr:
                env = {TOKEN_ENV: SECRET, "TMPDIR": str(folder)}
                procs[name] = spawn_serve_logged(f"providers.sim.{name}.serve", stderr, *args, env=env)
        yield {
            "prime": _prime(ready_line(procs["prime"])),
            "e2b": _e2b(ready_line(procs["e2b"])),
            "daytona": _daytona(ready_line(procs["daytona"])),
        }
    finally:
        codes = {name: stop_serve(proc) for name, proc in procs.items()}
    for name, path in logs.items():  # aiohttp logs a broken gzip body it drains after an answer: not ours
        log = path.read_text(errors="replace")
        ours = re.search(r'File "[^"]*/(providers|foundation)/', log) or "simulator bug" in log
        assert codes[name] == 0 and not ours, (name, log[-4000:])


def _prime(ready: dict[str, Any]) -> Front:
    front = Front("prime", ready["url"], "", {}, [SECRET])
    auth = {"Authorization": f"Bearer {SECRET}"}
    created = _request(
        front,
        "POST",
        ready["url"] + "/api/v1/sandbox",
        {"name": "f", "docker_image": "python:3.12", "timeout_minutes": 1440},
        auth,
    )
    gateway = created["gatewayAuth"]
    sandbox = ready["url"] + f"/api/v1/sandbox/{created['id']}"
    _until(lambda: _request(front, "GET", sandbox, headers=auth)["status"] == "RUNNING", "the Prime sandbox runs")
    front.base = gateway["gateway_url"].removeprefix(ready["url"]) + f"/{gateway['user_ns']}/{gateway['job_id']}/"
    front.headers = {"Authorization": f"Bearer {gateway['token']}"}
    front.secrets.append(gateway["token"])
    front.known = {"cmd": ["/bin/bash", "sh", "echo"], "args": ["-c", "echo hi", "exit 3"], "session_uuid": ["s1"]}
    return front


def _e2b(ready: dict[str, Any]) -> Front:
    front = Front("e2b", ready["url"], "/", {}, [SECRET], codecs=("json",))
    created = _request(
        front, "POST", ready["url"] + "/v2/sandboxes", {"templateID": "base", "timeout": 86400}, {"X-API-KEY": SECRET}
    )
    sandbox_id, token = created["sandboxID"], created["envdAccessToken"]
    front.headers = {"E2b-Sandbox-Id": sandbox_id, "X-Access-Token": token}
    front.secrets.append(token)

    def healthy() -> bool:
        return front.post("/health", b"", front.headers, "GET").status == 204

    _until(healthy, "the E2B sandbox's envd answers")
    front.known = {
        "cmd": ["/bin/bash", "sh", "echo"],
        "args": ["-l", "-c", "echo hi"],
        "tag": ["t1"],
        "path": [SAFE_ROOT, SAFE_ROOT + "/a.txt", SAFE_ROOT + "/d"],
        "source": [SAFE_ROOT + "/a.txt"],
        "destination": [SAFE_ROOT + "/b.txt"],
    }
    return front


def _daytona(ready: dict[str, Any]) -> Front:
    front = Front("daytona", ready["truth_url"], "/toolbox/", {"Authorization": f"Bearer {SECRET}"}, [SECRET])
    created = _request(front, "POST", ready["url"] + "/sandbox", {"autoStopInterval": 0}, front.headers)
    sandbox = ready["url"] + f"/sandbox/{created['id']}"
    _until(lambda: _request(front, "GET", sandbox, headers=front.headers)["state"] == "started", "Daytona starts")
    session = ready["toolbox_url"] + f"/{created['id']}/process/session"
    _request(front, "POST", session, {"sessionId": "s1"}, front.headers)
    front.known = {"sandbox_id": [created["id"]], "session_id": ["s1"]}
    return front


# --- what every answer must be ---------------------------------------------------------------------------


def _no_leak(front: Front, answer: Answer) -> None:
    text = answer.body.decode("utf-8", "replace")
    assert "Traceback" not in text, (front.name, text[:2000])
    for secret in front.secrets:
        assert secret not in text and all(secret not in v for v in answer.headers.values()), front.name


def _error_ok(error: Any, where: str) -> None:
    assert isinstance(error, dict) and error.get("code") in CODES, (where, error)
    if error["code"] in ("internal", "unknown"):  # the protocol's own errors are `internal`; a handler's never
        assert str(error.get("message", "")).startswith("protocol error"), (where, error)


def _check_unary(front: Front, procedure: MethodDescriptor, codec: str, answer: Answer) -> None:
    where = f"{front.name} {procedure.full_name} {codec}: {answer.status} {answer.body[:300]!r}"
    assert answer.status != 500, where
    _no_leak(front, answer)
    if answer.status == 200:
        if codec == "proto":
            GetMessageClass(procedure.output_type).FromString(answer.body)
        else:
            json_format.Parse(answer.body, GetMessageClass(procedure.output_type)(), ignore_unknown_fields=True)
    elif answer.headers.get("content-type", "").startswith("application/json") and answer.status != 502:
        _error_ok(json.loads(answer.body), where)  # (502 is E2B's proxy, in its own shape)


def _check_stream(front: Front, procedure: MethodDescriptor, codec: str, answer: Answer) -> None:
    where = f"{front.name} {procedure.full_name} {codec}: {answer.status} {answer.body[:300]!r}"
    assert answer.status != 500, where
    _no_leak(front, answer)
    if answer.status != 200:
        return
    data, offset, ended = answer.body, 0, False
    while offset < len(data):
        assert not ended, ("bytes after the end-of-stream envelope", where)
        flags, length = _PREFIX.unpack_from(data, offset)
        payload = data[offset + 5 : offset + 5 + length]
        assert len(payload) == length, ("a truncated response envelope", where)
        offset += 5 + length
        if flags & 0b10:
            ended = True
            end = json.loads(payload)
            if "error" in end:
                _error_ok(end["error"], where)
        elif codec == "proto":
            GetMessageClass(procedure.output_type).FromString(payload)
        else:
            json_format.Parse(payload, GetMessageClass(procedure.output_type)(), ignore_unknown_fields=True)
    assert ended, ("no end-of-stream envelope", where)


# --- what a fuzzer sends -----------------------------------------------------------------------------------


def _confine(value: Any) -> Any:
    """Path fields of a JSON body moved below SAFE_ROOT, so no fuzzed Remove/Move/Write leaves the sandbox's tree
    even if the tree's guard had a hole (this runs as the machine's user)."""
    if isinstance(value, dict):
        return {
            k: (SAFE_ROOT + "/" + v.replace("..", "_").lstrip("/"))
            if k in ("path", "source", "destination") and isinstance(v, str)
            else _confine(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_confine(v) for v in value]
    return value


def _message_json(message: Message) -> bytes | None:
    try:
        return json_format.MessageToJson(message, indent=None).encode()
    except (ValueError, TypeError, json_format.Error):  # e.g. a timestamp out of range
        return None


def _bodies(front: Front, procedure: MethodDescriptor, codec: str) -> st.SearchStrategy[bytes]:
    """Half the bodies a well-formed message of random content, the rest type-confused JSON or garbage."""
    generated = messages(procedure.input_type, known=front.known)
    if codec == "proto":
        wellformed = generated.map(lambda m: m.SerializeToString())
        return st.integers(0, 3).flatmap(lambda n: wellformed if n < 3 else not_a_message())
    as_json = generated.map(lambda m: json.dumps(_confine(json.loads(_message_json(m) or b"{}"))).encode())
    confused = json_objects(procedure.input_type).map(lambda o: json.dumps(_confine(o)).encode())
    others = (confused, JSON_VALUES.map(lambda v: json.dumps(v).encode()), not_a_message())
    return st.integers(0, 5).flatmap(lambda n: as_json if n < 3 else others[n - 3])


VALID_HEADERS = st.fixed_dictionaries(
    {}, optional={"connect-timeout-ms": st.sampled_from(["2000", "5000"]), "connect-protocol-version": st.just("1")}
)
FUZZED_HEADERS = st.fixed_dictionaries(
    {},
    optional={
        "connect-timeout-ms": st.one_of(
            st.sampled_from(["0", "1", "2000", "9999999999", "-1", "1e3", "99999999999"]),
            st.text("0123456789x ", max_size=12),
        ),
        "connect-protocol-version": st.sampled_from(["1", "2", ""]),
    },
)
HEADERS = st.integers(0, 3).flatmap(lambda n: FUZZED_HEADERS if n == 3 else VALID_HEADERS)
UNTIL_THE_CLIENT_GOES = frozenset({"filesystem.Filesystem.WatchDir"})
"""Streams that, asked well, never end on their own (envd's WatchDir sends keepalives until the client goes): a call
of one with no deadline, or one past BOUND_S, is answered correctly by a stream this test could not read to its end
(it failed so once, on a fuzzed path that named a directory an earlier MakeDir had made)."""


def _readable_deadline(value: str | None) -> str:
    """The deadline header a call of such a stream gets: a valid one within 5 s; a malformed one is kept (the
    parser's to refuse)."""
    if value is None or value == "" or (value.isdigit() and len(value) <= 10 and int(value) > 5000):
        return "5000"
    return value


def _call_path(front: Front, procedure: MethodDescriptor) -> str:
    return f"{front.base}{procedure.containing_service.full_name}/{procedure.name}"


def _still_serving(front: Front) -> None:
    """A well-formed unary List still succeeds."""
    service = PRIME_SERVICE if front.name == "prime" else E2B_SERVICES[0]
    path = f"{front.base}{service.full_name}/List"
    answer = front.post(path, b"{}", {**front.headers, "Content-Type": "application/json"})
    assert answer.status == 200, (front.name, answer)


FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@pytest.mark.parametrize(("name", "procedure"), UNARY, ids=lambda p: getattr(p, "full_name", p))
@FUZZ
@given(data=st.data())
def test_a_unary_procedure_answers_fuzz_with_a_connect_error(
    fronts: dict[str, Front], name: str, procedure: MethodDescriptor, data: st.DataObject
) -> None:
    front = fronts[name]
    codec = data.draw(st.sampled_from(["proto", "json"]), label="codec")
    body = data.draw(_bodies(front, procedure, codec), label="body")
    headers = {**front.headers, **data.draw(HEADERS, label="headers"), "Content-Type": f"application/{codec}"}
    if data.draw(st.booleans(), label="gzip"):
        headers["Content-Encoding"] = "gzip"
        body = gzip.compress(body) if data.draw(st.booleans(), label="really") else body
    answer = front.post(_call_path(front, procedure), body, headers)
    _check_unary(front, procedure, codec, answer)
    if codec not in front.codecs:
        assert answer.status in (415, 404), answer
    _still_serving(front)


@pytest.mark.parametrize(("name", "procedure"), STREAMING, ids=lambda p: getattr(p, "full_name", p))
@FUZZ
@given(data=st.data())
def test_a_streaming_procedure_answers_fuzz_with_an_end_of_stream(
    fronts: dict[str, Front], name: str, procedure: MethodDescriptor, data: st.DataObject
) -> None:
    front = fronts[name]
    codec = data.draw(st.sampled_from(["proto", "json"]), label="codec")
    headers = {**front.headers, **data.draw(HEADERS, label="headers"), "Content-Type": f"application/connect+{codec}"}
    if procedure.full_name in UNTIL_THE_CLIENT_GOES:
        headers["connect-timeout-ms"] = _readable_deadline(headers.get("connect-timeout-ms"))
    framing = data.draw(st.sampled_from(["one", "gzip", "broken"]), label="framing")
    if framing == "broken":
        body = data.draw(broken_envelopes(), label="body")
    else:
        payload = data.draw(_bodies(front, procedure, codec), label="payload")
        if framing == "gzip":
            headers["connect-content-encoding"] = "gzip"
            body = envelope(gzip.compress(payload), flags=0b01)
        else:
            body = envelope(payload)
    answer = front.post(_call_path(front, procedure), body, headers)
    _check_stream(front, procedure, codec, answer)
    _still_serving(front)


# --- Daytona's toolbox -------------------------------------------------------------------------------------


def _toolbox_routes() -> list[tuple[str, str]]:
    """(method, path template) of every toolbox route the local Daytona registers."""
    from providers.sim.daytona.server import DaytonaSettings, create_app

    app = create_app(DaytonaSettings(profile="ideal", seed=1, time_scale=0.01, token=SECRET))
    return sorted(
        {
            (route.method, route.resource.canonical)
            for route in app.router.routes()
            if route.resource is not None and route.resource.canonical.startswith("/toolbox") and route.method != "HEAD"
        }
    )


TOOLBOX = _toolbox_routes()
SEGMENT = st.text(max_size=12).map(lambda text: urllib.parse.quote(text, safe="") or "x")


@st.composite
def _toolbox_path(draw: st.DrawFn, template: str, known: dict[str, list[str]]) -> str:
    parts = []
    for part in template.strip("/").split("/"):
        if part.startswith("{"):
            aimed = known.get(part.strip("{}"))
            parts.append(draw(st.sampled_from(aimed)) if aimed and draw(st.integers(0, 3)) < 3 else draw(SEGMENT))
        else:
            parts.append(part)
    return "/" + "/".join(parts)


@pytest.mark.parametrize(("method", "template"), TOOLBOX, ids=lambda p: p)
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_a_toolbox_route_answers_random_json_without_a_500(
    fronts: dict[str, Front], method: str, template: str, data: st.DataObject
) -> None:
    front = fronts["daytona"]
    path = data.draw(_toolbox_path(template, front.known), label="path")
    if method == "*":  # a catch-all route
        method = data.draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]), label="method")
    body = data.draw(
        st.integers(0, 3).flatmap(lambda n: JSON_VALUES if n == 3 else json_objects_for_toolbox()), label="body"
    )
    answer = front.post(
        path, json.dumps(_confine(body)).encode(), {**front.headers, "Content-Type": "application/json"}, method
    )
    assert answer.status < 500 or answer.status in (501, 502, 503, 504), (method, path, body, answer)
    _no_leak(front, answer)
    listed = front.post(f"/toolbox/{front.known['sandbox_id'][0]}/process/session", b"", front.headers, "GET")
    assert listed.status == 200, listed


def json_objects_for_toolbox() -> st.SearchStrategy[dict[str, Any]]:
    """The toolbox's own request fields: a command (mostly one that runs), the rest with values of any JSON type."""
    keys = ["timeout", "envs", "cwd", "sessionId", "runAsync", "async", "language", "argv", "code", "path"]
    command = st.sampled_from(["echo hi", "true", "exit 3"]) | st.text(max_size=8)
    return st.fixed_dictionaries({"command": command}, optional=dict.fromkeys(keys, JSON_VALUES))


def test_every_procedure_and_route_is_fuzzed() -> None:
    """Counts of what the tests above reach: every method of the SDKs' service descriptors, every toolbox route."""
    assert len(PRIME_SERVICE.methods) == 7 and {m.name for m in PRIME_SERVICE.methods} >= {"Start", "List"}
    assert {s.full_name for s in E2B_SERVICES} == {"process.Process", "filesystem.Filesystem"}
    assert len(UNARY) + len(STREAMING) == len(PROCEDURES) and len(TOOLBOX) >= 8


@pytest.mark.parametrize("name", ["prime", "e2b"])
def test_a_gzip_unary_request_is_decoded_once(fronts: dict[str, Front], name: str) -> None:
    """Once `invalid_argument` "cannot gunzip request": aiohttp undoes `Content-Encoding` as it reads a body, and
    the Connect layer gunzipped it a second time, so every gzip unary call was refused."""
    front = fronts[name]
    service = PRIME_SERVICE if name == "prime" else E2B_SERVICES[0]
    headers = {**front.headers, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    answer = front.post(f"{front.base}{service.full_name}/List", gzip.compress(b"{}"), headers)
    assert answer.status == 200, answer


@pytest.mark.parametrize(("name", "stream"), [("prime", False), ("prime", True), ("e2b", False)])
def test_a_body_that_is_not_its_content_encoding_is_invalid_argument(
    fronts: dict[str, Front], name: str, stream: bool
) -> None:
    """Once HTTP 500 `internal` "simulator bug" and a traceback: the body's gzip would not decode."""
    front = fronts[name]
    service = PRIME_SERVICE if name == "prime" else E2B_SERVICES[0]
    method, content_type = ("Start", "application/connect+json") if stream else ("List", "application/json")
    headers = {**front.headers, "Content-Type": content_type, "Content-Encoding": "gzip"}
    answer = front.post(f"{front.base}{service.full_name}/{method}", b"not gzip at all", headers)
    if stream:
        assert answer.status == 200 and answer.body.startswith(b"\x02"), answer
        assert json.loads(answer.body[5:])["error"]["code"] == "invalid_argument", answer
    else:
        assert answer.status == 400 and json.loads(answer.body)["code"] == "invalid_argument", answer
    assert answer.headers.get("connection") == "close", answer  # the parser cannot find the next request
    _still_serving(front)


@pytest.mark.parametrize(
    ("procedure", "body"),
    [
        ("SendSignal", {"signal": "SIGNAL_SIGKILL", "process": {"pid": 1e400}}),  # JSON's 1e400: an infinite float
        ("SendSignal", {"signal": "SIGNAL_SIGKILL", "process": {"pid": float("inf")}}),
        ("SendSignal", {"signal": "SIGNAL_SIGTERM", "process": {"pid": -1e400}}),
    ],
)
def test_envd_answers_an_infinite_pid_with_invalid_argument(
    fronts: dict[str, Front], procedure: str, body: dict[str, Any]
) -> None:
    """Once HTTP 500 "simulator bug": int() of an infinite float overflowed."""
    front = fronts["e2b"]
    headers = {**front.headers, "Content-Type": "application/json"}
    answer = front.post(f"/process.Process/{procedure}", json.dumps(body).encode(), headers)
    assert answer.status == 400 and json.loads(answer.body)["code"] == "invalid_argument", answer
    _still_serving(front)


@pytest.mark.parametrize("args", [5, {"a": 1}, "-c", True])
def test_envd_answers_process_args_that_are_no_list_with_invalid_argument(fronts: dict[str, Front], args: Any) -> None:
    """Once `internal` "simulator bug" ('int' object is not iterable); a string ran as its characters."""
    front = fronts["e2b"]
    headers = {**front.headers, "Content-Type": "application/connect+json", "connect-timeout-ms": "5000"}
    payload = json.dumps({"process": {"cmd": "/bin/bash", "args": args}}).encode()
    answer = front.post("/process.Process/Start", envelope(payload), headers)
    assert answer.status == 200 and answer.body.startswith(b"\x02"), answer
    assert json.loads(answer.body[5:])["error"]["code"] == "invalid_argument", answer
    _still_serving(front)


@pytest.mark.parametrize("timeout", [10**400, 2**32, -1])
def test_the_toolbox_answers_a_timeout_past_uint32_with_400(fronts: dict[str, Front], timeout: int) -> None:
    """Once HTTP 500: `timeout / time_scale` of 10**400 overflowed a float (the daemon takes a uint32)."""
    front = fronts["daytona"]
    body = json.dumps({"command": "echo hi", "timeout": timeout}).encode()
    path = f"/toolbox/{front.known['sandbox_id'][0]}/process/execute"
    answer = front.post(path, body, {**front.headers, "Content-Type": "application/json"})
    assert answer.status == 400, answer
    _no_leak(front, answer)
