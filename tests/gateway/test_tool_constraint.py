"""The constraint for tool_choice "required" / a named function (pure): its JSON schema accepts the
calls the parser takes and only those, and its grammar compiles in llguidance."""

from __future__ import annotations

import functools
import json
from typing import Literal

import jsonschema
import llguidance
import llguidance.hf
import openai
import pytest
from pydantic import BaseModel
from transformers import AutoTokenizer

from gateway.protocol import ChatCompletionRequest
from gateway.tool_calls import parse_output
from gateway.tool_constraint import call_grammar, call_schema, rebased, request_grammar
from specdec.errors import InvalidRequestError

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "ping"}},
]


def request(tool_choice) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS, tool_choice=tool_choice)


def valid(schema: dict, call: dict) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(call)


def test_a_named_function_allows_only_that_function_with_valid_arguments():
    named = request({"type": "function", "function": {"name": "get_weather"}})
    schema = call_schema(named.tools, named.tool_choice)
    assert valid(schema, {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}})
    assert not valid(schema, {"name": "get_weather", "arguments": {"days": 2}})  # city is required
    assert not valid(schema, {"name": "get_weather", "arguments": {"city": "Paris", "days": 0}})
    assert not valid(schema, {"name": "ping", "arguments": {}})
    assert not valid(schema, {"name": "get_weather", "arguments": {"city": "Paris"}, "extra": 1})


def test_required_allows_any_tool_and_none_or_auto_constrain_nothing():
    forced = request("required")
    schema = call_schema(forced.tools, forced.tool_choice)
    assert valid(schema, {"name": "ping", "arguments": {}}) and valid(schema, {"name": "get_weather", "arguments": {"city": "Oslo"}})
    assert not valid(schema, {"name": "get_weather", "arguments": {}}) and not valid(schema, {"name": "other", "arguments": {}})
    for choice in ("auto", "none"):
        free = request(choice)
        assert call_schema(free.tools, free.tool_choice) is None and call_grammar(free.tools, free.tool_choice, True) is None


@pytest.mark.parametrize("parallel", [True, False])
def test_the_grammar_compiles_and_frames_calls_the_parser_reads(parallel):
    forced = request("required")
    grammar = call_grammar(forced.tools, forced.tool_choice, parallel)
    assert llguidance.LLMatcher.validate_grammar(llguidance.grammar_from("lark", grammar)) == ""
    assert grammar.startswith("start: call" + (' ("\\n" call)*' if parallel else "\n"))
    # the framing the grammar writes around each call is what the parser takes
    framed = "\n".join(
        "<tool_call>\n" + json.dumps(call) + "\n</tool_call>"
        for call in ({"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "ping", "arguments": {}})
    )
    parsed = parse_output(framed, {"get_weather", "ping"})
    assert parsed.content == "" and [call.name for call in parsed.calls] == ["get_weather", "ping"]


@functools.cache
def smollm2_tokenizers():
    tokenizer = AutoTokenizer.from_pretrained("specdec/assets/smollm2-135m-instruct-draft")
    return tokenizer, llguidance.hf.from_tokenizer(tokenizer)


def matches(grammar: str, text: str) -> bool:
    """Whether SmolLM2's tokens of `text` are a complete output under `grammar`."""
    tokenizer, grammar_tokenizer = smollm2_tokenizers()
    matcher = llguidance.LLMatcher(grammar_tokenizer, grammar, log_level=0)
    return matcher.consume_tokens(tokenizer(text, add_special_tokens=False)["input_ids"]) and matcher.is_accepting()


def framed(*calls: dict) -> str:
    return "\n".join(f"<tool_call>\n{json.dumps(call)}\n</tool_call>" for call in calls)


def test_the_grammar_accepts_valid_calls_in_the_prompts_layout_and_nothing_else():
    named = request({"type": "function", "function": {"name": "get_weather"}})
    grammar = call_grammar(named.tools, named.tool_choice, parallel=False)
    paris = {"name": "get_weather", "arguments": {"city": "Paris"}}
    assert matches(grammar, framed(paris)) and matches(grammar, framed({"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}))
    assert not matches(grammar, framed({"name": "get_weather", "arguments": {"days": 3}}))  # city is required
    assert not matches(grammar, framed({"name": "ping", "arguments": {}}))
    assert not matches(grammar, framed(paris, paris))  # one call without parallel_tool_calls
    assert not matches(grammar, "Sure! " + framed(paris)) and not matches(grammar, framed(paris).replace(", ", ","))
    forced = request("required")
    parallel = call_grammar(forced.tools, forced.tool_choice, parallel=True)
    assert matches(parallel, framed(paris, {"name": "ping", "arguments": {}}))


def test_the_request_grammar_is_the_forced_calls_or_none_and_never_both_with_a_response_format():
    assert request_grammar(request("auto")) is None and request_grammar(request("none")) is None
    grammar = request_grammar(request({"type": "function", "function": {"name": "ping"}}))
    assert matches(grammar, framed({"name": "ping", "arguments": {}}))
    assert not matches(grammar, framed({"name": "get_weather", "arguments": {"city": "Rome"}}))
    both = ChatCompletionRequest(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        tools=TOOLS,
        tool_choice="required",
        response_format={"type": "json_object"},
    )
    with pytest.raises(InvalidRequestError) as raised:
        request_grammar(both)
    assert raised.value.field == "tool_choice"


class City(BaseModel):
    name: str
    country: Literal["FR", "NO"]


class Trip(BaseModel):
    origin: City
    stops: list[City]


TRIP = openai.pydantic_function_tool(Trip)  # parameters with $defs and "#/$defs/City" references


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "Trip"}}])
def test_local_references_of_a_pydantic_schema_resolve_and_are_enforced(tool_choice):
    forced = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=[*TOOLS, TRIP], tool_choice=tool_choice)
    grammar = request_grammar(forced)  # was a 400: Pointer '/$defs/City' does not exist
    paris = {"name": "Paris", "country": "FR"}
    trip = {"name": "Trip", "arguments": {"origin": paris, "stops": [{"name": "Oslo", "country": "NO"}]}}
    assert matches(grammar, framed(trip))
    assert not matches(grammar, framed({"name": "Trip", "arguments": {"origin": {"name": "Paris"}, "stops": []}}))
    assert not matches(grammar, framed({"name": "Trip", "arguments": {"origin": paris, "stops": [{"name": "Oslo", "country": "SE"}]}}))
    schema = call_schema(forced.tools, forced.tool_choice)
    assert valid(schema, trip) and not valid(schema, {"name": "Trip", "arguments": {"origin": {**paris, "extra": 1}, "stops": []}})


def test_references_are_rebased_but_data_and_property_names_are_not():
    schema = {
        "type": "object",
        "$defs": {"A": {"type": "integer"}},
        "properties": {
            "$ref": {"$ref": "#/$defs/A"},
            "whole": {"$ref": "#"},
            "remote": {"$ref": "other.json#/x"},
            "fixed": {"const": {"$ref": "#/$defs/A"}},
            "anchor": {"$ref": "#name"},
        },
    }
    moved = rebased(schema, "#/$defs/args_3")
    properties = moved["properties"]
    assert properties["$ref"] == {"$ref": "#/$defs/args_3/$defs/A"} and properties["whole"] == {"$ref": "#/$defs/args_3"}
    assert properties["remote"] == {"$ref": "other.json#/x"} and properties["anchor"] == {"$ref": "#name"}
    assert properties["fixed"] == {"const": {"$ref": "#/$defs/A"}}  # a value, not a reference
    assert moved["$defs"] == schema["$defs"]
