"""A Python client for the verify service: Generate (text in, token stream out) and Verify
(bring your own drafter). Synchronous, for scripts and tests; the gateway uses the async stubs.

    with VerifyClient("localhost:50052") as client:
        print(client.generate("Hello!", max_tokens=32, temperature=0.7, seed=1).text)
"""

from __future__ import annotations

import queue
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from specdec.fields import LOGIT_BIAS, OPTIONS, PENALTIES, RESPONSE, SAMPLING, SPECULATIVE
from specdec.serving.config import TlsSection
from specdec.serving.rpc.convert import set_field
from specdec.serving.rpc.server import CHANNEL_OPTIONS, channel_credentials
from specdec.v1 import common_pb2, verify_pb2, verify_pb2_grpc

# The keyword settings: the fields' core names (specdec.fields), each put where its row says.
_OPTION_FIELDS = {field.name: field for field in (*SAMPLING, *PENALTIES, LOGIT_BIAS, *OPTIONS)}
_REQUEST_FIELDS = {field.name: field for field in (*SPECULATIVE, *RESPONSE)}

Prompt = str | Sequence[dict] | Sequence[int]  # text, chat messages, or token ids


@dataclass
class Completion:
    text: str
    token_ids: list[int]
    finish_reason: str
    seed: int
    usage: verify_pb2.Usage
    summary: verify_pb2.SpeculativeSummary
    rounds: list[verify_pb2.RoundStats] = field(default_factory=list)
    logprobs: list[verify_pb2.TokenLogprob] = field(default_factory=list)


def generation_options(prompt: Prompt, **settings) -> verify_pb2.GenerationOptions:
    """GenerationOptions from a prompt and keyword settings (sampling fields, seed, stop, ...)."""
    options = verify_pb2.GenerationOptions()
    if isinstance(prompt, str):
        options.text = prompt
    elif prompt and isinstance(prompt[0], dict):
        options.chat.messages.extend(verify_pb2.ChatMessage(role=m["role"], content=m["content"]) for m in prompt)
    else:
        options.token_ids.ids.extend(prompt)
    for name, value in settings.items():
        if value is None:
            continue
        if name not in _OPTION_FIELDS:
            raise TypeError(f"unknown generation setting {name!r}")
        set_field(options, _OPTION_FIELDS[name], value, root="options")
    return options


class VerifyClient:
    def __init__(self, endpoint: str = "localhost:50052", tls: TlsSection | None = None) -> None:
        if tls is not None and tls.client_enabled:
            self.channel = grpc.secure_channel(endpoint, channel_credentials(tls), options=CHANNEL_OPTIONS)
        else:
            self.channel = grpc.insecure_channel(endpoint, options=CHANNEL_OPTIONS)
        self.stub = verify_pb2_grpc.VerifyServiceStub(self.channel)

    def __enter__(self) -> VerifyClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def generate_stream(self, prompt: Prompt, timeout: float | None = None, **settings) -> Iterator[verify_pb2.GenerateResponse]:
        """One GenerateResponse per round; cancelling the iterator (`.cancel()`) cancels the call."""
        request_settings = {name: settings.pop(name) for name in list(settings) if name in _REQUEST_FIELDS}
        request = verify_pb2.GenerateRequest(options=generation_options(prompt, **settings))
        for name, value in request_settings.items():
            if value is not None:
                set_field(request, _REQUEST_FIELDS[name], value)
        return self.stub.Generate(request, timeout=timeout)

    def generate(self, prompt: Prompt, timeout: float | None = None, **settings) -> Completion:
        completion = Completion("", [], "", 0, verify_pb2.Usage(), verify_pb2.SpeculativeSummary())
        for response in self.generate_stream(prompt, timeout=timeout, **settings):
            completion.text += response.text
            completion.token_ids.extend(response.token_ids)
            completion.logprobs.extend(response.logprobs)
            completion.seed = response.seed
            if response.HasField("round"):
                completion.rounds.append(response.round)
            if response.finish_reason:
                completion.finish_reason = response.finish_reason
                completion.usage, completion.summary = response.usage, response.summary
        return completion

    def verify_session(self, prompt: Prompt, timeout: float | None = None, **settings) -> VerifySession:
        return VerifySession(self.stub, generation_options(prompt, **settings), timeout)

    def status(self, timeout: float = 5.0) -> common_pb2.ServerStatus:
        return self.stub.Status(common_pb2.ServerStatusRequest(), timeout=timeout)

    def is_serving(self, timeout: float = 2.0) -> bool:
        try:
            reply = health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.RpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING


class VerifySession:
    """A Verify stream: `opened` has the prompt ids, seed and first budget; `verify()` one block."""

    def __init__(self, stub: verify_pb2_grpc.VerifyServiceStub, options: verify_pb2.GenerationOptions, timeout: float | None) -> None:
        self._requests: queue.Queue = queue.Queue()
        self._requests.put(verify_pb2.VerifyRequest(open=verify_pb2.VerifyOpen(options=options)))
        self._responses = stub.Verify(iter(self._requests.get, None), timeout=timeout)
        self.opened: verify_pb2.VerifyResponse = next(self._responses)

    def verify(
        self, token_ids: Sequence[int], draft_probs: Sequence[tuple[Sequence[int], Sequence[float]]] | None = None
    ) -> verify_pb2.VerifyResponse:
        """Send candidates (with their q as (ids, probs) per candidate, for rejection mode)."""
        block = common_pb2.CandidateBlock(token_ids=list(token_ids))
        for ids, probs in draft_probs or []:
            block.draft_probs.add(token_ids=list(ids), probs=list(probs))
        self._requests.put(verify_pb2.VerifyRequest(block=block))
        return next(self._responses)

    def close(self) -> None:
        self._requests.put(None)
        self._responses.cancel()

    def __enter__(self) -> VerifySession:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
