"""The gateway's state and request handling, between the thin routes and the verify service."""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

from fastapi import Request
from fastapi.responses import JSONResponse

from gateway.admission import Admission, RateLimiter
from gateway.auth import ApiKeys, AuditKeyIds, ClientAllowList
from gateway.body_limit import largest_useful_body
from gateway.choices import Completion, open_streams, run_all
from gateway.disconnect import unless_client_leaves
from gateway.errors import OpenAIError, bad_request
from gateway.offload import CheckWorkers
from gateway.protocol import ChatCompletionRequest, CompletionRequest, ModelCard, ModelList
from gateway.streaming import ClosingStreamingResponse, stream_events
from gateway.tool_constraint import needs_checked_grammar, request_grammar
from gateway.upstream import Upstream, tools_json
from specdec.serving.config import SpecdecConfig
from specdec.serving.metrics import GatewayMetrics
from specdec.v1 import common_pb2

log = logging.getLogger(__name__)
audit_log = logging.getLogger("specdec.audit")


class Gateway:
    def __init__(self, config: SpecdecConfig) -> None:
        settings = config.serving
        self.settings = settings
        self.tls = config.tls
        self.upstream: Upstream | None = None  # created by start(), on the serving event loop
        self.admission = Admission(settings.max_concurrent_requests, settings.max_queue, settings.queue_timeout_s)
        self.rates = RateLimiter(settings.rate_limit_rpm, settings.rate_limit_tpm)
        self.keys = ApiKeys.from_environment(settings.api_keys_file)
        self.key_ids = AuditKeyIds.from_environment(settings.audit_secret_file)
        self.allow_list = ClientAllowList(settings.allowed_cidrs)
        self.metrics = GatewayMetrics()
        self.metrics.running.set_function(lambda: self.admission.running)
        self.metrics.waiting.set_function(lambda: self.admission.waiting)
        self.checks = CheckWorkers()  # schema checks and grammar compiles, off the event loop
        self.log_content = config.observability.log_content
        self._model_names: tuple[str, ...] | None = None
        self._status: common_pb2.ServerStatus | None = None  # verify's, read once

    async def start(self) -> None:
        # grpc.aio channels belong to the loop that creates them: this must run on uvicorn's.
        self.upstream = Upstream(self.settings, self.tls)

    async def close(self) -> None:
        if self.upstream is not None:
            await self.upstream.close()
        self.checks.close()

    def guard(self, request: Request) -> str:
        """Allow-list, then API key; returns the identity rate limits are counted against."""
        self.allow_list.check(request)
        if self.keys.enabled:
            key = self.keys.authenticate(request.headers.get("authorization"))
            request.state.key_id = self.key_ids.of(key)  # never the key itself
            return key
        return request.client.host if request.client else "anonymous"

    def useful_body_bytes(self) -> int | None:
        """The largest body worth reading (gateway/body_limit.py); None before verify's status is known."""
        if self._status is None or not self._status.max_prompt_chars:
            return None
        return largest_useful_body(self._status.max_prompt_chars)

    async def _served(self) -> common_pb2.ServerStatus:
        if self._status is None:
            self._status = await self.upstream.status()
        return self._status

    async def model_names(self) -> tuple[str, ...]:
        """The id clients use (served_model_name, or the target's name), then aliases."""
        if self._model_names is None:
            source = (await self._served()).model.rstrip("/")
            names = [self.settings.served_model_name or Path(source).name or source, source]
            self._model_names = tuple(dict.fromkeys(name for name in names if name))
        return self._model_names

    async def models(self) -> ModelList:
        return ModelList(data=[ModelCard(id=(await self.model_names())[0], max_model_len=(await self._served()).max_context or None)])

    async def _check_request(self, request: ChatCompletionRequest | CompletionRequest) -> str:
        names = await self.model_names()
        if request.model not in names:
            raise OpenAIError(
                404,
                f"model {request.model!r} does not exist; this server serves {names[0]!r}",
                "not_found_error",
                param="model",
                code="model_not_found",
            )
        if request.n > self.settings.max_n:
            raise bad_request(f"n is {request.n} but at most {self.settings.max_n} choices are allowed", "n")
        limit, asked = self.settings.max_tokens_limit, request.requested_max_tokens
        if asked is not None and asked > limit:
            raise bad_request(f"max_tokens is {asked} but at most {limit} is allowed", "max_tokens")
        _check_prompt_length(request, await self._served())
        if needs_checked_grammar(request):  # checked and compiled off the loop; refused: 400 naming the field
            request._grammar = await self.checks.run(request_grammar, _without_prompt(request))
        return names[0]

    async def complete(self, request: ChatCompletionRequest | CompletionRequest, identity: str, http: Request):
        model = await self._check_request(request)
        self.rates.check(identity)
        http.state.audit = {"model": model, "n": request.n, "stream": request.stream}
        if self.log_content:  # off by default: prompts and outputs stay out of logs
            http.state.audit["prompt"] = request.model_dump(include={"messages", "prompt"})
        completion = Completion(request, model)
        request._draft_scope = getattr(http.state, "key_id", "")  # set where API keys are on; never the key itself
        if not request.stream:
            body, choices = await unless_client_leaves(http, self._answer(completion))
            self._account(identity, body["usage"], http)
            if self.log_content:
                http.state.audit["output"] = [choice.text for choice in choices]
            self.metrics.time_to_first_token.observe(time.perf_counter() - http.state.started)
            return JSONResponse(body)
        # A stream holds its slot until the last event (or the client's disconnect): see finish().
        stack = contextlib.AsyncExitStack()
        try:
            opened = await unless_client_leaves(http, self._open(stack, request))
        except BaseException:
            await stack.aclose()
            raise
        self.metrics.time_to_first_token.observe(time.perf_counter() - http.state.started)
        http.state.streaming = True

        async def finish(usage: dict, stats: dict, status: int) -> None:
            self._account(identity, usage, http)
            await stack.aclose()
            self.audit(http, status)

        events = stream_events(completion, opened, finish)
        return ClosingStreamingResponse(
            events, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    async def _answer(self, completion: Completion) -> tuple[dict, list]:
        """A whole answer, generated in a slot: the response body and its choices."""
        async with self.admission.slot(completion.request.n) as queued_s:
            self.metrics.queue_time.observe(queued_s)
            choices = await run_all(self.upstream, completion)
            return completion.response(choices), choices

    async def _open(self, stack: contextlib.AsyncExitStack, request: ChatCompletionRequest | CompletionRequest) -> list:
        """A slot, held by `stack` until the stream ends, and the opened gRPC streams."""
        self.metrics.queue_time.observe(await stack.enter_async_context(self.admission.slot(request.n)))
        return await open_streams(self.upstream, request)

    def _account(self, identity: str, usage: dict, http: Request) -> None:
        self.rates.record_tokens(identity, usage["completion_tokens"])
        # Tokens, rounds and fallbacks: verify's metrics count them (their one source), not the gateway's.
        http.state.audit.update(prompt_tokens=usage["prompt_tokens"], completion_tokens=usage["completion_tokens"])

    def audit(self, http: Request, status: int) -> None:
        """One line per request: who (key id, never the key), from where, what, how much, outcome."""
        fields = {
            "audit": True,
            "request_id": getattr(http.state, "request_id", None),
            "key_id": getattr(http.state, "key_id", "anonymous"),
            "client": http.client.host if http.client else None,
            "route": http.url.path,
            "status": status,
            "duration_ms": round((time.perf_counter() - http.state.started) * 1000, 2),
            **getattr(http.state, "audit", {}),
        }
        self.metrics.requests.labels(str(status)).inc()
        self.metrics.e2e_latency.observe(time.perf_counter() - http.state.started)
        audit_log.info("request", extra={"fields": fields})


def _without_prompt(request: ChatCompletionRequest | CompletionRequest) -> ChatCompletionRequest | CompletionRequest:
    """The request as its grammar check needs it: without the prompt and prediction (megabytes, pickled to the worker)."""
    if isinstance(request, ChatCompletionRequest):
        return request.model_copy(update={"messages": [], "prediction": None})
    return request.model_copy(update={"prompt": ""})


def _check_prompt_length(request: ChatCompletionRequest | CompletionRequest, status: common_pb2.ServerStatus) -> None:
    """Verify's refusal of a prompt that cannot fit (verify_service/requests.py), made before the gRPC
    request is built: a prompt of megabytes then costs its parsing here and nothing more."""
    if not status.max_prompt_chars:  # a verify service that does not report its bound
        return
    chat = isinstance(request, ChatCompletionRequest)
    param = "messages" if chat else "prompt"
    if chat or isinstance(request.prompt, str):
        parts = [message.text() for message in request.messages] if chat else [request.prompt]
        count, size = (len(parts) if chat else 0), sum(map(len, parts))
    else:
        count, size = len(request.prompt), 0
    tools = len(tools_json(request)) if chat else 0  # rendered into the prompt: verify counts them in the same bound
    prediction = len(request.prediction.text()) if chat and request.prediction is not None else 0
    if prediction > status.max_prompt_chars:
        raise bad_request(
            f"prediction: {prediction} characters cannot fit in the model's context of {status.max_context} tokens "
            f"(at most {status.max_prompt_chars})",
            "prediction",
        )
    if count > status.max_context:
        what = f"{count} {'messages' if chat else 'tokens'}"
    elif size > status.max_prompt_chars:
        what = f"{size} characters (at most {status.max_prompt_chars})"
    elif size + tools > status.max_prompt_chars:
        raise bad_request(
            f"tools: {tools} characters of tool definitions and {size} of messages cannot fit in the model's context of "
            f"{status.max_context} tokens (at most {status.max_prompt_chars} characters in all)",
            "tools",
        )
    else:
        return
    raise bad_request(f"{param}: {what} cannot fit in the model's context of {status.max_context} tokens; shorten the prompt", param)
