"""The model's output -> content and OpenAI `tool_calls`, fed in pieces as a stream arrives.

Calls are written TOOL_CALL_OPEN {"name": ..., "arguments": {...}} TOOL_CALL_CLOSE (the format the
prompt asks for: specdec/serving/tool_prompt.py). A streamed and a whole output go through the same parser,
so their calls and content are the same. NOTE: text that may be the start of a marker is held back
until it is known not to be one, so no marker reaches the content; whitespace next to a call is
dropped (held back while it may be), as OpenAI gives content without the calls' separators.

An output that ends inside a call (cut short by max_tokens, or stopped mid-call) returns the calls
completed before it and the content outside it: the unfinished call is dropped, neither content nor a
call, and the choice keeps its finish_reason ("length" for a cut). A possible marker start held back
when the output is cut short is dropped with it. No tool-call markup reaches `content` that way.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

from specdec.serving.tool_format import TOOL_CALL_CLOSE, TOOL_CALL_OPEN


@dataclass(frozen=True)
class ParsedCall:
    index: int  # among this choice's calls
    id: str
    name: str
    arguments: str  # JSON text

    def message_entry(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def stream_deltas(self) -> list[dict]:
        """OpenAI's chunk form: the call's index, id, type and name first, then its arguments."""
        return [
            {"index": self.index, "id": self.id, "type": "function", "function": {"name": self.name, "arguments": ""}},
            {"index": self.index, "function": {"arguments": self.arguments}},
        ]


@dataclass
class OutputDelta:
    content: str = ""
    calls: list[ParsedCall] = field(default_factory=list)

    def extend(self, other: OutputDelta) -> OutputDelta:
        self.content += other.content
        self.calls.extend(other.calls)
        return self


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _held_marker_prefix(text: str) -> int:
    """The length of the longest end of `text` that TOOL_CALL_OPEN starts with."""
    for size in range(min(len(text), len(TOOL_CALL_OPEN) - 1), 0, -1):
        if TOOL_CALL_OPEN.startswith(text[-size:]):
            return size
    return 0


class ToolCallParser:
    """Splits output text into content and calls to the known `functions`.

    A marked block that is not a call to one of them (not JSON, no name, an unknown name) stays in
    the content as written. With `parallel` false, calls after the first are dropped.
    """

    def __init__(self, functions: set[str], parallel: bool = True) -> None:
        self.functions, self.parallel = functions, parallel
        self.pending = ""  # unreleased text: a possible marker start, trailing whitespace or a call's body
        self.gap = ""  # the whitespace before the open call's marker (content again if it is no call)
        self.in_call = False
        self.calls = 0
        self.released = False  # content was released since the last call (its whitespace is content)

    def feed(self, text: str) -> OutputDelta:
        self.pending += text
        delta = OutputDelta()
        while True:
            if self.in_call:
                end = self.pending.find(TOOL_CALL_CLOSE)
                if end < 0:
                    return delta
                body, self.pending = self.pending[:end], self.pending[end + len(TOOL_CALL_CLOSE) :]
                self.in_call = False
                delta.extend(self._call(body))
                continue
            start = self.pending.find(TOOL_CALL_OPEN)
            if start < 0:
                delta.content += self._release(len(self.pending) - _held_marker_prefix(self.pending))
                return delta
            before = self.pending[:start]
            self.pending = self.pending[start + len(TOOL_CALL_OPEN) :]
            delta.content += self._content(before.rstrip())
            self.gap, self.in_call = before[len(before.rstrip()) :], True

    def finish(self, finish_reason: str = "stop") -> OutputDelta:
        """The end of the output, which stopped for `finish_reason` (verify's: "stop", "length").

        An unfinished call (its open marker and no close: a forced call cut short by max_tokens, say) is
        dropped, not returned as content: the choice gives the calls completed before it, the content
        outside it and its own finish_reason ("length"). Held-back text that may start a marker is
        dropped too when the output was cut short ("length": it was most likely a call's start, "<tool_c");
        after a model's own stop it was not a marker, and is content.
        """
        held = _held_marker_prefix(self.pending)
        if self.in_call:  # the whitespace before it is a call's separator: not content either
            text = ""
        elif finish_reason == "length" and held:
            text = self.pending[:-held].rstrip()  # likewise the whitespace before a cut marker
        else:
            text = self.pending
        self.pending, self.gap, self.in_call = "", "", False
        return OutputDelta(self._content(text.rstrip() if self.calls else text))

    def _release(self, size: int) -> str:
        """Release pending[:size] but its trailing whitespace (which may come before a call)."""
        text = self.pending[:size]
        kept = text.rstrip()
        self.pending = text[len(kept) :] + self.pending[size:]
        return self._content(kept)

    def _content(self, text: str) -> str:
        if self.calls and not self.released:
            text = text.lstrip()  # the separator after a call
        self.released = self.released or bool(text)
        return text

    def _call(self, body: str) -> OutputDelta:
        parsed = _parse_call(body, self.functions)
        if parsed is None:
            return OutputDelta(self._content(f"{self.gap}{TOOL_CALL_OPEN}{body}{TOOL_CALL_CLOSE}"))
        self.released = False
        self.calls += 1
        if self.calls > 1 and not self.parallel:
            return OutputDelta()
        name, arguments = parsed
        return OutputDelta(calls=[ParsedCall(self.calls - 1, new_call_id(), name, arguments)])


def _parse_call(body: str, functions: set[str]) -> tuple[str, str] | None:
    """(name, arguments as JSON text) of a call's body, or None when it is not a call to one of `functions`."""
    try:
        call = json.loads(body)
    except ValueError:
        return None
    if not isinstance(call, dict) or call.get("name") not in functions:
        return None
    arguments = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return call["name"], json.dumps(arguments, ensure_ascii=False)


def parse_output(text: str, functions: set[str], parallel: bool = True, finish_reason: str = "stop") -> OutputDelta:
    """A whole output at once (what feeding it in pieces gives, in one delta)."""
    parser = ToolCallParser(functions, parallel)
    return parser.feed(text).extend(parser.finish(finish_reason))
