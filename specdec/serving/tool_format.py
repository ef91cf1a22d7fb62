"""The syntax of a tool call in model text (the generic format, docs/api.md, Tool calls), shared by what
renders calls into prompts (verify: specdec/serving/tool_prompt.py), what parses them out of outputs and
what constrains forced calls (the gateway). Torch- and template-free."""

from __future__ import annotations

import json

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
CALL_SEPARATOR = "\n"  # between consecutive calls


def call_text(name: str, arguments: str) -> str:
    """One call: the markers around {"name", "arguments"}; `arguments` (JSON text) is carried as a
    string when it is not JSON, never dropped."""
    try:
        arguments_json = json.dumps(json.loads(arguments), ensure_ascii=False)
    except ValueError:
        arguments_json = json.dumps(arguments)
    return f'{TOOL_CALL_OPEN}\n{{"name": {json.dumps(name)}, "arguments": {arguments_json}}}\n{TOOL_CALL_CLOSE}'
