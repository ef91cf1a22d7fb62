"""Rendering tools, assistant calls and tool results into the prompt: the model's own template when it
renders `tools`, else the generic format (SmolLM2's template, the tiny pair's)."""

from __future__ import annotations

import json

from tool_support import CONVERSATION, TOOLS
from transformers import AutoTokenizer

from specdec.prompts import encode_chat
from specdec.serving.tool_prompt import ChatTurn, render_input, template_renders_tools

SMOLLM2_TOKENIZER = "specdec/assets/smollm2-135m-instruct-draft"
# A template in the style of Qwen2.5's: it renders `tools` and calls itself (arguments as objects), and
# asks for calls in <tool_call> tags.
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTOOLS:{% for tool in tools %} {{ tool.function.name }}{% endfor %}"
    " in <tool_call><|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}"
    "{% for call in message.tool_calls or [] %}"
    "CALL {{ call.function.name }} {{ call.function.arguments | tojson }} ID {{ call.id }}{% endfor %}"
    "{% if message.tool_call_id %}RESULT FOR {{ message.tool_call_id }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def rendered_text(tokenizer, turns, tools) -> str:
    given = render_input(turns, tools, template_renders_tools(tokenizer.chat_template))
    return tokenizer.decode(encode_chat(tokenizer, given.messages, tools=given.tools))


def test_smollm2s_template_does_not_render_tools_and_a_tools_template_does():
    assert not template_renders_tools(AutoTokenizer.from_pretrained(SMOLLM2_TOKENIZER).chat_template)
    assert template_renders_tools(TOOLS_TEMPLATE) and template_renders_tools({"default": "x", "tool_use": TOOLS_TEMPLATE})
    assert not template_renders_tools("{{ messages }} {{ tool }} <tool_call>") and not template_renders_tools(None)
    assert not template_renders_tools("{% broken <tool_call>") and not template_renders_tools({"default": TOOLS_TEMPLATE})
    # renders tools but asks for calls in another syntax (as Llama 3.1's does): the generic format
    assert not template_renders_tools(TOOLS_TEMPLATE.replace(" in <tool_call>", ""))


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
    assert text.startswith("<|im_start|>system\nTOOLS: get_weather in <tool_call><|im_end|>")
    assert 'CALL get_weather {"city": "Paris"} ID call_1' in text  # arguments reach the template as an object
    assert "<|im_start|>tool\n" in text and "RESULT FOR call_1" in text and "<tool_response>" not in text
