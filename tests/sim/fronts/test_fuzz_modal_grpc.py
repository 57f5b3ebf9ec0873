"""The local Modal's gRPC listeners under fuzzed calls: every RPC either service registers gets messages built
from its request type's descriptor (tests/support/proto_fuzz.py) and bytes that are no message at all.

The server runs as its own process (`python -m providers.sim.modal.serve`), as the harness embeds it. Each call
must end within a bound with a documented gRPC status (never UNKNOWN, grpclib's answer to an exception the
handler let through, nor INTERNAL), an OK reply must parse as the RPC's reply type, nothing may echo the
workspace secret, and the control plane must still answer a well-formed `ClientHello` afterwards. At the end the
server's stderr holds no traceback.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpclib.const
import h2.config
import h2.connection
import h2.events
import pytest
from grpclib import GRPCError, Status
from grpclib.client import Channel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from modal_proto import api_grpc, api_pb2, task_command_router_grpc
from modal_proto import task_command_router_pb2 as tcr_pb2

from providers.sim.core.serving.serve_cli import TOKEN_ENV
from providers.sim.modal.control_plane import ModalControlPlane
from providers.sim.modal.grpc_plumbing import with_unimplemented
from providers.sim.modal.router import ModalCommandRouter
from tests.support.proto_fuzz import broken_envelopes, envelope, messages, not_a_message
from tests.support.serve_process import ready_line, spawn_serve_logged, stop_serve

SECRET = "fuzz-modal-secret-7d1c"
BOUND_S = 15.0  # a call that has not ended by then hung: generous for a busy 2-core machine
CALL_DEADLINE_S = 5.0  # the gRPC deadline a call carries
WAIT_DEADLINE_S = 0.5  # ... and one that may block by design (waits on a sandbox or command)
WAITS = {
    "SandboxGetTaskId",
    "SandboxWait",
    "SandboxWaitV2",
    "SandboxWaitUntilReady",
    "TaskExecStart",
    "TaskExecStdioRead",
    "TaskExecWait",
}
DOCUMENTED = {
    Status.OK,
    Status.INVALID_ARGUMENT,
    Status.NOT_FOUND,
    Status.UNAUTHENTICATED,
    Status.PERMISSION_DENIED,
    Status.FAILED_PRECONDITION,
    Status.RESOURCE_EXHAUSTED,
    Status.UNIMPLEMENTED,
    Status.ABORTED,
    Status.UNAVAILABLE,
}
CONTROL = with_unimplemented(api_grpc.ModalClientBase)().__mapping__()
ROUTER = with_unimplemented(task_command_router_grpc.TaskCommandRouterBase)().__mapping__()
IMPLEMENTED = sorted(
    [p for p in CONTROL if p.rsplit("/", 1)[1] in vars(ModalControlPlane)]
    + [p for p in ROUTER if p.rsplit("/", 1)[1] in vars(ModalCommandRouter)],
    key=lambda p: ("Terminate" in p, p),  # the seeded sandbox is terminated last: the rest reach past NOT_FOUND
)
UNIMPLEMENTED = sorted((set(CONTROL) | set(ROUTER)) - set(IMPLEMENTED))
T = TypeVar("T")


class _RawCodec:
    """Bytes in, bytes out: the fuzzer serialises (or mangles) each message itself."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> bytes:
        return data


@dataclass
class Answer:
    status: Status
    message: str
    replies: list[bytes]
    took_s: float


@dataclass
class Plane:
    """The served local Modal, a client loop on a thread, and what exists on it (for well-aimed fuzz)."""

    ready: dict[str, Any]
    loop: asyncio.AbstractEventLoop
    control: Channel
    router: Channel
    known: dict[str, list[str]] = field(default_factory=dict)
    auth_jwt: str = ""
    router_jwt: str = ""

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(BOUND_S)

    def metadata(self, path: str, authorized: bool) -> dict[str, str]:
        if not authorized:
            return {"x-modal-token-id": self.ready["token_id"], "x-modal-token-secret": "wrong"}
        if path in ROUTER:
            return {"authorization": f"Bearer {self.router_jwt}"}
        pair = {"x-modal-token-id": self.ready["token_id"], "x-modal-token-secret": SECRET}
        return {**pair, "x-modal-auth-token": self.auth_jwt} if self.auth_jwt else pair

    def call(self, path: str, payload: bytes, *, authorized: bool = True) -> Answer:
        """One call with raw bytes as its request message; its status, replies and how long it took."""
        handler = CONTROL.get(path) or ROUTER[path]
        channel = self.router if path in ROUTER else self.control
        deadline = WAIT_DEADLINE_S if path.rsplit("/", 1)[1] in WAITS else CALL_DEADLINE_S

        async def go() -> Answer:
            replies: list[bytes] = []
            started = time.monotonic()
            try:
                async with channel.request(
                    path, handler.cardinality, None, None, timeout=deadline, metadata=self.metadata(path, authorized)
                ) as stream:
                    await stream.send_message(payload, end=True)
                    while (reply := await stream.recv_message()) is not None:
                        replies.append(reply)
                        if not handler.cardinality.server_streaming:
                            break
                    await stream.recv_trailing_metadata()
            except GRPCError as exc:
                return Answer(exc.status, exc.message or "", replies, time.monotonic() - started)
            return Answer(Status.OK, "", replies, time.monotonic() - started)

        return self.run(go())

    def ok(self, path: str, message: Any) -> Any:
        """A well-formed call that must succeed; its reply parsed."""
        answer = self.call(path, message.SerializeToString())
        assert answer.status is Status.OK, (path, answer)
        handler = CONTROL.get(path) or ROUTER[path]
        return handler.reply_type.FromString(answer.replies[0]) if answer.replies else None


def _control(name: str) -> str:
    return f"/modal.client.ModalClient/{name}"


def _router(name: str) -> str:
    return f"/modal.task_command_router.TaskCommandRouter/{name}"


def _seed(plane: Plane) -> None:
    """An app, an image, a V2 sandbox with a readiness probe and one command: ids the fuzzer can aim at."""
    plane.auth_jwt = plane.ok(_control("AuthTokenGet"), api_pb2.AuthTokenGetRequest()).token
    app = plane.ok(
        _control("AppGetOrCreate"),
        api_pb2.AppGetOrCreateRequest(
            app_name="fuzz", object_creation_type=api_pb2.OBJECT_CREATION_TYPE_CREATE_IF_MISSING
        ),
    )
    image = plane.ok(
        _control("ImageGetOrCreate"),
        api_pb2.ImageGetOrCreateRequest(image=api_pb2.Image(dockerfile_commands=["FROM python:3.12-slim"])),
    )
    definition = api_pb2.Sandbox(
        image_id=image.image_id, readiness_probe=api_pb2.Probe(exec_command=api_pb2.Probe.ExecCommand(argv=["true"]))
    )
    created = plane.ok(
        _control("SandboxCreateV2"), api_pb2.SandboxCreateV2Request(app_id=app.app_id, definition=definition)
    )
    plane.router_jwt = created.command_router_access.jwt
    plane.ok(
        _router("TaskExecStart"),
        tcr_pb2.TaskExecStartRequest(task_id=created.task_id, exec_id="ex-fuzz", command_args=["echo", "hi"]),
    )
    plane.known.update(
        app_id=[app.app_id],
        image_id=[image.image_id],
        sandbox_id=[created.sandbox_id],
        task_id=[created.task_id],
        exec_id=["ex-fuzz"],
        app_name=["fuzz"],
        environment_name=["main"],
    )


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    stderr_path = tmp_path_factory.mktemp("modal-fuzz") / "stderr.txt"
    with stderr_path.open("wb") as stderr:
        proc = spawn_serve_logged(
            "providers.sim.modal.serve",
            stderr,
            *("--profile", "ideal", "--time-scale", "0.01", "--seed", "1", "--port", "0", "--exit-on-stdin-eof"),
            *("--commands", "modelled"),  # fuzzed commands never reach a real shell
            env={TOKEN_ENV: SECRET},
        )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        ready = ready_line(proc)
        assert ready["token"] == SECRET, "the serve command took its token from STAMPEDE_TOKEN"

        async def channels() -> tuple[Channel, Channel]:
            host, port = ready["url"].removeprefix("http://").rsplit(":", 1)
            rhost, rport = ready["router_url"].removeprefix("http://").rsplit(":", 1)
            return Channel(host, int(port), codec=_RawCodec()), Channel(rhost, int(rport), codec=_RawCodec())

        control, router = asyncio.run_coroutine_threadsafe(channels(), loop).result(BOUND_S)
        plane = Plane(ready, loop, control, router)
        _seed(plane)
        yield plane
        plane.control.close()
        plane.router.close()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(BOUND_S)
        rc = stop_serve(proc)
    log = Path(stderr_path).read_text(errors="replace")
    assert rc == 0 and "Traceback" not in log, log[-4000:]


def _still_serving(plane: Plane) -> None:
    hello = plane.ok(_control("ClientHello"), CONTROL[_control("ClientHello")].request_type())
    assert hello.image_builder_version


def _check(plane: Plane, path: str, answer: Answer, *, implemented: bool) -> None:
    name = path.rsplit("/", 1)[1]
    allowed = DOCUMENTED | ({Status.DEADLINE_EXCEEDED} if name in WAITS else set())
    assert answer.status in allowed, (path, answer)
    assert "Traceback" not in answer.message and "Internal Server Error" not in answer.message, (path, answer)
    assert SECRET not in answer.message and all(SECRET.encode() not in reply for reply in answer.replies)
    if not implemented:
        assert answer.status is Status.UNIMPLEMENTED, (path, answer)
    if answer.status is Status.OK:
        handler = CONTROL.get(path) or ROUTER[path]
        for reply in answer.replies:
            handler.reply_type.FromString(reply)  # a reply the SDK can parse


def _payloads(path: str, known: dict[str, list[str]]) -> st.SearchStrategy[bytes]:
    handler = CONTROL.get(path) or ROUTER[path]
    built = messages(handler.request_type.DESCRIPTOR, known=known).map(lambda m: m.SerializeToString())
    return st.integers(0, 4).flatmap(lambda n: built if n else not_a_message())  # 4 in 5 well-formed


FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@pytest.mark.parametrize("path", IMPLEMENTED, ids=lambda p: p.rsplit("/", 1)[1])
@FUZZ
@given(data=st.data())
def test_an_implemented_rpc_answers_fuzz_with_a_documented_status(plane: Plane, path: str, data: st.DataObject) -> None:
    payload = data.draw(_payloads(path, plane.known), label="request")
    authorized = data.draw(st.integers(0, 3).map(lambda n: n > 0 or path in ROUTER), label="authorized")
    answer = plane.call(path, payload, authorized=authorized)
    _check(plane, path, answer, implemented=True)
    if not authorized:  # the request is read first: one that does not parse is refused as such
        assert answer.status in (Status.UNAUTHENTICATED, Status.INVALID_ARGUMENT), answer
    _still_serving(plane)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_every_other_rpc_answers_unimplemented(plane: Plane, data: st.DataObject) -> None:
    """Each of the ~280 RPCs the local Modal does not model, fed a generated message: UNIMPLEMENTED, still up."""
    for path in UNIMPLEMENTED:
        payload = data.draw(_payloads(path, plane.known), label=path)
        _check(plane, path, plane.call(path, payload), implemented=False)
    _still_serving(plane)


def test_every_registered_rpc_is_fuzzed() -> None:
    """The two lists above cover both services whole: a new SDK RPC is fuzzed without editing this file."""
    assert set(IMPLEMENTED) | set(UNIMPLEMENTED) == set(CONTROL) | set(ROUTER)
    assert len(IMPLEMENTED) >= 25 and len(CONTROL) + len(ROUTER) > 250
    assert all(isinstance(h.cardinality, grpclib.const.Cardinality) for h in CONTROL.values())


@pytest.mark.parametrize("name", ["SandboxListV2", "SandboxCreate", "ClientHello"])
def test_a_request_that_is_not_the_rpcs_protobuf_is_invalid_argument(plane: Plane, name: str) -> None:
    """Once UNKNOWN "Internal Server Error" with a traceback logged per call: grpclib's codec let the
    protobuf DecodeError through the handler."""
    answer = plane.call(_control(name), b"\xff" * 11)
    assert answer.status is Status.INVALID_ARGUMENT, answer
    assert answer.message.startswith("the request message is not a valid modal.client.") or name == "ClientHello"
    _still_serving(plane)


# --- gRPC's own framing, sent raw over HTTP/2 -------------------------------------------------------------------


def _raw_grpc(plane: Plane, path: str, body: bytes) -> tuple[int, str]:
    """One call whose DATA is `body` as given (grpclib's client frames every message right): its gRPC status."""
    url = plane.ready["router_url" if path in ROUTER else "url"]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    metadata = plane.metadata(path, authorized=True)
    with socket.create_connection((host, int(port)), timeout=BOUND_S) as sock:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        stream_id = conn.get_next_available_stream_id()
        headers = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", f"{host}:{port}")]
        headers += [("content-type", "application/grpc"), ("te", "trailers"), *metadata.items()]
        conn.send_headers(stream_id, headers)
        conn.send_data(stream_id, body, end_stream=True)
        sock.sendall(conn.data_to_send())
        status: dict[str, str] = {}
        while True:
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection without ending the call"
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                    status.update((k.decode(), v.decode()) for k, v in event.headers)
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamReset):
                    raise AssertionError(f"{path}: the server reset the call")
                elif isinstance(event, h2.events.StreamEnded):
                    return int(status["grpc-status"]), status.get("grpc-message", "")
            sock.sendall(conn.data_to_send())


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_a_request_body_that_is_not_one_grpc_message_is_refused(plane: Plane, data: st.DataObject) -> None:
    """Cut-short prefixes, lengths past the body or over 4 GiB, compressed or unknown flag bits, two messages, an
    empty body: a documented status (INVALID_ARGUMENT, UNIMPLEMENTED for compression) on every implemented RPC."""
    path = data.draw(st.sampled_from(IMPLEMENTED), label="rpc")
    body = data.draw(broken_envelopes(), label="body")
    code, message = _raw_grpc(plane, path, body)
    assert Status(code) in DOCUMENTED | {Status.DEADLINE_EXCEEDED}, (path, body, code, message)
    assert "Internal Server Error" not in message and SECRET not in message, (path, body, message)
    _still_serving(plane)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"\x00\x00", Status.INVALID_ARGUMENT),  # a prefix cut short
        (b"\x00\x00\x00\x00\x64abc", Status.INVALID_ARGUMENT),  # 100 bytes announced, 3 sent
        (envelope(b"", flags=1), Status.UNIMPLEMENTED),  # the compressed flag
        (b"", Status.INVALID_ARGUMENT),  # no message at all (the handler once got None)
    ],
)
@pytest.mark.parametrize("name", ["ClientHello", "SandboxCreate"])
def test_a_call_framed_wrong_is_refused_not_unknown(plane: Plane, name: str, body: bytes, status: Status) -> None:
    """Once UNKNOWN "Internal Server Error" and a traceback each: grpclib's AssertionError, NotImplementedError,
    or a None request the handler read fields of."""
    code, message = _raw_grpc(plane, _control(name), body)
    assert Status(code) is status, (name, body, code, message)
    _still_serving(plane)


def test_an_error_message_has_no_surrounding_whitespace(plane: Plane) -> None:
    """Once "This token does not grant access to task " for an empty task id: an HTTP/2 field value ending in a
    space, which a strict HTTP/2 client (h2 with validation) refuses as a malformed answer."""
    request = tcr_pb2.SandboxWaitUntilReadyTcrRequest(task_id="")
    code, message = _raw_grpc(plane, _router("SandboxWaitUntilReady"), envelope(request.SerializeToString()))
    assert Status(code) is Status.PERMISSION_DENIED and message == message.strip(), (code, message)
