"""The output constraint for tool_choice "required" or a named function: calls whose arguments
validate against their function's parameter schema, in the syntax the gateway parses.

Two forms of the same constraint, for the grammar engine to take whichever it compiles:
- call_schema: the JSON schema of one call object {"name", "arguments"} (an anyOf over the tools for
  "required", the one function's for a named choice);
- call_grammar: a Lark grammar (llguidance's dialect, with %json) for the whole output, the
  TOOL_CALL_OPEN/TOOL_CALL_CLOSE markers included, one call or (parallel) several.

Each arguments schema sits under the call schema's root `$defs` (ARGUMENTS_DEF), its local `$ref`s
rebased there: a `#/$defs/City` (what pydantic generates) must still find City once the schema is
no longer a root.
"""

from __future__ import annotations

import json

from gateway.protocol import ChatCompletionRequest, CompletionRequest
from gateway.tool_protocol import FunctionTool, NamedToolChoice, ToolChoice, check_parameter_schemas
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


ARGUMENTS_DEF = "args_{}"  # the $defs entry of the i-th forced function's arguments schema
# Keywords whose values are data, not schemas: a "$ref" inside them is not a reference.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
# Keywords whose values map names to schemas: the names are not keywords.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def rebased(schema, base: str):
    """`schema` with its local references ("#", "#/...") pointing below the JSON pointer `base` ("#/$defs/args_0")."""
    if isinstance(schema, list):
        return [rebased(item, base) for item in schema]
    if not isinstance(schema, dict):
        return schema
    moved = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and (value == "#" or value.startswith("#/")):
            moved[key] = base + value[1:]
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            moved[key] = {name: rebased(item, base) for name, item in value.items()}
        elif key in _DATA_KEYWORDS:
            moved[key] = value
        else:
            moved[key] = rebased(value, base)
    return moved


def function_call_schema(tool: FunctionTool, arguments_ref: str) -> dict:
    return {
        "type": "object",
        "properties": {"name": {"const": tool.function.name}, "arguments": {"$ref": arguments_ref}},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def call_schema(tools: list[FunctionTool], choice: ToolChoice | None) -> dict | None:
    """One call object's schema, or None when the choice forces no call."""
    forced = forced_functions(tools, choice)
    if not forced:
        return None
    definitions, calls = {}, []
    for index, tool in enumerate(forced):
        name = ARGUMENTS_DEF.format(index)
        # NOTE: an $id would make it a resource of its own, which the rebased references do not point into
        own = {key: value for key, value in tool.function.arguments_schema.items() if key != "$id"}
        definitions[name] = rebased(own, f"#/$defs/{name}")
        calls.append(function_call_schema(tool, f"#/$defs/{name}"))
    return {**(calls[0] if len(calls) == 1 else {"anyOf": calls}), "$defs": definitions}


def call_grammar(tools: list[FunctionTool], choice: ToolChoice | None, parallel: bool) -> str | None:
    """The whole output as a Lark grammar: marked calls (one, or one or more when `parallel`), nothing else."""
    schema = call_schema(tools, choice)
    if schema is None:
        return None
    schema = {**schema, "x-guidance": JSON_LAYOUT}  # the separators the prompt shows, no free whitespace
    # Lark string literals take JSON's escapes; the framing is specdec.serving.tool_format.call_text's
    repeat = f" ({json.dumps(CALL_SEPARATOR)} call)*" if parallel else ""
    return "\n".join(
        [
            f"start: call{repeat}",
            f"call: {json.dumps(TOOL_CALL_OPEN + chr(10))} body {json.dumps(chr(10) + TOOL_CALL_CLOSE)}",
            f"body: %json {json.dumps(schema)}",
            "",
        ]
    )


def forces_call(request: ChatCompletionRequest | CompletionRequest) -> bool:
    return isinstance(request, ChatCompletionRequest) and bool(forced_functions(request.active_tools, request.tool_choice))


def needs_checked_grammar(request: ChatCompletionRequest | CompletionRequest) -> bool:
    """Whether request_grammar has work to do: schemas to check or a grammar to compile."""
    return request.response_format is not None or bool(isinstance(request, ChatCompletionRequest) and request.tools)


def request_grammar(request: ChatCompletionRequest | CompletionRequest) -> str | None:
    """The checked grammar the output must match: response_format's, or the forced calls'; both is a 400.
    Checks every tool's parameter schema first. CPU work (seconds for large schemas): run it off the event loop."""
    if isinstance(request, ChatCompletionRequest):
        check_parameter_schemas(request.tools)
    formatted = response_format_grammar(request.response_format.as_dict()) if request.response_format is not None else None
    if not forces_call(request):
        return formatted
    if formatted:
        raise InvalidRequestError("tool_choice", "a forced tool call cannot be combined with a response_format (the output is the call)")
    return lark_grammar(call_grammar(request.active_tools, request.tool_choice, request.parallel_tool_calls), "tool_choice")
