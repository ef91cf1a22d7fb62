"""The output constraint for tool_choice "required" or a named function: calls whose arguments
validate against their function's parameter schema, in the syntax the gateway parses.

Two forms of the same constraint, for the grammar engine to take whichever it compiles:
- call_schema: the JSON schema of one call object {"name", "arguments"} (an anyOf over the tools for
  "required", the one function's for a named choice);
- call_grammar: a Lark grammar (llguidance's dialect, with %json) for the whole output, the
  TOOL_CALL_OPEN/TOOL_CALL_CLOSE markers included, one call or (parallel) several.
"""

from __future__ import annotations

import json

from gateway.protocol import ChatCompletionRequest, CompletionRequest
from gateway.tool_protocol import FunctionTool, NamedToolChoice, ToolChoice
from specdec.constraints.grammars import JSON_LAYOUT, lark_grammar, response_format_grammar
from specdec.errors import InvalidRequestError
from specdec.serving.tool_format import CALL_SEPARATOR, TOOL_CALL_CLOSE, TOOL_CALL_OPEN


def forced_functions(tools: list[FunctionTool], choice: ToolChoice | None) -> list[FunctionTool]:
    """The functions the output must call one of: all for "required", one when named, none otherwise."""
    if choice == "required":
        return tools
    if isinstance(choice, NamedToolChoice):
        return [tool for tool in tools if tool.function.name == choice.function.name]
    return []


def function_call_schema(tool: FunctionTool) -> dict:
    function = tool.function
    return {"type": "object", "properties": {"name": {"const": function.name}, "arguments": function.arguments_schema},
            "required": ["name", "arguments"], "additionalProperties": False}


def call_schema(tools: list[FunctionTool], choice: ToolChoice | None) -> dict | None:
    """One call object's schema, or None when the choice forces no call."""
    schemas = [function_call_schema(tool) for tool in forced_functions(tools, choice)]
    if not schemas:
        return None
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def call_grammar(tools: list[FunctionTool], choice: ToolChoice | None, parallel: bool) -> str | None:
    """The whole output as a Lark grammar: marked calls (one, or one or more when `parallel`), nothing else."""
    schema = call_schema(tools, choice)
    if schema is None:
        return None
    schema = {**schema, "x-guidance": JSON_LAYOUT}  # the separators the prompt shows, no free whitespace
    # Lark string literals take JSON's escapes; the framing is specdec.serving.tool_format.call_text's
    repeat = f" ({json.dumps(CALL_SEPARATOR)} call)*" if parallel else ""
    return "\n".join([f"start: call{repeat}",
                      f"call: {json.dumps(TOOL_CALL_OPEN + chr(10))} body {json.dumps(chr(10) + TOOL_CALL_CLOSE)}",
                      f"body: %json {json.dumps(schema)}", ""])


def forces_call(request: ChatCompletionRequest | CompletionRequest) -> bool:
    return isinstance(request, ChatCompletionRequest) and bool(forced_functions(request.active_tools, request.tool_choice))


def request_grammar(request: ChatCompletionRequest | CompletionRequest) -> str | None:
    """The checked grammar the output must match: response_format's, or the forced calls'; both is a 400.
    Compiling checks the schemas (CPU work): run it off the event loop."""
    formatted = response_format_grammar(request.response_format.as_dict()) if request.response_format is not None else None
    if not forces_call(request):
        return formatted
    if formatted:
        raise InvalidRequestError("tool_choice", "a forced tool call cannot be combined with a response_format (the output is the call)")
    return lark_grammar(call_grammar(request.active_tools, request.tool_choice, request.parallel_tool_calls), "tool_choice")
