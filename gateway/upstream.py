"""The verify service as seen from the gateway: requests out, responses and errors back."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.errors import OpenAIError, bad_request, overloaded, unavailable
from gateway.protocol import ChatCompletionRequest, CompletionRequest
from specdec.fields import BY_NAME, LOGIT_BIAS, PENALTIES, SAMPLING, SPECULATIVE, http_name
from specdec.serving.config import ServingSection, TlsSection
from specdec.serving.rpc.convert import set_field
from specdec.serving.rpc.server import aio_channel
from specdec.v1 import common_pb2, verify_pb2, verify_pb2_grpc

_FIELD = re.compile(r"^([\w.\[\]]+): ")  # verify's INVALID_ARGUMENT details start with the field's name
_REFERENCE = re.compile(r"\(reference ([0-9a-f]{1,32})\)")  # verify's INTERNAL answer: where its log has the details
log = logging.getLogger(__name__)


class Upstream:
    def __init__(self, settings: ServingSection, tls: TlsSection | None = None) -> None:
        self.settings = settings
        self.channel = aio_channel(settings.verify_endpoint, tls, round_robin=True)
        self.stub = verify_pb2_grpc.VerifyServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    async def close(self) -> None:
        await self.channel.close()

    async def ready(self) -> bool:
        try:
            reply = await self.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
        except grpc.aio.AioRpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    async def status(self) -> common_pb2.ServerStatus:
        await self._connected()
        try:
            return await self.stub.Status(common_pb2.ServerStatusRequest(), timeout=self.settings.upstream_connect_timeout_s)
        except grpc.aio.AioRpcError as error:
            raise http_error(error) from error

    async def _connected(self) -> None:
        """503 within upstream_connect_timeout_s when verify cannot be reached (never a hang)."""
        try:
            await asyncio.wait_for(self.channel.channel_ready(), timeout=self.settings.upstream_connect_timeout_s)
        except asyncio.TimeoutError as error:
            raise unavailable(f"the verify service at {self.settings.verify_endpoint} is unreachable") from error

    async def generate(
        self, request: verify_pb2.GenerateRequest, grammar_param: str = "response_format"
    ) -> AsyncIterator[verify_pb2.GenerateResponse]:
        """Stream one generation; cancelling the consumer cancels the gRPC call (sessions are freed).
        `grammar_param`: the request field verify's grammar came from (response_format, or tool_choice)."""
        await self._connected()
        call = self.stub.Generate(request, timeout=self.settings.request_timeout_s)
        try:
            async for response in call:
                yield response
        except grpc.aio.AioRpcError as error:
            raise http_error(error, grammar_param) from error
        finally:
            call.cancel()


def http_error(error: grpc.aio.AioRpcError, grammar_param: str = "response_format") -> OpenAIError:
    code, details = error.code(), error.details() or ""
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        match = _FIELD.match(details)
        param = _param(match.group(1), grammar_param) if match else None
        # The message names the HTTP field too, not verify's gRPC one ("options.grammar: ..." -> "response_format: ...").
        message = f"{param}: {details[match.end() :]}" if match else details
        return bad_request(message, param)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return overloaded(f"the verify service is at capacity: {details}", retry_after_s=1)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION):
        return unavailable(f"the verify service is unavailable: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return OpenAIError(504, "the generation did not finish within the request timeout", "timeout_error")
    # Never echoed: the details of an unexpected failure can name the code that failed (gRPC answers an
    # unhandled servicer exception "Unexpected <class 'ValueError'>: ..."). The log has them.
    log.warning("the verify service failed: %s: %s", code.name, details)
    reference = _REFERENCE.search(details)
    return OpenAIError(
        502, f"the verify service failed ({code.name})" + (f"; reference {reference.group(1)}" if reference else ""), "server_error"
    )


def _param(field: str, grammar_param: str) -> str:
    """The OpenAI request's name for the field verify named (the grammar's: where it came from)."""
    name = http_name(field)
    return grammar_param if name == BY_NAME["grammar"].http_name else name


def generate_request(request: ChatCompletionRequest | CompletionRequest, choice_index: int) -> verify_pb2.GenerateRequest:
    """The GenerateRequest for one choice; choice i of a seeded request uses seed + i."""
    options = verify_pb2.GenerationOptions(
        stop=request.stop,
        max_tokens=request.requested_max_tokens or 0,
        grammar=request.grammar or "",
        ignore_eos=request.ignore_eos,
        min_tokens=request.min_tokens,
    )
    if isinstance(request, ChatCompletionRequest):
        options.chat.CopyFrom(chat_messages(request))
    elif isinstance(request.prompt, str):
        options.text = request.prompt
    else:
        options.token_ids.ids.extend(request.prompt)
    for field in (*SAMPLING, *PENALTIES, LOGIT_BIAS):
        if getattr(request, field.http_name) is not None:
            set_field(options, field, getattr(request, field.http_name), root="options")
    if request.seed is not None:
        options.seed = (request.seed + choice_index) % 2**64
    message = verify_pb2.GenerateRequest(options=options, request_id=f"choice-{choice_index}", draft_scope=request._draft_scope)
    if isinstance(request, ChatCompletionRequest) and request.prediction is not None:
        message.prediction = request.prediction.text()
    _apply_speculative(message, request)
    _apply_logprobs(message, request)
    return message


def tools_json(request: ChatCompletionRequest) -> str:
    """The tools to render, as the JSON verify receives ("" for none); built once per request (the
    prompt-length check counts it before the gRPC request is built)."""
    if request._tools_json is None:
        tools = request.active_tools
        request._tools_json = json.dumps([tool.model_dump(exclude_none=True) for tool in tools]) if tools else ""
    return request._tools_json


def chat_messages(request: ChatCompletionRequest) -> verify_pb2.ChatMessages:
    """The conversation, calls and results included, and the tools to render (none with tool_choice "none")."""
    chat = verify_pb2.ChatMessages(tools_json=tools_json(request))
    for message in request.messages:
        calls = [
            verify_pb2.ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments) for call in message.tool_calls or []
        ]
        chat.messages.add(
            role=message.role,
            content=message.text(),
            tool_calls=calls,
            tool_call_id=message.tool_call_id or "",
            name=(message.name or "") if message.role == "tool" else "",
        )
    return chat


def _apply_speculative(message: verify_pb2.GenerateRequest, request) -> None:
    """The `speculative` object's fields, each where its row in specdec.fields says."""
    if request.speculative is None:
        return
    for field in (*SPECULATIVE, BY_NAME["acceptance"]):
        value = getattr(request.speculative, field.http_name.removeprefix("speculative."))
        if value is not None:
            set_field(message, field, value)


def _apply_logprobs(message: verify_pb2.GenerateRequest, request) -> None:
    if isinstance(request, ChatCompletionRequest):
        message.logprobs = request.logprobs
        message.top_logprobs = request.top_logprobs or 0 if request.logprobs else 0
    elif request.logprobs is not None:
        message.logprobs, message.top_logprobs = True, request.logprobs
