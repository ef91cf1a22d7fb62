"""Verify's side of tool calls: the proto's tools, calls and results rendered into the prompt ids, and
refused (naming the field) when malformed or too large."""

from __future__ import annotations

import json

import pytest
from tool_support import CONVERSATION, TOOLS

from specdec.errors import InvalidRequestError
from specdec.prompts import encode_chat
from specdec.serving.tool_prompt import render_input
from specdec.v1 import verify_pb2
from verify_service.requests import check_prompt_size, prompt_ids_from_options


def test_verify_renders_the_protos_tools_and_calls(tiny_target):
    chat = verify_pb2.ChatMessages(tools_json=json.dumps(TOOLS))
    chat.messages.add(role="user", content="Weather in Paris?")
    chat.messages.add(role="assistant", tool_calls=[verify_pb2.ToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris"}')])
    chat.messages.add(role="tool", content='{"temperature": 21}', tool_call_id="call_1")
    ids = prompt_ids_from_options(verify_pb2.GenerationOptions(chat=chat), tiny_target)
    expected = render_input(CONVERSATION, TOOLS, native=False)
    assert ids == encode_chat(tiny_target.tokenizer, expected.messages)
    without_tools = verify_pb2.GenerationOptions(chat=verify_pb2.ChatMessages(messages=chat.messages))
    assert len(prompt_ids_from_options(without_tools, tiny_target)) < len(ids)


@pytest.mark.parametrize("tools_json", ["{not json", '{"type": "function"}', "[1, 2]"])
def test_verify_refuses_tools_that_are_not_a_json_array_of_objects(tiny_target, tools_json):
    chat = verify_pb2.ChatMessages(tools_json=tools_json, messages=[verify_pb2.ChatMessage(role="user", content="hi")])
    with pytest.raises(InvalidRequestError) as raised:
        prompt_ids_from_options(verify_pb2.GenerationOptions(chat=chat), tiny_target)
    assert raised.value.field == "options.chat.tools_json"


def test_verifys_size_check_counts_the_tools_and_calls():
    chat = verify_pb2.ChatMessages(messages=[verify_pb2.ChatMessage(role="user", content="hi")])
    assert check_prompt_size(verify_pb2.GenerationOptions(chat=chat), max_context=10, max_chars=100) == 2
    chat.messages.add(role="assistant", tool_calls=[verify_pb2.ToolCall(id="c", name="f", arguments='{"a": 1}')])
    assert check_prompt_size(verify_pb2.GenerationOptions(chat=chat), max_context=10, max_chars=100) == 2 + 1 + 8
    chat.tools_json = json.dumps(TOOLS * 2)
    with pytest.raises(InvalidRequestError) as raised:
        check_prompt_size(verify_pb2.GenerationOptions(chat=chat), max_context=10, max_chars=100)
    assert raised.value.field == "options.chat.messages"
