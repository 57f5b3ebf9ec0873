"""grpclib plumbing shared by the local Modal control plane and its command router.

- `with_unimplemented(base)`: the generated servicer bases (`ModalClientBase`, `TaskCommandRouterBase`)
  declare every RPC abstract; this fills in each one we do not model with an UNIMPLEMENTED answer, so the
  SDK gets a gRPC status (not a crash) for anything outside the fake, and a new SDK RPC shows up loudly.
- `ModalDetailsCodec`: error details as Modal's servers send them (`modal.client.RPCStatus` whose `Any`
  entries carry e.g. an `RPCRetryPolicy` under the `type.modal.com/` prefix), which is how the SDK learns
  a server-directed retry delay for throttling.
- `RequestCodec`: a request that is not the RPC's protobuf answers INVALID_ARGUMENT, as the one bad call it is;
  grpclib's own codec let the `DecodeError` through, which answered UNKNOWN "Internal Server Error" and logged a
  traceback per call (found by tests/sim/fronts/test_fuzz_modal_grpc.py).
- `_framed`: a request body that is not one gRPC message (cut short, flagged compressed, or none) answers
  INVALID_ARGUMENT / UNIMPLEMENTED instead of grpclib's UNKNOWN and traceback (also found by that fuzzer).
- `start_grpc_server`: a grpclib server that allows many concurrent streams per connection. The h2
  default of 100 would queue a 960-wide burst's calls inside one client connection, a limit Modal's
  front ends do not impose, and it would show up as vendor latency.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable, Collection
from typing import Any, TypeVar, cast

import grpclib.server
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError, Message
from grpclib import GRPCError, Status
from grpclib.encoding.base import StatusDetailsCodecBase
from grpclib.encoding.proto import ProtoCodec
from grpclib.protocol import H2Protocol
from h2.settings import SettingCodes
from modal_proto import api_pb2

MAX_CONCURRENT_STREAMS = 65536
_MODAL_TYPE_PREFIX = "type.modal.com/"

T = TypeVar("T", bound=type)


def with_unimplemented(base: T) -> T:
    """A subclass of a generated grpclib servicer base whose every abstract RPC answers UNIMPLEMENTED."""

    def unimplemented(name: str) -> Any:
        async def handler(self: Any, stream: Any) -> None:
            raise GRPCError(Status.UNIMPLEMENTED, f"{name} is not implemented by the stampede local Modal")

        handler.__name__ = name
        return handler

    names = sorted(getattr(base, "__abstractmethods__", ()))
    namespace = {name: unimplemented(name) for name in names}
    cls = abc.ABCMeta(f"Unimplemented{base.__name__}", (base,), namespace)
    return cls  # type: ignore[return-value]


class ModalDetailsCodec(StatusDetailsCodecBase):
    """Encodes error details as `modal.client.RPCStatus` (what the SDK's custom codec decodes)."""

    def encode(self, status: Status, message: str | None, details: Any) -> bytes:
        proto = api_pb2.RPCStatus(code=status.value, message=message or "")
        for detail in details or ():
            packed = any_pb2.Any()
            if detail.DESCRIPTOR.full_name.startswith("modal."):
                packed.Pack(detail, type_url_prefix=_MODAL_TYPE_PREFIX)
            else:
                packed.Pack(detail)
            proto.details.append(packed)
        encoded: bytes = proto.SerializeToString()
        return encoded

    def decode(self, status: Status, message: str | None, data: bytes) -> Any:
        proto = api_pb2.RPCStatus.FromString(data)
        decoded: list[Message] = []
        for packed in proto.details:
            if packed.Is(api_pb2.RPCRetryPolicy.DESCRIPTOR):
                policy = api_pb2.RPCRetryPolicy()
                packed.Unpack(policy)
                decoded.append(policy)
        return decoded


class RequestCodec(ProtoCodec):
    """grpclib's protobuf codec, but a request that does not parse is the client's error, not the server's."""

    def decode(self, data: bytes, message_type: Any) -> Any:
        try:
            return super().decode(data, message_type)
        except DecodeError:
            name = getattr(getattr(message_type, "DESCRIPTOR", None), "full_name", "the request type")
            raise GRPCError(Status.INVALID_ARGUMENT, f"the request message is not a valid {name}") from None


class _WideProtocol(H2Protocol):
    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        # grpclib exposes no setting for this; raise the h2 stream cap right after the preface.
        self.connection._connection.update_settings({SettingCodes.MAX_CONCURRENT_STREAMS: MAX_CONCURRENT_STREAMS})
        self.connection.flush()


def _framed(func: Callable[[Any], Awaitable[None]], client_streaming: bool) -> Callable[[Any], Awaitable[None]]:
    """`func` with its stream's `recv_message` refusing a request that is not framed as gRPC's one message: grpclib
    raised AssertionError (a body ending inside a message), NotImplementedError (the compressed flag) or gave
    None (no message) to the handler, each an UNKNOWN "Internal Server Error" with a traceback logged. An error
    message is sent without surrounding whitespace."""

    async def handler(stream: Any) -> None:
        receive = stream.recv_message

        async def recv_message() -> Any:
            try:
                message = await receive()
            except AssertionError:
                raise GRPCError(Status.INVALID_ARGUMENT, "the request body ends inside a message") from None
            except NotImplementedError:
                raise GRPCError(Status.UNIMPLEMENTED, "compressed request messages are not supported") from None
            if message is None and not client_streaming:
                raise GRPCError(Status.INVALID_ARGUMENT, "the call carries no request message")
            return message

        stream.recv_message = recv_message
        try:
            await func(stream)
        except GRPCError as exc:
            # e.g. "... access to task " naming an empty id: no HTTP/2 field value may start or end with
            # whitespace (RFC 9113 8.2.1), and a strict client refuses the whole answer
            if exc.message and exc.message != exc.message.strip():
                raise GRPCError(exc.status, exc.message.strip(), exc.details) from None
            raise

    return handler


class _WideServer(grpclib.server.Server):
    def __init__(self, handlers: list[Any], **options: Any) -> None:
        super().__init__(handlers, **options)
        self._mapping = {
            path: handler._replace(func=_framed(handler.func, handler.cardinality.client_streaming))
            for path, handler in self._mapping.items()
        }

    def _protocol_factory(self) -> H2Protocol:
        protocol = super()._protocol_factory()
        return _WideProtocol(protocol.handler, protocol.config, protocol.h2_config)


async def start_grpc_server(handlers: Collection[Any], host: str, port: int) -> tuple[grpclib.server.Server, int]:
    """Start a grpclib server for `handlers` on host:port (0: a free port); returns it and the bound port."""
    server = _WideServer(list(handlers), codec=RequestCodec(), status_details_codec=ModalDetailsCodec())
    await server.start(host, port, backlog=4096, reuse_address=True)
    listening = cast(asyncio.Server, server._server)
    return server, int(listening.sockets[0].getsockname()[1])


async def stop_grpc_server(server: grpclib.server.Server) -> None:
    server.close()
    await server.wait_closed()
