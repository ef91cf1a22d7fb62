"""OpenAI tool-calling models: `tools`, `tool_choice`, and the `tool_calls` of assistant messages."""

from __future__ import annotations

import json
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, field_validator

from specdec.constraints.grammars import MAX_GRAMMAR_CHARS, brief_reason
from specdec.errors import InvalidRequestError
from specdec.limits import TOOL_NAME_PATTERN

# All tools' parameter schemas together, as JSON text: a forced call's grammar holds them all, and
# their meta-schema checks cost seconds of CPU at this size.
MAX_TOOL_SCHEMA_CHARS = MAX_GRAMMAR_CHARS


class _Closed(BaseModel):
    """A field it does not know is a 400 naming it (nothing silently ignored)."""

    model_config = ConfigDict(extra="forbid")


def check_json_schema(schema: dict, field: str) -> None:
    """`schema` against its draft's meta-schema ($schema, else the newest jsonschema knows); CPU work
    (seconds for large schemas): run it off the event loop. Refused: an InvalidRequestError naming `field`."""
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as error:
        where = "/".join(str(part) for part in error.absolute_path)
        at = f" at {where}" if where else ""
        raise InvalidRequestError(field, f"is not a valid JSON schema{at}: {brief_reason(error.message)}") from None
    except RecursionError:
        raise InvalidRequestError(field, "is nested too deeply to check") from None


class FunctionDefinition(_Closed):
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = Field(None, description="a JSON schema of the arguments object")
    strict: bool | None = Field(None, description="accepted; arguments are enforced by the grammar when tool_choice forces a call")

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict | None) -> dict | None:
        # Cheap checks only: this runs while FastAPI reads the body, on the event loop (the meta-schema
        # check is check_parameter_schemas, off the loop).
        if value is None:
            return value
        if not isinstance(value.get("$schema", ""), str):
            raise ValueError("is not a valid JSON schema: $schema must be a meta-schema URI (a string)")
        if value.get("type", "object") != "object":
            raise ValueError(f'must describe the arguments object (type "object"), not type {json.dumps(value["type"])}')
        return value

    @property
    def arguments_schema(self) -> dict:
        return self.parameters if self.parameters is not None else {"type": "object"}


class FunctionTool(_Closed):
    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(_Closed):
    name: str


class NamedToolChoice(_Closed):
    """tool_choice naming the function the model must call."""

    type: Literal["function"]
    function: FunctionName


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class FunctionCall(_Closed):
    name: str
    arguments: str = Field(description="JSON text")


class ToolCall(_Closed):
    """A call in an assistant message, as a response gave it (sent back in the conversation)."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


def check_tools(tools: list[FunctionTool] | None) -> list[FunctionTool] | None:
    """Unique names, and parameter schemas small enough to check (before any meta-schema check runs)."""
    if tools is not None:
        size = 0
        for tool in tools:
            size += len(json.dumps(tool.function.parameters)) if tool.function.parameters is not None else 0
            if size > MAX_TOOL_SCHEMA_CHARS:
                raise ValueError(f"the tools' parameter schemas are too large (over {MAX_TOOL_SCHEMA_CHARS} characters of JSON together)")
        names = [tool.function.name for tool in tools]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"function names must be unique; repeated: {', '.join(repeated)}")
    return tools


def check_parameter_schemas(tools: list[FunctionTool] | None) -> None:
    """Each tool's parameters against the meta-schema, naming the first bad one (tools.<i>.function.parameters)."""
    for index, tool in enumerate(tools or []):
        if tool.function.parameters is not None:
            check_json_schema(tool.function.parameters, f"tools.{index}.function.parameters")


def check_tool_choice(choice: ToolChoice | None, tools: list[FunctionTool] | None) -> ToolChoice | None:
    """As OpenAI: a choice other than "none" needs tools, and a named function must be one of them."""
    if choice is None or choice == "none":
        return choice
    if not tools:
        raise ValueError("needs `tools`: there is no function to call")
    if isinstance(choice, NamedToolChoice) and choice.function.name not in {tool.function.name for tool in tools}:
        known = ", ".join(tool.function.name for tool in tools)
        raise ValueError(f"names function {choice.function.name!r}, which is not in `tools` ({known})")
    return choice
