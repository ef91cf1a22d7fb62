"""Rendering tools, assistant calls and tool results into the prompt: the model's own template when it
renders `tools`, else the generic format (SmolLM2's template, the tiny pair's); and verify's path from
the proto to the prompt ids."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from specdec.errors import InvalidRequestError
from specdec.prompts import encode_chat
from specdec.tool_prompt import ChatTurn, ToolCallText, render_input, template_uses_tools
from specdec.v1 import verify_pb2
from verify_service.requests import check_prompt_size, prompt_ids_from_options

SMOLLM2_TOKENIZER = "specdec/assets/smollm2-135m-instruct-draft"
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": CITY}}]
CONVERSATION = [ChatTurn("user", "Weather in Paris?"),
                ChatTurn("assistant", "", (ToolCallText("call_1", "get_weather", '{"city": "Paris"}'),)),
                ChatTurn("tool", '{"temperature": 21}', tool_call_id="call_1", name="get_weather")]
# A template in the style of Qwen2.5's: it renders `tools` and calls itself (arguments as objects).
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTOOLS:{% for tool in tools %} {{ tool.function.name }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}"
    "{% for call in message.tool_calls or [] %}"
    "CALL {{ call.function.name }} {{ call.function.arguments | tojson }} ID {{ call.id }}{% endfor %}"
    "{% if message.tool_call_id %}RESULT FOR {{ message.tool_call_id }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def rendered_text(tokenizer, turns, tools) -> str:
    given = render_input(turns, tools, template_uses_tools(tokenizer.chat_template))
    return tokenizer.decode(encode_chat(tokenizer, given.messages, tools=given.tools))


def test_smollm2s_template_does_not_render_tools_and_a_tools_template_does():
    assert not template_uses_tools(AutoTokenizer.from_pretrained(SMOLLM2_TOKENIZER).chat_template)
    assert template_uses_tools(TOOLS_TEMPLATE) and not template_uses_tools("{{ messages }} {{ tool }}") and not template_uses_tools(None)
    assert template_uses_tools({"default": "x", "tool_use": "y"}) and not template_uses_tools("{% broken")


def test_the_generic_format_puts_the_tools_in_the_system_turn_and_calls_and_results_in_the_text():
    text = rendered_text(AutoTokenizer.from_pretrained(SMOLLM2_TOKENIZER), CONVERSATION, TOOLS)
    system, user, assistant, result = text.split("<|im_end|>\n")[:4]
    assert system.startswith("<|im_start|>system\n# Tools") and json.dumps(TOOLS[0]) in system and "<tool_call>" in system
    assert "SmolLM" not in text  # the tools prompt replaces the template's default system prompt
    assert user == "<|im_start|>user\nWeather in Paris?"
    assert assistant == '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert result == '<|im_start|>user\n<tool_response>\n{"temperature": 21}\n</tool_response>'
    assert text.endswith("<|im_start|>assistant\n")


def test_the_clients_system_text_comes_before_the_tools_prompt():
    turns = [ChatTurn("system", "Be brief."), ChatTurn("user", "Hi")]
    text = rendered_text(AutoTokenizer.from_pretrained(SMOLLM2_TOKENIZER), turns, TOOLS)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools") and text.count("<|im_start|>system") == 1


def test_without_tools_a_conversation_renders_as_before():
    turns = [ChatTurn("user", "Hi"), ChatTurn("assistant", "Hello!")]
    tokenizer = AutoTokenizer.from_pretrained(SMOLLM2_TOKENIZER)
    plain = tokenizer.decode(encode_chat(tokenizer, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]))
    assert rendered_text(tokenizer, turns, []) == plain


def test_a_template_that_renders_tools_gets_them_and_the_calls_in_hugging_faces_form(tiny_pair_paths):
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_pair_paths.target))
    tokenizer.chat_template = TOOLS_TEMPLATE
    text = rendered_text(tokenizer, CONVERSATION, TOOLS)
    assert text.startswith("<|im_start|>system\nTOOLS: get_weather<|im_end|>")
    assert 'CALL get_weather {"city": "Paris"} ID call_1' in text  # arguments reach the template as an object
    assert "<|im_start|>tool\n" in text and "RESULT FOR call_1" in text and "<tool_call>" not in text


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
