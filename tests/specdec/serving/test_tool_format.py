"""The generic tool-call syntax (pure); tests/gateway/test_tool_calls.py parses it back."""

from __future__ import annotations

from specdec.serving.tool_format import call_text


def test_arguments_that_are_not_json_are_carried_as_a_string():
    assert call_text("f", "not json") == '<tool_call>\n{"name": "f", "arguments": "not json"}\n</tool_call>'
    assert call_text("f", '{"b":1,  "a": "é"}') == '<tool_call>\n{"name": "f", "arguments": {"b": 1, "a": "é"}}\n</tool_call>'
