"""Chat messages with tools and tool calls -> the messages (and `tools`) a chat template renders.

A template that renders `tools` and asks for calls in the same syntax the gateway parses (Qwen2.5's,
Hermes': specdec/serving/tool_format.py) renders them itself, from messages in the Hugging Face form
(assistant `tool_calls` with arguments as objects, `role: "tool"` results). Any other template
(SmolLM2's, the tiny pair's, one that asks for another call syntax such as Llama 3.1's) gets the
generic format documented in docs/api.md, Tool calls:
the tools and the call syntax in the system message, calls written in the assistant's text in
specdec/serving/tool_format.py's syntax, results as user turns in <tool_response> tags.
The gateway parses calls in that syntax back out of the output (gateway/tool_calls.py).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field

import jinja2
import jinja2.meta

from specdec.serving.tool_format import CALL_SEPARATOR, TOOL_CALL_OPEN, call_text

GENERIC_TOOLS_PROMPT = """# Tools

You may call these functions, given as JSON signatures:
<tools>
{tools}
</tools>

To call one, write its name and arguments as a JSON object within <tool_call></tool_call> tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""


@dataclass(frozen=True)
class ToolCallText:
    """One call an assistant message made; `arguments` is JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ChatTurn:
    """One chat message as the verify service receives it."""

    role: str
    content: str
    tool_calls: tuple[ToolCallText, ...] = ()
    tool_call_id: str = ""
    name: str = ""


@dataclass(frozen=True)
class RenderInput:
    """What to pass to apply_chat_template: the messages, and `tools` for templates that use them."""

    messages: list[dict]
    tools: list[dict] | None = field(default=None)


def template_renders_tools(chat_template: str | dict | None) -> bool:
    """Whether the template reads the `tools` variable (what apply_chat_template(tools=...) fills) and
    asks for calls in TOOL_CALL_OPEN ... TOOL_CALL_CLOSE, the syntax the gateway parses and constrains."""
    if isinstance(chat_template, dict):  # named templates: transformers picks "tool_use" when tools are given
        chat_template = chat_template.get("tool_use")
    return bool(chat_template) and TOOL_CALL_OPEN in chat_template and _reads_tools(chat_template)


@functools.lru_cache(maxsize=16)  # one template per model: parsed once, not per request
def _reads_tools(chat_template: str) -> bool:
    try:
        return "tools" in jinja2.meta.find_undeclared_variables(jinja2.Environment().parse(chat_template))
    except jinja2.TemplateSyntaxError:
        return False


def _arguments_object(arguments: str):
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def render_input(turns: list[ChatTurn], tools: list[dict], native: bool) -> RenderInput:
    """The messages for the template; `native`: the template renders tools itself (template_renders_tools)."""
    if native:
        return RenderInput([_native_message(turn) for turn in turns], tools or None)
    messages = [_generic_message(turn) for turn in turns]
    if tools:
        messages = _with_tools_prompt(messages, tools)
    return RenderInput(messages)


def _native_message(turn: ChatTurn) -> dict:
    message = {"role": turn.role, "content": turn.content}
    if turn.tool_calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": _arguments_object(call.arguments)}}
            for call in turn.tool_calls
        ]
    if turn.tool_call_id:
        message["tool_call_id"] = turn.tool_call_id
    if turn.name:
        message["name"] = turn.name
    return message


def _generic_message(turn: ChatTurn) -> dict:
    if turn.role == "tool":
        return {"role": "user", "content": f"<tool_response>\n{turn.content}\n</tool_response>"}
    if turn.tool_calls:
        calls = CALL_SEPARATOR.join(call_text(call.name, call.arguments) for call in turn.tool_calls)
        return {"role": turn.role, "content": f"{turn.content}\n{calls}" if turn.content else calls}
    return {"role": turn.role, "content": turn.content}


def _with_tools_prompt(messages: list[dict], tools: list[dict]) -> list[dict]:
    """The tools prompt as the system message, after the client's own system text when there is one."""
    prompt = GENERIC_TOOLS_PROMPT.format(tools="\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools))
    if messages and messages[0]["role"] in ("system", "developer"):
        first = messages[0]
        return [{"role": first["role"], "content": f"{first['content']}\n\n{prompt}"}, *messages[1:]]
    return [{"role": "system", "content": prompt}, *messages]
