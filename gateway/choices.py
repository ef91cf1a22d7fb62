"""Run the n choices of a request against verify and shape them as OpenAI objects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from gateway.protocol import ChatCompletionRequest, CompletionRequest, new_id, now
from gateway.response_stats import CompletionTokensDetails, DrafterStats, SpeculativeStats, Usage
from gateway.tool_calls import OutputDelta, ParsedCall, ToolCallParser
from gateway.tool_constraint import forces_call
from gateway.upstream import Upstream, generate_request
from specdec.v1 import common_pb2, verify_pb2

OpenAIRequest = ChatCompletionRequest | CompletionRequest
# TOKEN_SOURCE_LOOKUP -> "lookup"
_SOURCE_NAMES = {value: name.removeprefix("TOKEN_SOURCE_").lower() for name, value in common_pb2.TokenSource.items()}


@dataclass
class Choice:
    """One choice accumulated from a Generate stream."""

    index: int
    parser: ToolCallParser | None = None  # the request has tools: calls are parsed out of the text
    text: str = ""  # as generated
    content: str = ""  # the text less its tool calls
    tool_calls: list[ParsedCall] = field(default_factory=list)
    finish_reason: str | None = None
    logprobs: list[verify_pb2.TokenLogprob] = field(default_factory=list)
    usage: verify_pb2.Usage | None = None  # the counts so far (verify sends them with every message)
    summary: verify_pb2.SpeculativeSummary | None = None
    rounds: int = 0  # Generate sends one message per round
    provenance: dict = field(default_factory=lambda: {"tokens": [], "rounds": []})

    def add(self, response: verify_pb2.GenerateResponse) -> OutputDelta:
        """Take one round's message; returns the content and calls it releases."""
        self.text += response.text
        delta = _output_delta(self.parser, response)
        self.content += delta.content
        self.tool_calls.extend(delta.calls)
        self.logprobs.extend(response.logprobs)
        self.rounds += 1
        # tokens: provenance was asked for; no token_ids: a round that emitted nothing (kept so the
        # rounds add up; at most the last one, so requests without provenance store next to nothing)
        if response.tokens or not response.token_ids:
            for key, items in round_provenance(response, self.rounds).items():
                self.provenance[key].extend(items)
        if response.HasField("usage"):
            self.usage = response.usage
        if response.finish_reason:
            # as OpenAI: a choice that stopped after calling tools finished for "tool_calls"
            self.finish_reason = "tool_calls" if self.tool_calls and response.finish_reason == "stop" else response.finish_reason
            self.summary = response.summary
        return delta


def _output_delta(parser: ToolCallParser | None, response: verify_pb2.GenerateResponse) -> OutputDelta:
    if parser is None:
        return OutputDelta(response.text)
    delta = parser.feed(response.text)
    return delta.extend(parser.finish(response.finish_reason)) if response.finish_reason else delta


class Completion:
    """The shared shape of chat.completion and text_completion objects and their chunks."""

    def __init__(self, request: OpenAIRequest, model: str) -> None:
        self.request = request
        self.chat = isinstance(request, ChatCompletionRequest)
        self.id = new_id("chatcmpl" if self.chat else "cmpl")
        self.created = now()
        self.model = model

    def envelope(self, chunk: bool) -> dict:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def new_choice(self, index: int) -> Choice:
        tools = self.request.active_tools if self.chat else []
        if not tools:
            return Choice(index)
        return Choice(index, ToolCallParser({tool.function.name for tool in tools}, self.request.parallel_tool_calls))

    @property
    def provenance(self) -> bool:
        return self.request.speculative is not None and self.request.speculative.provenance

    @property
    def continuous_usage(self) -> bool:
        """Every chunk carries usage (vLLM's stream_options.continuous_usage_stats)."""
        options = self.request.stream_options
        return options is not None and options.continuous_usage_stats

    def choice_body(self, choice: Choice) -> dict:
        body = {"index": choice.index, "finish_reason": choice.finish_reason, "logprobs": self.logprobs(choice.logprobs)}
        if self.chat and choice.tool_calls:
            body["message"] = {
                "role": "assistant",
                "content": choice.content or None,
                "tool_calls": [call.message_entry() for call in choice.tool_calls],
            }
        elif self.chat:
            body["message"] = {"role": "assistant", "content": choice.content}
        else:
            body["text"] = choice.text
        if self.provenance:
            body["provenance"] = choice.provenance
        return body

    def logprobs(self, entries: list[verify_pb2.TokenLogprob]) -> dict | None:
        wanted = self.request.logprobs if self.chat else self.request.logprobs is not None
        if not wanted:
            return None
        if self.chat:
            return {"content": [_chat_logprob(entry) for entry in entries]}
        return {
            "tokens": [entry.token for entry in entries],
            "token_logprobs": [entry.logprob for entry in entries],
            "top_logprobs": [{top.token: top.logprob for top in entry.top} for entry in entries],
            "text_offset": _offsets(entries),
        }

    def response(self, choices: list[Choice]) -> dict:
        return {
            **self.envelope(chunk=False),
            "choices": [self.choice_body(c) for c in choices],
            "usage": usage(choices).model_dump(),
            "speculative": speculative(self.request, choices).model_dump(),
        }


def round_provenance(response: verify_pb2.GenerateResponse, round_number: int) -> dict:
    """The provenance extension for one round's message: its tokens' sources and what the round verified."""
    return {
        "tokens": [{"text": token.text, "source": _SOURCE_NAMES[token.source], "round": round_number} for token in response.tokens],
        "rounds": [{"round": round_number, "drafted": response.round.num_candidates, "accepted": response.round.num_accepted}],
    }


def _chat_logprob(entry: verify_pb2.TokenLogprob) -> dict:
    def item(token: str, logprob: float) -> dict:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}

    return {**item(entry.token, entry.logprob), "top_logprobs": [item(top.token, top.logprob) for top in entry.top]}


def _offsets(entries: list[verify_pb2.TokenLogprob]) -> list[int]:
    offsets, position = [], 0
    for entry in entries:
        offsets.append(position)
        position += len(entry.token)
    return offsets


def usage(choices: list[Choice]) -> Usage:
    prompt = next((c.usage.prompt_tokens for c in choices if c.usage), 0)
    completion = sum(c.usage.completion_tokens for c in choices if c.usage)
    details = CompletionTokensDetails(
        accepted_prediction_tokens=sum(c.usage.accepted_prediction_tokens for c in choices if c.usage),
        rejected_prediction_tokens=sum(c.usage.rejected_prediction_tokens for c in choices if c.usage),
    )
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion, completion_tokens_details=details)


def speculative(request: OpenAIRequest, choices: list[Choice]) -> SpeculativeStats:
    summaries = [c.summary for c in choices if c.summary is not None]
    draft = sum(s.draft_tokens for s in summaries)
    accepted = sum(s.accepted_tokens for s in summaries)
    return SpeculativeStats(
        enabled=any(s.enabled for s in summaries),
        rounds=sum(s.rounds for s in summaries),
        draft_tokens=draft,
        accepted_tokens=accepted,
        acceptance_rate=round(accepted / draft, 6) if draft else 0.0,
        fallback=any(s.fallback for s in summaries),
        drafters=_drafters(summaries),
    )


def _drafters(summaries: list[verify_pb2.SpeculativeSummary]) -> dict[str, DrafterStats]:
    """Each drafter's blocks and tokens, summed over the choices."""
    drafters: dict[str, DrafterStats] = {}
    for summary in summaries:
        for entry in summary.drafters:
            stats = drafters.setdefault(_SOURCE_NAMES[entry.drafter], DrafterStats())
            stats.blocks += entry.blocks
            stats.draft_tokens += entry.draft_tokens
            stats.accepted_tokens += entry.accepted_tokens
    return drafters


def grammar_param(request: OpenAIRequest) -> str:
    """The field a grammar verify refuses came from: the forced tool call's, or response_format's."""
    return "tool_choice" if forces_call(request) else "response_format"


async def run_all(upstream: Upstream, completion: Completion) -> list[Choice]:
    """All n choices, concurrently; any error cancels the others and propagates."""
    request = completion.request

    async def one(index: int) -> Choice:
        choice = completion.new_choice(index)
        async for response in upstream.generate(generate_request(request, index), grammar_param(request)):
            choice.add(response)
        return choice

    return list(await asyncio.gather(*(one(index) for index in range(request.n))))


async def open_streams(upstream: Upstream, request: OpenAIRequest) -> list[tuple[verify_pb2.GenerateResponse, AsyncIterator]]:
    """Start every choice's stream and wait for its first message, so errors still get an HTTP status."""

    async def first(index: int):
        stream = upstream.generate(generate_request(request, index), grammar_param(request))
        try:
            return await anext(stream), stream
        except BaseException:
            await stream.aclose()
            raise

    opened = await asyncio.gather(*(first(index) for index in range(request.n)), return_exceptions=True)
    failures = [item for item in opened if isinstance(item, BaseException)]
    if failures:
        for item in opened:
            if not isinstance(item, BaseException):
                await item[1].aclose()
        raise failures[0]
    return opened


def sse(payload: dict | str) -> str:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload, separators=(',', ':'))}\n\n"
