"""Server-sent events for streamed completions: OpenAI chunks, an optional usage chunk, [DONE]."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import anyio
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.choices import Choice, Completion, round_provenance, speculative, sse, usage
from gateway.errors import CLIENT_CLOSED_REQUEST, OpenAIError
from gateway.tool_calls import OutputDelta
from specdec.v1 import verify_pb2

_DONE = object()


async def stream_events(completion: Completion, opened: list, finish: Callable) -> AsyncIterator[str]:
    """Interleave the choices' streams into SSE. `finish(usage, speculative, status)` runs at the
    end whether the stream finished, failed, or the client went away (which cancels the gRPC calls):
    it frees the admission slot and writes the audit line."""
    queue: asyncio.Queue = asyncio.Queue()
    choices = [completion.new_choice(index) for index in range(len(opened))]
    pumps = [asyncio.create_task(_pump(index, first, rest, queue)) for index, (first, rest) in enumerate(opened)]
    status = CLIENT_CLOSED_REQUEST  # unless the stream ends otherwise
    prompt_tokens = opened[0][0].usage.prompt_tokens
    try:
        if completion.chat:
            for choice in choices:
                role = {"index": choice.index, "delta": {"role": "assistant", "content": ""}, "finish_reason": None, "logprobs": None}
                yield sse(_with_usage({**completion.envelope(chunk=True), "choices": [role]}, completion, choices, prompt_tokens))
        async for index, response in _drain(queue, len(pumps)):
            output = choices[index].add(response)
            for chunk in _chunks(completion, choices[index], response, output):
                yield sse(_with_usage(chunk, completion, choices, prompt_tokens))
        yield sse(_closing_chunk(completion, choices))
        status = 200
        yield sse("[DONE]")
    except OpenAIError as error:
        status = error.status
        yield sse(error.body())  # the status line is long gone: the error travels in the stream
        yield sse("[DONE]")
    finally:
        for pump in pumps:
            pump.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.gather(*pumps, return_exceptions=True)
        await finish(usage(choices).model_dump(), speculative(completion.request, choices).model_dump(), status)


async def _pump(index: int, first: verify_pb2.GenerateResponse, rest: AsyncIterator, queue: asyncio.Queue) -> None:
    try:
        await queue.put((index, first))
        async for response in rest:
            await queue.put((index, response))
        await queue.put((index, _DONE))
    except OpenAIError as error:
        await queue.put((index, error))
    finally:
        await rest.aclose()


async def _drain(queue: asyncio.Queue, streams: int) -> AsyncIterator[tuple[int, verify_pb2.GenerateResponse]]:
    remaining = streams
    while remaining:
        index, item = await queue.get()
        if item is _DONE:
            remaining -= 1
        elif isinstance(item, OpenAIError):
            raise item
        else:
            yield index, item


def _chunks(completion: Completion, choice: Choice, response: verify_pb2.GenerateResponse, output: OutputDelta) -> list[dict]:
    """One round's chunks: its content (with logprobs and provenance), then each call it completed as
    OpenAI streams calls (index, id, type and name, then the arguments); the last carries finish_reason."""
    body = {"index": choice.index, "finish_reason": None, "logprobs": completion.logprobs(list(response.logprobs))}
    if completion.chat:
        body["delta"] = {"content": output.content} if output.content or not (response.finish_reason or output.calls) else {}
    else:
        body["text"] = response.text
    if completion.provenance:
        body["provenance"] = round_provenance(response, choice.rounds)
    calls = [
        {"index": choice.index, "finish_reason": None, "logprobs": None, "delta": {"tool_calls": [delta]}}
        for call in output.calls
        for delta in call.stream_deltas()
    ]
    # NOTE: a round whose text is held back (a possible call's start, an unfinished character) says nothing: no empty delta.
    said = not completion.chat or output.content or body["logprobs"] or "provenance" in body
    bodies = [body, *calls] if said or not calls else calls
    if not (said or calls or response.finish_reason):
        return []
    bodies[-1]["finish_reason"] = choice.finish_reason if response.finish_reason else None
    return [{**completion.envelope(chunk=True), "choices": [item]} for item in bodies]


def _with_usage(chunk: dict, completion: Completion, choices: list[Choice], prompt_tokens: int) -> dict:
    """The chunk with usage, the counts so far, when every chunk carries it (continuous_usage_stats, as vLLM's;
    the n choices' tokens count together, so completion_tokens never decreases along the stream)."""
    if not completion.continuous_usage:
        return chunk
    generated = usage(choices).completion_tokens
    return {**chunk, "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": generated, "total_tokens": prompt_tokens + generated}}


def _closing_chunk(completion: Completion, choices: list[Choice]) -> dict:
    """usage (when stream_options.include_usage or continuous_usage_stats) and the speculative stats, with no choices."""
    options = completion.request.stream_options
    chunk = {**completion.envelope(chunk=True), "choices": [], "speculative": speculative(completion.request, choices).model_dump()}
    wanted = options is not None and (options.include_usage or options.continuous_usage_stats)
    chunk["usage"] = usage(choices).model_dump() if wanted else None
    return chunk


class ClosingStreamingResponse(StreamingResponse):
    """A StreamingResponse that closes its event generator however the response ends.

    NOTE: when a client goes away while a write to it is blocked (a slow reader), Starlette stops at
    that write and leaves the generator suspended at its `yield`: its `finally` (which frees the
    admission slot and cancels the gRPC calls) would run only when the garbage collector gets to it,
    minutes later. Closing it here frees them at once; shielded, because the response task is
    usually being cancelled when this runs.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()
