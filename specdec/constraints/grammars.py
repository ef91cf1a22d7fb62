"""Grammars for structured outputs: response_format (and extensions) -> an llguidance grammar string.

The grammar string is what travels, unchanged: gateway -> verify (GenerationOptions.grammar) ->
draft (ProposeOpen.grammar). Building one needs no tokenizer and no torch, so the gateway refuses a
bad schema before any model work; verify checks it again against its own vocabulary.

JSON is generated compactly but readably: ", " between items, ": " after keys, no other
whitespace (a small model given free whitespace can emit newlines forever).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import llguidance

from specdec.errors import InvalidRequestError
from specdec.limits import MAX_GRAMMAR_CHARS

JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
RESPONSE_FORMAT_FIELD = "response_format"
SCHEMA_FIELD = "response_format.json_schema.schema"
MAX_REASON_CHARS = 300  # of an engine's message echoed in a 400
# llguidance quotes the grammar's source lines ("   2 | body: %json {...}") under its message: a
# generated grammar holds every tool's schema, so a 400 would echo the whole request back.
_SOURCE_LINE = re.compile(r"^\s*\d+ \| ", re.MULTILINE)


def brief_reason(message: str, grammar: str = "") -> str:
    """An engine's `message` fit for an error body: without the quoted grammar source, at most MAX_REASON_CHARS."""
    source = _SOURCE_LINE.search(message)
    reason = message[: source.start()] if source else message
    if len(grammar) > 40:  # NOTE: a short grammar cannot be told from the message's own words
        reason = reason.replace(grammar, "<the grammar>")
    reason = reason.strip()
    return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 1] + "…"


def json_schema_grammar(schema: Any, field: str) -> str:
    """The grammar of JSON documents valid under `schema`; an unusable schema is refused naming `field`.

    Refused: a schema that is not an object or boolean, an invalid one (unknown type, dangling
    $ref, bad pattern) and features the engine cannot enforce (look-around in patterns, unknown
    formats): each an InvalidRequestError with the engine's reason.
    """
    if not isinstance(schema, (dict, bool)):
        raise InvalidRequestError(field, f"must be a JSON schema (an object), got {type(schema).__name__}")
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_LAYOUT)
    except (ValueError, TypeError) as error:
        raise InvalidRequestError(field, f"is not a usable JSON schema: {brief_reason(str(error))}") from error
    return checked_grammar(grammar, field)


def json_object_grammar() -> str:
    """JSON mode: any JSON object."""
    return json_schema_grammar({"type": "object"}, RESPONSE_FORMAT_FIELD)


def regex_grammar(pattern: str, field: str) -> str:
    """Extension: output matching `pattern` in full (Rust regex syntax, no look-around or backreferences)."""
    return checked_grammar(llguidance.LLMatcher.grammar_from_regex(pattern), field)


def choice_grammar(choices: Sequence[str], field: str) -> str:
    """Extension: output exactly one of `choices`."""
    if not choices or not all(isinstance(choice, str) and choice for choice in choices):
        raise InvalidRequestError(field, "must be a non-empty list of non-empty strings")
    # Lark string literals take JSON's escapes.
    return checked_grammar(llguidance.LLMatcher.grammar_from_lark("start: " + " | ".join(json.dumps(c) for c in choices)), field)


def lark_grammar(text: str, field: str) -> str:
    """Extension: a grammar in llguidance's Lark dialect (https://github.com/guidance-ai/llguidance)."""
    return checked_grammar(llguidance.LLMatcher.grammar_from_lark(text), field)


def check_grammar_size(grammar: str, field: str) -> None:
    """The cheap check, made before any grammar work (on every door: gateway, verify, draft)."""
    if len(grammar) > MAX_GRAMMAR_CHARS:
        raise InvalidRequestError(field, f"is too large ({len(grammar)} characters of grammar; at most {MAX_GRAMMAR_CHARS})")


@functools.lru_cache(maxsize=64)
def _validation(grammar: str) -> tuple[bool, list[str]]:
    """llguidance's check of a grammar (half a second for 5,000 properties), cached: a client repeating a schema pays once."""
    return llguidance.LLMatcher.validate_grammar_with_warnings(grammar)


def checked_grammar(grammar: str, field: str) -> str:
    """`grammar` if the engine can enforce it, else an InvalidRequestError naming `field`."""
    check_grammar_size(grammar, field)
    is_error, messages = _validation(grammar)
    if is_error:
        raise InvalidRequestError(field, f"cannot be enforced: {brief_reason(messages[0], grammar)}")
    return grammar


def response_format_grammar(response_format: Mapping[str, Any] | None) -> str | None:
    """The grammar for an OpenAI `response_format` (as a dict); None for `text` or none at all.

    Types: `text`, `json_object`, `json_schema` ({"json_schema": {"name", "schema", "strict"}}) and,
    as extensions, `regex` ({"regex": "..."}), `choice` ({"choice": [...]}) and `grammar`
    ({"grammar": "<lark>"}).
    """
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return json_object_grammar()
    if kind == "json_schema":
        if not response_format.get("json_schema"):
            raise InvalidRequestError("response_format.json_schema", "is required when the type is json_schema")
        return json_schema_grammar(response_format["json_schema"].get("schema", {}), SCHEMA_FIELD)
    if kind == "regex":
        return regex_grammar(response_format.get("regex", ""), "response_format.regex")
    if kind == "choice":
        return choice_grammar(response_format.get("choice") or [], "response_format.choice")
    if kind == "grammar":
        return lark_grammar(response_format.get("grammar", ""), "response_format.grammar")
    raise InvalidRequestError("response_format.type", f"unknown type {kind!r}")
