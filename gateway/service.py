"""The gateway's state and request handling, between the thin routes and the verify service."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from gateway.admission import Admission, RateLimiter
from gateway.auth import ApiKeys, ClientAllowList
from gateway.choices import Completion, open_streams, run_all
from gateway.errors import OpenAIError, bad_request
from gateway.metrics import GatewayMetrics
from gateway.protocol import ChatCompletionRequest, CompletionRequest, ModelCard, ModelList
from gateway.streaming import stream_events
from gateway.upstream import Upstream
from specdec.config import SpecdecConfig

log = logging.getLogger(__name__)


class Gateway:
    def __init__(self, config: SpecdecConfig) -> None:
        settings = config.serving
        self.settings = settings
        self.tls = config.tls
        self.upstream: Upstream | None = None  # created by start(), on the serving event loop
        self.admission = Admission(settings.max_concurrent_requests, settings.max_queue, settings.queue_timeout_s)
        self.rates = RateLimiter(settings.rate_limit_rpm, settings.rate_limit_tpm)
        self.keys = ApiKeys.from_environment(settings.api_keys_file)
        self.allow_list = ClientAllowList(settings.allowed_cidrs)
        self.metrics = GatewayMetrics()
        self._model_names: tuple[str, ...] | None = None

    async def start(self) -> None:
        # grpc.aio channels belong to the loop that creates them: this must run on uvicorn's.
        self.upstream = Upstream(self.settings, self.tls)

    async def close(self) -> None:
        if self.upstream is not None:
            await self.upstream.close()

    def guard(self, request: Request) -> str:
        """Allow-list, then API key; returns the identity rate limits are counted against."""
        self.allow_list.check(request)
        if self.keys.enabled:
            return self.keys.authenticate(request.headers.get("authorization"))
        return request.client.host if request.client else "anonymous"

    async def model_names(self) -> tuple[str, ...]:
        """The id clients use (served_model_name, or the target's name), then aliases."""
        if self._model_names is None:
            status = await self.upstream.status()
            source = status.model.rstrip("/")
            names = [self.settings.served_model_name or Path(source).name or source, source]
            self._model_names = tuple(dict.fromkeys(name for name in names if name))
        return self._model_names

    async def models(self) -> ModelList:
        return ModelList(data=[ModelCard(id=(await self.model_names())[0])])

    async def _check_request(self, request: ChatCompletionRequest | CompletionRequest) -> str:
        names = await self.model_names()
        if request.model not in names:
            raise OpenAIError(404, f"model {request.model!r} does not exist; this server serves {names[0]!r}",
                              "not_found_error", param="model", code="model_not_found")
        if request.n > self.settings.max_n:
            raise bad_request(f"n is {request.n} but at most {self.settings.max_n} choices are allowed", "n")
        limit, asked = self.settings.max_tokens_limit, request.requested_max_tokens
        if asked is not None and asked > limit:
            raise bad_request(f"max_tokens is {asked} but at most {limit} is allowed", "max_tokens")
        return names[0]

    async def complete(self, request: ChatCompletionRequest | CompletionRequest, identity: str, route: str):
        model = await self._check_request(request)
        self.rates.check(identity)
        stack = contextlib.AsyncExitStack()
        queued_s = await stack.enter_async_context(self.admission.slot())
        self.metrics.queue_seconds.observe(queued_s)
        completion = Completion(request, model)
        try:
            if not request.stream:
                choices = await run_all(self.upstream, request)
                body = completion.response(choices)
                self.rates.record_tokens(identity, body["usage"]["completion_tokens"])
                self.metrics.record_completion(route, body)
                return JSONResponse(body)
            opened = await open_streams(self.upstream, request)
        except BaseException:
            await stack.aclose()
            raise
        events = stream_events(completion, opened, release=stack.aclose,
                               on_usage=lambda tokens: self.rates.record_tokens(identity, tokens))
        return StreamingResponse(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
