"""Tool calls in responses and stream chunks, from verify's round messages (no model: the rounds are
given): the SDK's own stream assembler turns the chunks into the message the whole response has."""

from __future__ import annotations

import asyncio
import json

import pytest
from openai.types.chat import ChatCompletion
from tool_support import assembled_choice

from gateway.choices import Completion
from gateway.protocol import ChatCompletionRequest
from gateway.streaming import stream_events
from specdec.v1 import verify_pb2

CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": CITY}}, {"type": "function", "function": {"name": "add"}}]
OUTPUT = (
    'I will check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
)


def rounds(text: str, size: int, finish_reason: str = "stop") -> list[verify_pb2.GenerateResponse]:
    pieces = [text[start : start + size] for start in range(0, len(text), size)]
    messages = [verify_pb2.GenerateResponse(text=piece, token_ids=[1]) for piece in pieces]
    messages[-1].finish_reason = finish_reason
    messages[-1].usage.completion_tokens = len(pieces)
    return messages


def completion(**request) -> Completion:
    body = {"model": "target", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, **request}
    return Completion(ChatCompletionRequest(**body), "target")


def whole_response(shape: Completion, messages) -> dict:
    choice = shape.new_choice(0)
    for message in messages:
        choice.add(message)
    return shape.response([choice])


def streamed_chunks(shape: Completion, messages) -> list[dict]:
    async def rest():
        for message in messages[1:]:
            yield message

    async def finish(usage, stats, status):
        assert status == 200

    async def collect():
        events = [event async for event in stream_events(shape, [(messages[0], rest())], finish)]
        return [json.loads(event.removeprefix("data: ")) for event in events[:-1]]

    return asyncio.run(collect())


@pytest.mark.parametrize("size", [1, 3, 7, 40, 1000])
def test_the_sdks_stream_assembly_gives_the_whole_responses_calls_and_content(size):
    shape = completion()
    whole = ChatCompletion.model_validate(whole_response(shape, rounds(OUTPUT, size))).choices[0]
    streamed = assembled_choice(streamed_chunks(shape, rounds(OUTPUT, size)))
    assert whole.finish_reason == streamed.finish_reason == "tool_calls"
    assert whole.message.content == streamed.message.content == "I will check."
    calls = [(call.function.name, json.loads(call.function.arguments)) for call in whole.message.tool_calls]
    assert calls == [("get_weather", {"city": "Paris"}), ("add", {"a": 1, "b": 2})]
    assert [(call.function.name, call.function.arguments) for call in streamed.message.tool_calls] == [
        (call.function.name, call.function.arguments) for call in whole.message.tool_calls
    ]
    assert all(call.id.startswith("call_") and call.type == "function" for call in streamed.message.tool_calls)


def test_a_streamed_call_is_named_first_then_given_its_arguments():
    chunks = streamed_chunks(completion(), rounds(OUTPUT, 5))
    bodies = [chunk["choices"][0] for chunk in chunks if chunk["choices"]]
    deltas = [body["delta"]["tool_calls"][0] for body in bodies if "tool_calls" in body["delta"]]
    assert [set(delta) for delta in deltas] == [{"index", "id", "type", "function"}, {"index", "function"}] * 2
    assert [delta["index"] for delta in deltas] == [0, 0, 1, 1] and deltas[0]["function"] == {"name": "get_weather", "arguments": ""}
    contents = [chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks if chunk["choices"]]
    assert not any("<" in content or "{" in content for content in contents)


def test_calls_only_give_null_content_and_a_cut_output_keeps_finish_reason_length():
    only_calls = whole_response(completion(), rounds(OUTPUT.split("\n", 1)[1], 9))["choices"][0]
    assert only_calls["message"]["content"] is None and len(only_calls["message"]["tool_calls"]) == 2
    cut = whole_response(completion(), rounds(OUTPUT, 9, finish_reason="length"))["choices"][0]
    assert cut["finish_reason"] == "length" and len(cut["message"]["tool_calls"]) == 2


def test_without_tools_or_with_tool_choice_none_markers_are_plain_content():
    for shape in (completion(tools=None), completion(tool_choice="none")):
        choice = whole_response(shape, rounds(OUTPUT, 9))["choices"][0]
        assert choice["message"] == {"role": "assistant", "content": OUTPUT} and choice["finish_reason"] == "stop"


def test_parallel_tool_calls_false_keeps_one_call():
    choice = whole_response(completion(parallel_tool_calls=False), rounds(OUTPUT, 9))["choices"][0]
    assert [call["function"]["name"] for call in choice["message"]["tool_calls"]] == ["get_weather"]


def test_rounds_whose_text_is_held_back_send_no_empty_deltas():
    # The parser holds back a possible call's text until it knows: those rounds used to stream
    # `"content": ""` deltas (about 30 before a call).
    chunks = streamed_chunks(completion(), rounds(OUTPUT, 2))
    bodies = [chunk["choices"][0] for chunk in chunks if chunk["choices"]][1:]  # after the role chunk
    assert bodies and all(body["delta"] and body["delta"] != {"content": ""} for body in bodies if not body["finish_reason"]), bodies
    assert assembled_choice(chunks).message.content == "I will check."


@pytest.mark.parametrize("size", [1, 4, 1000])
@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_a_call_cut_short_leaves_no_markup_in_content_whole_or_streamed(size, tool_choice):
    # issue 29: a forced call cut short by max_tokens came back with finish_reason "length" and its raw
    # `<tool_call>` markup in `content`, next to the call completed before it.
    inside_second_call = OUTPUT[: OUTPUT.rindex('"a": 1')]
    for text, content, calls in (
        (inside_second_call, "I will check.", ["get_weather"]),
        ("I will check.\n<tool_c", "I will check.", []),  # an opening marker, cut
        (OUTPUT.split("\n", 1)[1][:30], None, []),
    ):  # a forced call's first, cut
        shape = completion(tool_choice=tool_choice)
        whole = ChatCompletion.model_validate(whole_response(shape, rounds(text, size, finish_reason="length"))).choices[0]
        chunks = streamed_chunks(shape, rounds(text, size, finish_reason="length"))
        streamed = assembled_choice(chunks)
        assert whole.finish_reason == streamed.finish_reason == "length"
        assert (whole.message.content or None) == (streamed.message.content or None) == (content or None)
        assert [call.function.name for call in whole.message.tool_calls or []] == calls
        assert [call.function.name for call in streamed.message.tool_calls or []] == calls
        deltas = [chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks if chunk["choices"]]
        assert not any("<" in delta or "{" in delta for delta in deltas), deltas
