"""response_format and JSON schemas -> grammars; what the engine cannot enforce is refused, naming the field."""

from __future__ import annotations

import json

import llguidance
import pytest

from specdec.constraints.grammars import (
    MAX_GRAMMAR_CHARS,
    MAX_REASON_CHARS,
    SCHEMA_FIELD,
    brief_reason,
    choice_grammar,
    json_schema_grammar,
    lark_grammar,
    regex_grammar,
    response_format_grammar,
)
from specdec.errors import InvalidRequestError

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def test_text_and_missing_response_format_mean_no_grammar():
    assert response_format_grammar(None) is None
    assert response_format_grammar({"type": "text"}) is None


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA, "strict": True}},
        {"type": "regex", "regex": "[a-z]+"},
        {"type": "choice", "choice": ["yes", "no", 'say "hi"']},
        {"type": "grammar", "grammar": 'start: "a" | "b"'},
    ],
)
def test_each_type_gives_a_grammar_the_engine_accepts(response_format):
    grammar = response_format_grammar(response_format)
    assert llguidance.LLMatcher.validate_grammar(grammar) == ""


@pytest.mark.parametrize(
    "schema, reason",
    [
        ({"type": "objectx"}, "Invalid type"),
        ({"type": "object", "properties": {"a": {"$ref": "#/nope"}}}, "/nope"),
        ({"type": "string", "pattern": "(?=a)b"}, "look-around"),  # valid JSON Schema the engine cannot enforce
        ({"type": "string", "format": "no-such-format"}, "format"),
        ([1, 2], "must be a JSON schema"),
    ],
)
def test_bad_or_unenforceable_schemas_are_refused_naming_the_schema_field(schema, reason):
    with pytest.raises(InvalidRequestError, match=reason) as caught:
        response_format_grammar({"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    assert caught.value.field == SCHEMA_FIELD == "response_format.json_schema.schema"


def test_json_schema_type_needs_its_json_schema():
    with pytest.raises(InvalidRequestError) as caught:
        response_format_grammar({"type": "json_schema"})
    assert caught.value.field == "response_format.json_schema"


def test_extensions_name_their_own_fields():
    with pytest.raises(InvalidRequestError) as caught:
        regex_grammar("[a-z", "response_format.regex")
    assert caught.value.field == "response_format.regex"
    with pytest.raises(InvalidRequestError):
        choice_grammar([], "response_format.choice")


def test_oversized_schemas_are_refused():
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(MAX_GRAMMAR_CHARS // 100)},
    }
    with pytest.raises(InvalidRequestError, match="too large"):
        json_schema_grammar(schema, SCHEMA_FIELD)


def test_the_grammar_is_a_json_document_carrying_the_schema():
    assert json.loads(json_schema_grammar(SCHEMA, SCHEMA_FIELD))["grammars"][0]["json_schema"]["properties"] == SCHEMA["properties"]


def test_a_refusal_quotes_the_engines_reason_but_not_the_grammar():
    """llguidance quotes the failing grammar line under its message: for a generated grammar, the whole schema."""
    schema = {"type": "object", "properties": {f"field_{index}": {"type": "string", "pattern": "^(?=a)a$"} for index in range(200)}}
    grammar = f"start: body\nbody: %json {json.dumps(schema)}\n"
    with pytest.raises(InvalidRequestError) as raised:
        lark_grammar(grammar, "tool_choice")
    message = str(raised.value)
    assert raised.value.field == "tool_choice" and "look-around" in message
    assert "field_1" not in message and len(message) <= len("tool_choice: cannot be enforced: ") + MAX_REASON_CHARS


def test_brief_reason_drops_quoted_source_and_caps_the_rest():
    quoted = "at 2(6): failed to compile\n   1 | start: body\n   2 | body: %json {...}\n            ^\n"
    assert brief_reason(quoted) == "at 2(6): failed to compile"
    grammar = "start: " + " | ".join(f'"word{index}"' for index in range(50))
    assert brief_reason(f"cannot parse {grammar} here", grammar) == "cannot parse <the grammar> here"
    long = brief_reason("x" * 10_000)
    assert len(long) == MAX_REASON_CHARS and long.endswith("…")
