"""The stub's ConnectRPC gateway (`command_session.CommandSession`) checked at the protocol level.

Raw HTTP over loopback shows the wire itself (envelopes, end-of-stream JSON, status codes, headers); the
`connectrpc` client that prime-sandboxes 0.5.1 ships with shows a real Connect client agrees, with both
codecs. The SDK-level checks are in test_prime_conformance.py.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from connectrpc.client import ConnectClient
from connectrpc.code import Code
from connectrpc.compat import google_protobuf_binary_codec, google_protobuf_json_codec
from connectrpc.errors import ConnectError
from prime_sandboxes._proto.command_session import command_session_pb2
from prime_sandboxes.rpc_command_session import (
    COMMAND_SESSION_LIST_RPC_METHOD,
    COMMAND_SESSION_SEND_INPUT_RPC_METHOD,
    COMMAND_SESSION_SEND_SIGNAL_RPC_METHOD,
    COMMAND_SESSION_START_RPC_METHOD,
    build_command_session_send_signal_request,
    build_command_session_start_request,
)

import providers.sim.prime.command_session as command_session
from providers.sim.prime.api import RunningStub, StubSettings, start_stub

pb: Any = command_session_pb2  # generated: its classes are not visible to type checkers
TOKEN = "connect-token"
SERVICE = "command_session.CommandSession"


@pytest.fixture
async def stub() -> AsyncIterator[RunningStub]:
    stub = await start_stub(StubSettings(profile="ideal", seed=2, time_scale=1.0, token=TOKEN))
    yield stub
    await stub.close()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


async def running_sandbox(stub: RunningStub, http: aiohttp.ClientSession) -> tuple[str, dict[str, str]]:
    """A RUNNING sandbox: its gateway base URL and the headers carrying its gateway token."""
    async with http.post(
        stub.api_url + "/sandbox",
        json={"name": "c", "docker_image": "python:3.11-slim"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as resp:
        body = await resp.json()
    for _ in range(500):
        if stub.simulator.get(body["id"]).status == "RUNNING":
            break
        await asyncio.sleep(0.01)
    auth = body["gatewayAuth"]
    return f"{auth['gateway_url']}/{auth['user_ns']}/{auth['job_id']}", {"Authorization": f"Bearer {auth['token']}"}


def envelopes(data: bytes) -> list[tuple[int, bytes]]:
    out, offset = [], 0
    while offset < len(data):
        flags, length = struct.unpack_from(">BI", data, offset)
        out.append((flags, data[offset + 5 : offset + 5 + length]))
        offset += 5 + length
    assert offset == len(data), "trailing bytes after the last envelope"
    return out


def start_body(command: str, flags: int = 0, *, compress: bool = False) -> bytes:
    payload = build_command_session_start_request(command=command, working_dir=None, env=None).SerializeToString()
    if compress:
        payload = gzip.compress(payload)
    return struct.pack(">BI", flags, len(payload)) + payload


async def post(
    http: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str], **extra: str
) -> tuple[int, dict[str, str], bytes]:
    sent = {"Content-Type": "application/connect+proto", "connect-protocol-version": "1", **headers, **extra}
    async with http.post(url, data=body, headers=sent) as resp:
        return resp.status, dict(resp.headers), await resp.read()


def end_of(data: bytes) -> dict[str, Any]:
    """The end-of-stream JSON, after checking it is the last envelope and flagged as such."""
    frames = envelopes(data)
    flags, payload = frames[-1]
    assert flags == 0b10 and all(f == 0 for f, _ in frames[:-1])
    end: dict[str, Any] = json.loads(payload)
    return end


async def test_start_streams_enveloped_events_and_an_end_of_stream(
    stub: RunningStub, http: aiohttp.ClientSession
) -> None:
    base, gateway = await running_sandbox(stub, http)
    status, headers, data = await post(
        http,
        f"{base}/{SERVICE}/Start",
        start_body("echo out; echo err >&2; exit 3"),
        gateway,
        **{"connect-timeout-ms": "10000"},
    )
    assert status == 200 and headers["Content-Type"] == "application/connect+proto"
    assert end_of(data) == {}
    events = [pb.StartResponse.FromString(payload).event for _, payload in envelopes(data)[:-1]]
    kinds = [event.WhichOneof("event") for event in events]
    assert kinds == ["start", "data", "data", "end"]
    assert events[0].start.pid >= 100
    assert (events[1].data.stdout, events[2].data.stderr) == (b"out\n", b"err\n")
    assert (events[3].end.exit_code, events[3].end.exited, events[3].end.status) == (3, True, "exited")


async def test_large_output_is_chunked_and_the_json_codec_works(stub: RunningStub, http: aiohttp.ClientSession) -> None:
    base, gateway = await running_sandbox(stub, http)
    word = "x" * 70_000
    for codec in (google_protobuf_binary_codec(), google_protobuf_json_codec()):
        client = ConnectClient(base, codec=codec, send_compression=None)
        request = build_command_session_start_request(command=f"echo {word}", working_dir=None, env=None)
        stream = client.execute_server_stream(
            request=request, method=COMMAND_SESSION_START_RPC_METHOD, headers=gateway, timeout_ms=10_000
        )
        events = [message.event async for message in stream]
        chunks = [e.data.stdout for e in events if e.WhichOneof("event") == "data"]
        assert [len(c) for c in chunks] == [32768, 32768, 70_001 - 65536]
        assert b"".join(chunks) == word.encode() + b"\n" and events[-1].end.exit_code == 0
    status, headers, _ = await post(
        http,
        f"{base}/{SERVICE}/Start",
        struct.pack(">BI", 0, 2) + b"{}",
        gateway,
        **{"Content-Type": "application/connect+json"},
    )
    assert status == 200 and headers["Content-Type"] == "application/connect+json"


async def test_errors_travel_in_the_end_of_stream_with_http_200(stub: RunningStub, http: aiohttp.ClientSession) -> None:
    base, gateway = await running_sandbox(stub, http)
    url = f"{base}/{SERVICE}/Start"
    status, _, data = await post(http, url, start_body("true"), {"Authorization": "Bearer wrong"})
    assert status == 200 and end_of(data)["error"]["code"] == "unauthenticated"
    status, _, data = await post(http, url, start_body("true"), gateway, **{"connect-timeout-ms": "x1"})
    assert end_of(data)["error"]["code"] == "invalid_argument"
    status, _, data = await post(http, url, start_body("true"), gateway, **{"connect-protocol-version": "2"})
    assert end_of(data)["error"]["code"] == "invalid_argument"
    status, _, data = await post(http, url, start_body("true")[:-1], gateway)  # truncated envelope
    assert end_of(data)["error"] == {
        "code": "invalid_argument",
        "message": "protocol error: envelope of 25 bytes is truncated",
    }
    status, _, data = await post(http, url, start_body("true", flags=1), gateway)  # compressed, no encoding
    assert end_of(data)["error"]["code"] == "internal"
    stub.simulator.terminate(base.rsplit("/", 1)[1])
    status, _, data = await post(http, url, start_body("true"), gateway)
    error = end_of(data)["error"]
    assert status == 200 and error["code"] == "not_found" and error["message"].startswith("Sandbox not found")


async def test_gzip_requests_415_and_unknown_methods(stub: RunningStub, http: aiohttp.ClientSession) -> None:
    base, gateway = await running_sandbox(stub, http)
    status, _, data = await post(
        http,
        f"{base}/{SERVICE}/Start",
        start_body("echo z", flags=1, compress=True),
        gateway,
        **{"connect-content-encoding": "gzip"},
    )
    assert status == 200 and end_of(data) == {} and b"z\n" in data
    status, headers, _ = await post(
        http, f"{base}/{SERVICE}/Start", b"", gateway, **{"Content-Type": "application/grpc"}
    )
    assert status == 415 and "application/connect+proto" in headers["Accept-Post"]
    status, _, data = await post(http, f"{base}/{SERVICE}/Nope", b"", gateway)
    assert status == 404 and json.loads(data)["code"] == "unimplemented"
    client = ConnectClient(base, codec=google_protobuf_binary_codec(), send_compression=None)
    with pytest.raises(ConnectError) as info:
        await client.execute_unary(
            request=pb.SendInputRequest(),
            method=COMMAND_SESSION_SEND_INPUT_RPC_METHOD,
            headers=gateway,
            timeout_ms=5000,
        )
    assert info.value.code is Code.UNIMPLEMENTED


async def test_the_server_enforces_connect_timeout_ms(stub: RunningStub, http: aiohttp.ClientSession) -> None:
    base, gateway = await running_sandbox(stub, http)
    started = time.monotonic()
    status, _, data = await post(
        http, f"{base}/{SERVICE}/Start", start_body("sleep 30"), gateway, **{"connect-timeout-ms": "300"}
    )
    assert time.monotonic() - started < 15  # the 300 ms deadline ended it, not the 30 s command
    assert status == 200 and end_of(data)["error"]["code"] == "deadline_exceeded"
    kinds = [pb.StartResponse.FromString(p).event.WhichOneof("event") for _, p in envelopes(data)[:-1]]
    assert kinds == ["start"]  # the command was accepted, then ran out of time


async def test_not_running_yet_is_unavailable() -> None:
    stub = await start_stub(StubSettings(profile="ideal", seed=2, token=TOKEN, overrides=(("boot.median_s", 60.0),)))
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(
                stub.api_url + "/sandbox",
                json={"name": "c", "docker_image": "python:3.11-slim"},
                headers={"Authorization": f"Bearer {TOKEN}"},
            ) as resp:
                auth = (await resp.json())["gatewayAuth"]
            url = f"{auth['gateway_url']}/{auth['user_ns']}/{auth['job_id']}/{SERVICE}/Start"
            _, _, data = await post(http, url, start_body("true"), {"Authorization": f"Bearer {auth['token']}"})
            assert end_of(data)["error"] == {"code": "unavailable", "message": "Sandbox is not running yet"}
    finally:
        await stub.close()


async def test_list_send_signal_and_keepalives(
    stub: RunningStub, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(command_session, "KEEPALIVE_S", 0.05)
    base, gateway = await running_sandbox(stub, http)
    client = ConnectClient(base, codec=google_protobuf_binary_codec(), send_compression=None)
    request = build_command_session_start_request(command="sleep 30", working_dir=None, env=None, session_uuid="s-1")

    async def run() -> list[Any]:
        stream = client.execute_server_stream(
            request=request, method=COMMAND_SESSION_START_RPC_METHOD, headers=gateway, timeout_ms=20_000
        )
        return [message.event async for message in stream]

    task = asyncio.create_task(run())
    listed: Any = None
    for _ in range(200):
        listed = await client.execute_unary(
            request=pb.ListRequest(), method=COMMAND_SESSION_LIST_RPC_METHOD, headers=gateway, timeout_ms=5000
        )
        if listed.sessions:
            break
        await asyncio.sleep(0.01)
    [session] = listed.sessions
    assert session.session_uuid == "s-1" and list(session.command.args) == ["-c", "sleep 30"]
    await asyncio.sleep(0.2)  # a few keepalives
    await client.execute_unary(
        request=build_command_session_send_signal_request(session_uuid="s-1", signal="terminate", signal_uuid="u"),
        method=COMMAND_SESSION_SEND_SIGNAL_RPC_METHOD,
        headers=gateway,
        timeout_ms=5000,
    )
    events = await asyncio.wait_for(task, 10)
    kinds = [event.WhichOneof("event") for event in events]
    assert kinds[0] == "start" and "keepalive" in kinds and kinds[-1] == "end"
    assert (events[-1].end.exit_code, events[-1].end.status) == (143, "signaled")
    with pytest.raises(ConnectError) as info:  # a unary error: HTTP 404 + JSON body
        await client.execute_unary(
            request=build_command_session_send_signal_request(session_uuid="s-1", signal="kill", signal_uuid="v"),
            method=COMMAND_SESSION_SEND_SIGNAL_RPC_METHOD,
            headers=gateway,
            timeout_ms=5000,
        )
    assert info.value.code is Code.NOT_FOUND
    listed = await client.execute_unary(
        request=pb.ListRequest(), method=COMMAND_SESSION_LIST_RPC_METHOD, headers=gateway, timeout_ms=5000
    )
    assert list(listed.sessions) == []
