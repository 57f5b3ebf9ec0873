"""Transport faults on the local Modal's gRPC listeners: the profile's `[faults]` section in gRPC's terms.

The shared `FaultInjector` (providers/sim/core/faults.py) decides per call whether a fault happens; this
decides what it looks like on an HTTP/2 gRPC stream, which is what the `modal` SDK sees:

| fault | on the wire |
|---|---|
| reset | the call's stream is reset (RST_STREAM) before any answer: grpclib raises StreamTerminatedError |
| error_5xx | UNAVAILABLE or INTERNAL (alternating), as a load balancer or a crashed front end answers |
| slow | the right answer, `slow_delay_s` (wall seconds) late |
| hang | no answer for `hang_hold_s`, then the stream is reset (sooner if the client gives up) |
| malformed | a reply the client cannot decode (bytes that are not the reply's protobuf), OK trailers without a message, or a non-gRPC content type (an HTML error page) |
| throttle | RESOURCE_EXHAUSTED "Too many requests", with Modal's `RPCRetryPolicy` when `retry_after_s` > 0 |
| gateway_death | exec only: the task's command router drops the command after it started; the call's stream is reset and every later call about that command answers UNAVAILABLE |

One call is one draw; a reset resets that call's stream, not the client's whole connection (every
rollout's calls share one HTTP/2 connection, so killing it would be a fault of every rollout at once).
RPCs map onto the injector's operations in `OPERATION_OF`; session and object calls (hello, auth token,
app, image, secret) are never faulted: they run once per client, before any rollout.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any

from grpclib import GRPCError, Status
from modal_proto import api_pb2

from providers.sim.core.faults import FaultInjector, FaultKind

OPERATION_OF: dict[str, str] = {
    "SandboxCreate": "create",
    "SandboxCreateV2": "create",
    "SandboxGetTaskId": "status",
    "SandboxGetTaskIdV2": "status",
    "SandboxWait": "status",
    "SandboxWaitV2": "status",
    "SandboxGetCommandRouterAccess": "status",
    "TaskGetCommandRouterAccess": "status",
    "SandboxWaitUntilReady": "status",
    "SandboxTagsGet": "status",
    "SandboxTagsGetV2": "status",
    "TaskExecStart": "exec",
    "TaskExecStdioRead": "exec",
    "TaskExecWait": "exec",
    "TaskExecPoll": "exec",
    "SandboxTerminate": "terminate",
    "SandboxTerminateV2": "terminate",
    "SandboxList": "list",
    "SandboxListV2": "list",
    "SandboxGetLogs": "logs",
}
"""Which injector operation each Modal RPC (control plane and command router) counts as."""

MAX_DEAD_EXECS = 10_000
THROTTLE_MESSAGE = "Too many requests, please slow down"
_GARBAGE = b"\x0a\xff\xff\xff\xff\x0f<html>502 Bad Gateway</html>"  # a length-delimited field longer than the body
_HTML = b"<html><body><h1>502 Bad Gateway</h1></body></html>"

Handler = Callable[[Any], Coroutine[Any, Any, None]]


class _RawCodec:
    """Sends the bytes it is given as the message: how a reply the client cannot decode is made."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> Any:  # pragma: no cover - never receives
        raise NotImplementedError


class _Replayed:
    """The handler's stream with the request already read (the fault wrapper read it to know the exec)."""

    def __init__(self, stream: Any, request: Any) -> None:
        self._stream = stream
        self._request = request

    async def recv_message(self) -> Any:
        return self._request

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class GrpcFaults:
    """Applies drawn faults to the RPCs of grpclib services; one instance per local Modal."""

    def __init__(self, injector: FaultInjector) -> None:
        self.injector = injector
        self.dead_execs: OrderedDict[tuple[str, str], None] = OrderedDict()  # newest last, at most MAX_DEAD_EXECS
        self._closing = asyncio.Event()
        self._five_hundreds = 0

    def close(self) -> None:
        """Release every held (hung) call now, so the listeners stop without waiting `hang_hold_s`."""
        self._closing.set()

    def wrap(self, service: Any) -> Any:
        """`service` with every faultable RPC going through the injector (itself when faults are off)."""
        if not self.injector.active:
            return service
        return _FaultyService(service, self)

    async def apply(self, name: str, stream: Any, handler: Handler) -> None:
        operation = OPERATION_OF.get(name)
        if operation is None:
            await handler(stream)
            return
        request = await stream.recv_message()
        replayed = _Replayed(stream, request)
        exec_key = _exec_key(request) if operation == "exec" else None
        if exec_key is not None and exec_key in self.dead_execs:
            raise GRPCError(Status.UNAVAILABLE, "connection to the task's command router was lost")
        fault = self.injector.draw(operation)
        if fault is None:
            await handler(replayed)
        elif fault is FaultKind.RESET:
            await stream.cancel()
        elif fault is FaultKind.ERROR_5XX:
            self._five_hundreds += 1
            if self._five_hundreds % 2:
                raise GRPCError(Status.UNAVAILABLE, "upstream connect error or disconnect/reset before headers")
            raise GRPCError(Status.INTERNAL, "Internal server error")
        elif fault is FaultKind.SLOW:
            await self._hold(self._settings().slow_delay_s)
            await handler(replayed)
        elif fault is FaultKind.HANG:
            await self._hold(self._settings().hang_hold_s)
            await stream.cancel()
        elif fault is FaultKind.MALFORMED:
            await self._malformed(stream)
        elif fault is FaultKind.THROTTLE:
            retry_after = self._settings().retry_after_s
            details = [api_pb2.RPCRetryPolicy(retry_after_secs=retry_after)] if retry_after > 0 else None
            raise GRPCError(Status.RESOURCE_EXHAUSTED, THROTTLE_MESSAGE, details)
        elif fault is FaultKind.GATEWAY_DEATH:
            if name == "TaskExecStart":
                await handler(_Silenced(stream, request))  # the command starts; its answer never arrives
            if exec_key is not None:
                self.dead_execs[exec_key] = None
                while len(self.dead_execs) > MAX_DEAD_EXECS:  # a soak with this fault on must not grow
                    self.dead_execs.popitem(last=False)
            await stream.cancel()

    def _settings(self) -> Any:
        return self.injector.faults

    async def _hold(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._closing.wait(), timeout=seconds)
        except TimeoutError:
            pass

    async def _malformed(self, stream: Any) -> None:
        variant = self.injector.malformed_variant()
        if variant == 0:  # a reply that is not the reply's protobuf
            stream._codec = _RawCodec()
            await stream.send_message(_GARBAGE)
            return
        raw = stream._stream  # below grpclib's checks: what a broken proxy sends
        stream._send_trailing_metadata_done = True
        if variant == 1:  # trailers saying OK, but no message
            await raw.send_headers(
                [(":status", "200"), ("content-type", "application/grpc"), ("grpc-status", "0")], end_stream=True
            )
        else:  # an HTML error page where gRPC was expected
            await raw.send_headers([(":status", "200"), ("content-type", "text/html")])
            await raw.send_data(_HTML, end_stream=True)


class _Silenced(_Replayed):
    """A stream whose answers are swallowed: the handler does its work, the client hears nothing."""

    async def send_message(self, message: Any) -> None:
        return None

    async def send_trailing_metadata(self, **kwargs: Any) -> None:
        return None


def _exec_key(request: Any) -> tuple[str, str] | None:
    task_id = getattr(request, "task_id", "")
    exec_id = getattr(request, "exec_id", "")
    return (task_id, exec_id) if task_id and exec_id else None


class _FaultyService:
    """A grpclib service whose handlers are wrapped by `GrpcFaults.apply`."""

    def __init__(self, service: Any, faults: GrpcFaults) -> None:
        self._service = service
        self._faults = faults

    def __mapping__(self) -> dict[str, Any]:
        mapping: dict[str, Any] = self._service.__mapping__()
        wrapped: dict[str, Any] = {}
        for path, handler in mapping.items():
            name = path.rsplit("/", 1)[-1]
            if name in OPERATION_OF:
                wrapped[path] = handler._replace(func=self._wrapped(name, handler.func))
            else:
                wrapped[path] = handler
        return wrapped

    def _wrapped(self, name: str, func: Handler) -> Handler:
        faults = self._faults

        async def call(stream: Any) -> None:
            await faults.apply(name, stream, func)

        call.__name__ = name
        return call
