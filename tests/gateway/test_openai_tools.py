"""Tool calling through the real gateway, verify and draft services (tiny pair) with the official
`openai` client: tools reach the prompt, calls and results are carried back, and bad tools are 400s."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
from openai import BadRequestError, OpenAI
from pydantic import BaseModel, ConfigDict
from service_support import assert_openai_error
from tool_support import streamed_choice

from gateway.protocol import ChatCompletionRequest

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False},
    },
}
SHORT_WEATHER = {"type": "function", "function": {"name": "get_weather"}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
ROUND_TRIP = [
    *ASK,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 21, "sky": "clear"}'},
]
GREEDY = {"model": "target", "max_tokens": 12, "temperature": 0}


@pytest.fixture(scope="module")
def client(gateway_url):
    return OpenAI(base_url=f"{gateway_url}/v1", api_key="unused", max_retries=0)


def prompt_tokens(client, **request) -> int:
    return client.chat.completions.create(**{**GREEDY, "max_tokens": 1, **request}).usage.prompt_tokens


def test_tools_are_rendered_into_the_prompt_unless_tool_choice_is_none(client):
    plain = prompt_tokens(client, messages=ASK)
    with_tools = prompt_tokens(client, messages=ASK, tools=[WEATHER])
    assert with_tools > plain + 50  # the generic tools prompt and the function's JSON
    assert prompt_tokens(client, messages=ASK, tools=[WEATHER], tool_choice="none") == plain


def test_a_tool_round_trip_carries_the_call_and_its_result_into_the_prompt(client):
    # (the tiny pair's context is 512 tokens of a small vocabulary: room for one short tool)
    without_result = prompt_tokens(client, messages=ROUND_TRIP[:2])
    with_result = prompt_tokens(client, messages=ROUND_TRIP)
    no_call = ROUND_TRIP[:1] + [{"role": "assistant", "content": ""}]
    assert without_result > prompt_tokens(client, messages=no_call) + 10  # the call is rendered
    assert with_result > without_result + 10  # and so is the result
    reply = client.chat.completions.create(**GREEDY, messages=ROUND_TRIP, tools=[SHORT_WEATHER])
    choice = reply.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    assert choice.message.content or choice.message.tool_calls


def test_auto_streamed_and_whole_outputs_are_the_same(client):
    common = {**GREEDY, "max_tokens": 24, "messages": ASK, "tools": [WEATHER], "tool_choice": "auto"}
    whole = client.chat.completions.create(**common).choices[0]
    chunks = list(client.chat.completions.create(**common, stream=True))
    content = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    streamed_calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
    assert content == (whole.message.content or "")
    whole_names = [call.function.name for call in whole.message.tool_calls or []]
    assert [call.function.name for call in streamed_calls if call.function.name] == whole_names
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason] == [whole.finish_reason]
    assert "<tool_call>" not in content


def test_the_sdks_pydantic_function_tool_is_a_valid_tool():
    class GetWeather(BaseModel):
        city: str
        days: int = 1

    tool = openai.pydantic_function_tool(GetWeather)  # strict, with additionalProperties false
    named = {"type": "function", "function": {"name": "GetWeather"}}
    request = ChatCompletionRequest(model="target", messages=ASK, tools=[tool], tool_choice=named)
    assert request.active_tools[0].function.parameters == tool["function"]["parameters"]


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice"),
        ({"tools": [], "tool_choice": "required"}, "tool_choice"),
        ({"tools": None, "tool_choice": "auto"}, "tool_choice"),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "strin"}}}},
                    }
                ]
            },
            "tools.0.function.parameters",
        ),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]}, "tools.0.function.parameters"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"$schema": ["x"]}}}]}, "tools.0.function.parameters"),
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools.0.function.name"),
        ({"tools": [WEATHER, WEATHER]}, "tools"),
        ({"messages": [*ASK, {"role": "tool", "content": "21C"}]}, "messages.1.tool_call_id"),
        ({"messages": [*ASK, {"role": "tool", "tool_call_id": "call_1", "content": "21C"}]}, "messages.1.tool_call_id"),  # no call made
        ({"messages": [*ROUND_TRIP[:2], {**ROUND_TRIP[2], "tool_call_id": "call_2"}]}, "messages.2.tool_call_id"),  # not the call made
        ({"messages": [ROUND_TRIP[2], *ROUND_TRIP]}, "messages.0.tool_call_id"),  # the call comes after
        ({"messages": [{"role": "user", "content": "hi", "tool_calls": ROUND_TRIP[1]["tool_calls"]}]}, "messages.0.tool_calls"),
    ],
)
def test_bad_tool_requests_are_400s_naming_the_field(gateway_url, change, param):
    body = {**GREEDY, "messages": ASK, "tools": [WEATHER], **change}
    body = {key: value for key, value in body.items() if value is not None}
    response = httpx.post(f"{gateway_url}/v1/chat/completions", json=body, timeout=30)
    assert_openai_error(response, 400, param=param)


def test_the_sdk_sees_an_unknown_function_in_tool_choice_as_a_bad_request(client):
    with pytest.raises(BadRequestError) as raised:
        client.chat.completions.create(
            **GREEDY, messages=ASK, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}
        )
    assert raised.value.body["param"] == "tool_choice" and "nope" in raised.value.body["message"]


# Small enough for the tiny pair's 512-token context with the tools prompt; enums keep a random model's
# arguments short.
DAYS = {
    "type": "function",
    "function": {
        "name": "f",
        "parameters": {"type": "object", "properties": {"d": {"enum": [1, 2]}}, "required": ["d"], "additionalProperties": False},
    },
}
PING = {"type": "function", "function": {"name": "p", "parameters": {"type": "object", "additionalProperties": False}}}
FORCED = {**GREEDY, "max_tokens": 72, "messages": [{"role": "user", "content": "Go"}], "tools": [DAYS, PING], "parallel_tool_calls": False}


def arguments_valid(call, tools) -> bool:
    schema = next(tool["function"]["parameters"] for tool in tools if tool["function"]["name"] == call.function.name)
    return jsonschema.Draft202012Validator(schema).is_valid(json.loads(call.function.arguments))


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "p"}}]
)
def test_a_forced_call_is_one_call_whose_arguments_validate_streamed_or_not(client, tool_choice):
    reply = client.chat.completions.create(**FORCED, tool_choice=tool_choice)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert arguments_valid(call, FORCED["tools"])
    if isinstance(tool_choice, dict):
        assert call.function.name == tool_choice["function"]["name"]
    streamed = streamed_choice(client, **FORCED, tool_choice=tool_choice)
    assert streamed.finish_reason == "tool_calls" and not streamed.message.content
    assert [(c.function.name, c.function.arguments) for c in streamed.message.tool_calls] == [(call.function.name, call.function.arguments)]


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "f"}}])
def test_a_forced_call_cut_short_by_max_tokens_leaves_no_markup_in_content(client, tool_choice):
    # issue 29: with max_tokens 60 a forced call came back finish_reason "length" with the cut call's raw
    # `<tool_call>` markup in `content`, next to the call completed before it. With parallel calls the
    # grammar lets the tiny model call again until max_tokens; greedy, so a shorter max_tokens cuts the
    # same text: cut inside the first call, right after it (a partial opening marker) and in the second.
    forced = {**FORCED, "parallel_tool_calls": True, "tool_choice": tool_choice, "max_tokens": 76}
    full = client.chat.completions.create(**forced, extra_body={"speculative": {"provenance": True}}).choices[0]
    texts = [token["text"] for token in full.model_extra["provenance"]["tokens"]]
    prefixes = ["".join(texts[:size]) for size in range(len(texts) + 1)]
    inside = [size for size, text in enumerate(prefixes) if text.count("<tool_call>") > text.count("</tool_call>")]
    opening = [size for size, text in enumerate(prefixes) if text.count("</tool_call>") == 1 and text.endswith(("\n<", "<tool"))]
    cuts = sorted({inside[0], inside[len(inside) // 3], *opening[:1], inside[-1]})
    assert len(full.message.tool_calls) == 1 and prefixes[inside[-1]].count("</tool_call>") == 1, prefixes[-1]  # a second call, cut
    for size in cuts:
        cut = {**forced, "max_tokens": size}
        complete = prefixes[size].count("</tool_call>")
        for choice in (client.chat.completions.create(**cut).choices[0], streamed_choice(client, **cut)):
            assert choice.finish_reason == "length" and not choice.message.content, (size, prefixes[size], choice)
            assert [(call.function.name, call.function.arguments) for call in choice.message.tool_calls or []] == [
                (call.function.name, call.function.arguments) for call in full.message.tool_calls[:complete]
            ]


def test_forced_calls_with_sampling_all_validate(client):
    for seed in range(4):
        reply = client.chat.completions.create(
            **{**FORCED, "temperature": 1.0, "seed": seed}, tool_choice="required", extra_body={"speculative": {"acceptance": "rejection"}}
        )
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and all(arguments_valid(call, FORCED["tools"]) for call in choice.message.tool_calls)


def test_a_forced_call_cannot_be_combined_with_a_response_format(gateway_url):
    body = {**FORCED, "tool_choice": "required", "response_format": {"type": "json_object"}}
    assert_openai_error(httpx.post(f"{gateway_url}/v1/chat/completions", json=body, timeout=30), 400, param="tool_choice")


# A model with a nested model, as pydantic writes its schema: "#/$defs/Empty" references. Short names,
# no titles and no fields in the nested model: the tools prompt and the call must fit the tiny pair's
# 512-token context, at about a token a character (City inside Trip: tests/gateway/test_tool_constraint.py).
class Empty(BaseModel):
    model_config = ConfigDict(extra="forbid")


class V(BaseModel):
    model_config = ConfigDict(extra="forbid")
    t: Empty


def untitled(schema):
    return {key: untitled(value) for key, value in schema.items() if key != "title"} if isinstance(schema, dict) else schema


NESTED = {"type": "function", "function": {"name": "V", "parameters": untitled(V.model_json_schema())}}


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "V"}}])
def test_a_forced_call_to_a_tool_with_local_references_validates(client, tool_choice):
    assert NESTED["function"]["parameters"]["properties"]["t"] == {"$ref": "#/$defs/Empty"}
    forced = {**FORCED, "tools": [NESTED], "max_tokens": None}  # to the end of the context
    # was a 400: "Pointer '/$defs/Empty' does not exist"
    choice = client.chat.completions.create(**forced, tool_choice=tool_choice).choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.function.name == "V" and arguments_valid(call, forced["tools"]) and json.loads(call.function.arguments) == {"t": {}}
