"""Request bytes that do not parse as the method's message: INVALID_ARGUMENT naming `request`.

Left to grpc, a deserializer that raises is logged with a traceback at ERROR and the servicer gets
None, which ends as UNKNOWN: a client could fill the logs with tracebacks at will.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc
from google.protobuf.message import DecodeError


class Undecodable:
    """Stands in for a request message whose bytes did not parse."""

    def __init__(self, error: DecodeError) -> None:
        self.error = error


def _tolerant(deserializer):
    def deserialize(data: bytes):
        try:
            return deserializer(data)
        except DecodeError as error:
            return Undecodable(error)

    return deserialize


async def _refuse(context: grpc.aio.ServicerContext, request: Undecodable) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request: the bytes received do not parse ({request.error})")


def _unary_unary(behaviour):
    async def unary_unary(request, context):
        if isinstance(request, Undecodable):
            await _refuse(context, request)
        return await behaviour(request, context)

    return unary_unary


def _unary_stream(behaviour):
    async def unary_stream(request, context):
        if isinstance(request, Undecodable):
            await _refuse(context, request)
        async with contextlib.aclosing(behaviour(request, context)) as responses:
            async for response in responses:
                yield response

    return unary_stream


def _stream_stream(behaviour):
    async def stream_stream(request_iterator, context):
        async with contextlib.aclosing(behaviour(_checked(request_iterator, context), context)) as responses:
            async for response in responses:
                yield response

    return stream_stream


async def _checked(request_iterator: AsyncIterator, context: grpc.aio.ServicerContext) -> AsyncIterator:
    async for request in request_iterator:
        if isinstance(request, Undecodable):
            await _refuse(context, request)
        yield request


_WRAPPERS = {"unary_unary": _unary_unary, "unary_stream": _unary_stream, "stream_stream": _stream_stream}


class RefuseUndecodable(grpc.aio.ServerInterceptor):
    """For the methods under `prefix` (ours: async-generator servicers, no client-streaming unary)."""

    def __init__(self, prefix: str = "/specdec.v1.") -> None:
        self.prefix = prefix

    async def intercept_service(self, continuation, handler_call_details: grpc.HandlerCallDetails):
        handler = await continuation(handler_call_details)
        if handler is None or not handler_call_details.method.startswith(self.prefix):
            return handler
        kind = next((name for name in _WRAPPERS if getattr(handler, name) is not None), None)
        if kind is None:
            return handler
        return handler._replace(
            request_deserializer=_tolerant(handler.request_deserializer), **{kind: _WRAPPERS[kind](getattr(handler, kind))}
        )
