"""The constraint for tool_choice "required" / a named function (pure): its JSON schema accepts the
calls the parser takes and only those, and its grammar compiles in llguidance."""

from __future__ import annotations

import json

import jsonschema
import llguidance
import pytest

from gateway.protocol import ChatCompletionRequest
from gateway.tool_calls import parse_output
from gateway.tool_constraint import call_grammar, call_schema

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "ping"}}]


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
    framed = "\n".join('<tool_call>\n' + json.dumps(call) + '\n</tool_call>' for call in
                       ({"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "ping", "arguments": {}}))
    parsed = parse_output(framed, {"get_weather", "ping"})
    assert parsed.content == "" and [call.name for call in parsed.calls] == ["get_weather", "ping"]
